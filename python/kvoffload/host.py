"""Host-backend "GPU memory": memfds for workers of a daemon run with --backend=host (tests,
demos, GPU-less nodes). The daemon opens the memfd from the registering process itself
(handle "memfd:<fd>", taken from the pid the kernel names for the connection), only if this
uid owns it and it is sealed against shrinking (F_SEAL_SHRINK), as the CUDA backend opens IPC
handles. Nothing is ever left in /dev/shm.

    with HostAllocation(64 << 20) as mem:
        tensors = [mem.tensor(offset=0, num_blocks=64, block_stride_bytes=1 << 20,
                              page_bytes=1 << 20)]
        worker = Worker.connect_host(socket, spec, mp_rank=0, tensors=tensors)
        mem.buf[0:4] = b"abcd"

Not thread-safe. Linux only.
"""

import collections
import fcntl
import mmap
import os

from ._common import _Closing

HostTensor = collections.namedtuple(
    "HostTensor",
    ["handle", "allocation_bytes", "offset", "num_blocks", "block_stride_bytes", "page_bytes"])
HostTensor.__doc__ = "A KV tensor in a memfd; `handle` is 'memfd:<fd>'."


class HostAllocation(_Closing):
    """A memfd of `nbytes` bytes, sealed against shrinking and mapped read-write.

    `handle` is what the daemon opens ("memfd:<fd>"); `buf` is the mmap. The descriptor
    stays open until close().
    """

    def __init__(self, nbytes, name=None):
        """`name` only labels the memfd (/proc/PID/maps); it names nothing the daemon opens."""
        if nbytes <= 0:
            raise ValueError("nbytes must be > 0")
        self.nbytes = nbytes
        self._fd = os.memfd_create(name or "kvo-py", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(self._fd, nbytes)
            # The daemon refuses memory that could be truncated under its copies.
            fcntl.fcntl(self._fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)
            self.buf = mmap.mmap(self._fd, nbytes, mmap.MAP_SHARED,
                                 mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(self._fd)
            raise
        self.handle = "memfd:%d" % self._fd

    def tensor(self, offset, num_blocks, block_stride_bytes, page_bytes):
        """A HostTensor in this allocation."""
        return HostTensor(self.handle, self.nbytes, offset, num_blocks, block_stride_bytes,
                          page_bytes)

    def unlink(self):
        """Kept for callers of the named-shm version: a memfd has no name to remove."""

    def close(self):
        """Unmaps the memory and closes the descriptor. Idempotent."""
        if getattr(self, "buf", None) is not None:
            self.buf.close()
            self.buf = None
        if getattr(self, "_fd", -1) >= 0:
            os.close(self._fd)
            self._fd = -1
