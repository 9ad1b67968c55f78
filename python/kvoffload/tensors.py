"""KV tensors as the daemon sees them: per-block-strided byte ranges (DESIGN.md §3).

A worker registers its KV cache as a list of descriptors ``(data_ptr, num_blocks,
block_stride_bytes, page_bytes)``: the worker's bytes for GPU block ``b`` are the concatenation,
over the descriptors in order, of ``page_bytes`` bytes at ``data_ptr + b * block_stride_bytes``.

:func:`kv_tensor_views` derives those descriptors from framework tensors (torch, or anything
with ``data_ptr()``, ``shape``, ``stride()`` and ``element_size()``). Its assumptions:

* One dimension of each tensor indexes GPU blocks (the *block dim*). It is ``block_dim`` if
  given; else the first dim whose size is ``num_blocks`` if that is given; else dim 1 for a
  tensor whose dim 0 has size 2 and that has at least 3 dims (vLLM's per-layer
  ``[2, num_blocks, block_size, num_heads, head_size]`` K/V layout), else dim 0
  (``[num_blocks, ...]``: MLA, FlashInfer's ``[num_blocks, 2, ...]``, block-first/cross-layer
  caches). Pass ``num_blocks`` whenever a cache could have 2 blocks, to remove the ambiguity.
* ``block_stride_bytes = stride(block_dim) * element_size``.
* The dims after the block dim (in any stride order, so permuted physical layouts qualify) must
  cover one dense byte range: ``page_bytes = prod(shape[block_dim + 1:]) * element_size``
  starting at the block's address. A tensor whose per-block part has holes is rejected.
* Every index of the dims *before* the block dim (K and V for ``[2, num_blocks, ...]``) becomes
  its own descriptor, in index order, at ``data_ptr + index · stride · element_size``.
* Adjacent descriptors whose pages touch (``next.data_ptr == prev.data_ptr + prev.page_bytes``,
  same stride and block count; e.g. K and V of a physically ``[num_blocks, 2, ...]`` cache)
  are merged into one: the block's bytes are the same, in the same order.
"""

import collections

TensorView = collections.namedtuple(
    "TensorView", ["data_ptr", "num_blocks", "block_stride_bytes", "page_bytes"])
TensorView.__doc__ = "One strided KV byte range; `data_ptr` is block 0's address."


def _is_tensor(x):
    return hasattr(x, "data_ptr") and hasattr(x, "stride") and hasattr(x, "element_size")


def _tensors_of(kv_caches):
    if _is_tensor(kv_caches):
        return [kv_caches]
    if isinstance(kv_caches, dict):  # vLLM's register_kv_caches(dict[layer_name, Tensor])
        return list(kv_caches.values())
    out = []
    for item in kv_caches:
        out.extend(_tensors_of(item))
    return out


def _block_dim(shape, num_blocks, block_dim):
    if block_dim is not None:
        if not -len(shape) <= block_dim < len(shape):
            raise ValueError("block_dim %d outside a tensor of shape %s" % (block_dim, shape))
        return block_dim % len(shape)
    if num_blocks is not None:
        for d, size in enumerate(shape):
            if size == num_blocks:
                return d
        raise ValueError("no dim of size num_blocks=%d in a tensor of shape %s" %
                         (num_blocks, shape))
    if len(shape) >= 3 and shape[0] == 2:
        return 1
    return 0


def _dense_inner_elements(shape, strides):
    """Elements of the dims after the block dim if they tile a dense range, else None."""
    dims = sorted((st, sz) for st, sz in zip(strides, shape) if sz != 1)
    expected = 1
    for st, sz in dims:
        if st != expected:
            return None
        expected = st * sz
    return expected


def _views_of_tensor(t, num_blocks, block_dim):
    shape = tuple(int(s) for s in t.shape)
    strides = tuple(int(s) for s in t.stride())
    if not shape:
        raise ValueError("a KV tensor cannot be 0-dimensional")
    es = int(t.element_size())
    d = _block_dim(shape, num_blocks, block_dim)
    inner = _dense_inner_elements(shape[d + 1:], strides[d + 1:])
    if inner is None:
        raise ValueError(
            "the dims after the block dim (%d) of a tensor of shape %s, strides %s are not one "
            "dense range per block; pass explicit (data_ptr, num_blocks, block_stride_bytes, "
            "page_bytes) tuples" % (d, shape, strides))
    page = inner * es
    stride_bytes = strides[d] * es
    if shape[d] > 1 and stride_bytes < page:
        raise ValueError("block stride %d bytes is smaller than a page of %d bytes (shape %s, "
                         "strides %s, block dim %d)" % (stride_bytes, page, shape, strides, d))
    base = int(t.data_ptr())
    views = []
    outer = [()]
    for size in shape[:d]:
        outer = [idx + (i,) for idx in outer for i in range(size)]
    for idx in outer:
        offset = sum(i * strides[k] for k, i in enumerate(idx)) * es
        views.append(TensorView(base + offset, shape[d], stride_bytes, page))
    return views


def merge_adjacent(views):
    """Merges consecutive views whose pages touch (same stride and block count)."""
    out = []
    for v in views:
        if out:
            p = out[-1]
            if (p.num_blocks == v.num_blocks and p.block_stride_bytes == v.block_stride_bytes and
                    v.data_ptr == p.data_ptr + p.page_bytes and
                    p.page_bytes + v.page_bytes <= p.block_stride_bytes):
                out[-1] = TensorView(p.data_ptr, p.num_blocks, p.block_stride_bytes,
                                     p.page_bytes + v.page_bytes)
                continue
        out.append(v)
    return out


def kv_tensor_views(kv_caches, num_blocks=None, block_dim=None, merge=True):
    """Descriptors for a worker's KV caches, in registration order.

    kv_caches: a tensor, a list/tuple of tensors (nested allowed), or a dict of layer name to
    tensor (as vLLM's ``register_kv_caches`` gets it; insertion order is kept). See the module
    docstring for the layout assumptions. Returns a list of :class:`TensorView`.
    """
    views = []
    for t in _tensors_of(kv_caches):
        views.extend(_views_of_tensor(t, num_blocks, block_dim))
    return merge_adjacent(views) if merge else views


def as_views(tensors, num_blocks=None, block_dim=None):
    """Accepts one tensor (e.g. a cross-layer cache), tensors, TensorViews or (data_ptr,
    num_blocks, stride, page) tuples, mixed."""
    if _is_tensor(tensors):  # iterating a tensor would walk its first dimension
        return kv_tensor_views(tensors, num_blocks, block_dim)
    out = []
    pending = []
    items = list(tensors.values()) if isinstance(tensors, dict) else list(tensors)
    for item in items:
        if _is_tensor(item) or isinstance(item, (list, dict)):
            pending.append(item)
            continue
        if pending:
            out.extend(kv_tensor_views(pending, num_blocks, block_dim))
            pending = []
        if len(item) != 4:
            raise ValueError("a tensor descriptor is (data_ptr, num_blocks, block_stride_bytes, "
                             "page_bytes), got %r" % (item,))
        out.append(TensorView(*(int(x) for x in item)))
    if pending:
        out.extend(kv_tensor_views(pending, num_blocks, block_dim))
    return out
