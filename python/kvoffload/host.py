"""Host-backend "GPU memory": POSIX shared memory for workers of a daemon run with
--backend=host (tests, demos, GPU-less nodes). The daemon opens the object by name at
registration, as the CUDA backend opens IPC handles; once the worker has connected the name may
be unlinked (the daemon keeps its mapping).

    with HostAllocation(64 << 20) as mem:
        tensors = [mem.tensor(offset=0, num_blocks=64, block_stride_bytes=1 << 20,
                              page_bytes=1 << 20)]
        worker = Worker.connect_host(socket, spec, mp_rank=0, tensors=tensors)
        mem.unlink()
        mem.buf[0:4] = b"abcd"

Not thread-safe. Linux only (the object lives in /dev/shm).
"""

import collections
import itertools
import mmap
import os

HostTensor = collections.namedtuple(
    "HostTensor",
    ["shm_name", "allocation_bytes", "offset", "num_blocks", "block_stride_bytes", "page_bytes"])
HostTensor.__doc__ = "A KV tensor in a POSIX shm object, named as for shm_open ('/name')."

_SHM_DIR = "/dev/shm"
_counter = itertools.count()


class HostAllocation:
    """A POSIX shm object of `nbytes` bytes, created exclusively and mapped read-write.

    `shm_name` is the name the daemon opens ("/kvo-py-<pid>-<n>"); `buf` is the mmap.
    """

    def __init__(self, nbytes, name=None):
        if nbytes <= 0:
            raise ValueError("nbytes must be > 0")
        if name is None:
            name = "kvo-py-%d-%d" % (os.getpid(), next(_counter))
        name = name.lstrip("/")
        if not name or "/" in name:
            raise ValueError("a shm name is one path component, got %r" % name)
        self.shm_name = "/" + name
        self.nbytes = nbytes
        self._path = os.path.join(_SHM_DIR, name)
        fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, nbytes)
            self.buf = mmap.mmap(fd, nbytes, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.unlink(self._path)
            raise
        finally:
            os.close(fd)
        self._linked = True

    def tensor(self, offset, num_blocks, block_stride_bytes, page_bytes):
        """A HostTensor in this allocation."""
        return HostTensor(self.shm_name, self.nbytes, offset, num_blocks, block_stride_bytes,
                          page_bytes)

    def unlink(self):
        """Removes the name (the mapping and the daemon's stay valid). Idempotent."""
        if self._linked:
            self._linked = False
            try:
                os.unlink(self._path)
            except FileNotFoundError:
                pass

    def close(self):
        """Unlinks the name and unmaps the memory."""
        self.unlink()
        if self.buf is not None:
            self.buf.close()
            self.buf = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
