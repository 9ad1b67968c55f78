"""kv_tensor_views on tensor-like objects (no torch needed): layouts of vLLM-style KV caches."""

import unittest

from kvoffload import TensorView, kv_tensor_views
from kvoffload.tensors import as_views


class FakeTensor:
    """The torch.Tensor surface kv_tensor_views reads."""

    def __init__(self, ptr, shape, strides=None, element_size=2):
        self.ptr = ptr
        self.shape = tuple(shape)
        if strides is None:  # contiguous
            strides, acc = [], 1
            for size in reversed(self.shape):
                strides.insert(0, acc)
                acc *= size
        self.strides = tuple(strides)
        self.es = element_size

    def data_ptr(self):
        return self.ptr

    def stride(self):
        return self.strides

    def element_size(self):
        return self.es


N, BS, H, D = 100, 16, 8, 128
PAGE = BS * H * D * 2  # bf16


class KvTensorViewsTest(unittest.TestCase):

    def test_vllm_flash_attention_layout_gives_k_and_v(self):
        # [2, num_blocks, block_size, heads, head_dim], contiguous: K then V.
        t = FakeTensor(0x1000, (2, N, BS, H, D))
        self.assertEqual(kv_tensor_views(t), [
            TensorView(0x1000, N, PAGE, PAGE),
            TensorView(0x1000 + N * PAGE, N, PAGE, PAGE),
        ])

    def test_block_major_physical_layout_merges_k_and_v(self):
        # Logical [2, N, ...] over physical [N, 2, ...] (a permuted stride order): K and V of a
        # block are adjacent, one descriptor of 2 pages.
        e = BS * H * D
        t = FakeTensor(0x2000, (2, N, BS, H, D), strides=(e, 2 * e, H * D, D, 1))
        self.assertEqual(kv_tensor_views(t), [TensorView(0x2000, N, 2 * PAGE, 2 * PAGE)])
        self.assertEqual(kv_tensor_views(t, merge=False), [
            TensorView(0x2000, N, 2 * PAGE, PAGE),
            TensorView(0x2000 + PAGE, N, 2 * PAGE, PAGE),
        ])

    def test_block_first_and_mla(self):
        mla = FakeTensor(0x3000, (N, BS, 576))
        self.assertEqual(kv_tensor_views(mla), [TensorView(0x3000, N, BS * 576 * 2, BS * 576 * 2)])
        flashinfer = FakeTensor(0x4000, (N, 2, BS, H, D), element_size=1)
        self.assertEqual(kv_tensor_views(flashinfer),
                         [TensorView(0x4000, N, 2 * BS * H * D, 2 * BS * H * D)])

    def test_permuted_inner_dims_are_one_page(self):
        # HND physical order under an NHD view: still one dense range per block.
        t = FakeTensor(0x5000, (N, BS, H, D), strides=(BS * H * D, D, BS * D, 1))
        self.assertEqual(kv_tensor_views(t), [TensorView(0x5000, N, PAGE, PAGE)])

    def test_dict_of_layers_keeps_order(self):
        layers = {"layer.1": FakeTensor(0x10000, (N, BS, 64)),
                  "layer.0": FakeTensor(0x90000, (N, BS, 64))}
        views = kv_tensor_views(layers)
        self.assertEqual([v.data_ptr for v in views], [0x10000, 0x90000])

    def test_num_blocks_and_block_dim_resolve_ambiguity(self):
        t = FakeTensor(0x6000, (2, 7, BS, H, D))
        self.assertEqual(len(kv_tensor_views(t, num_blocks=7)), 2)
        self.assertEqual(kv_tensor_views(t, num_blocks=7)[0].num_blocks, 7)
        # Two blocks: dim 0 (K/V) and dim 1 (blocks) both have size 2; name the dim.
        t2 = FakeTensor(0x6000, (2, 2, BS, H, D))
        views = kv_tensor_views(t2, block_dim=1)
        self.assertEqual([v.num_blocks for v in views], [2, 2])
        self.assertEqual(views[1].data_ptr - views[0].data_ptr, 2 * PAGE)
        with self.assertRaises(ValueError):
            kv_tensor_views(t, num_blocks=9)

    def test_holes_in_a_block_are_rejected(self):
        # Only half the head_dim of a larger tensor: not one dense range.
        t = FakeTensor(0x7000, (N, BS, H, D // 2), strides=(BS * H * D, H * D, D, 1))
        with self.assertRaises(ValueError):
            kv_tensor_views(t)

    def test_as_views_accepts_one_bare_tensor(self):
        # A cross-layer cache [num_blocks, layers, 2, block_size, heads, head_dim] passed alone,
        # iterable like a torch tensor: one view, a whole block's layers per page.
        class IterableTensor(FakeTensor):
            def __iter__(self):
                inner = self.shape[1:]
                return iter(FakeTensor(self.ptr, inner) for _ in range(self.shape[0]))

        t = IterableTensor(0x10000, (512, 32, 2, 16, 8, 128))
        page = 32 * 2 * 16 * 8 * 128 * 2
        self.assertEqual(as_views(t, num_blocks=512), [TensorView(0x10000, 512, page, page)])

    def test_as_views_accepts_tuples_and_tensors(self):
        t = FakeTensor(0x8000, (N, BS, 64))
        views = as_views([(1, 2, 3, 3), t])
        self.assertEqual(views[0], TensorView(1, 2, 3, 3))
        self.assertEqual(views[1].data_ptr, 0x8000)
        with self.assertRaises(ValueError):
            as_views([(1, 2, 3)])


if __name__ == "__main__":
    unittest.main()
