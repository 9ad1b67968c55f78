"""Loads libkvoffload_c.so and declares the C ABI of client/kvoffload_c.h for ctypes.

Private to the package: the public API is in kvoffload.client. Keep the structs and prototypes
here in step with kvoffload_c.h; KVO_ABI_VERSION guards against a library of another version.
"""

import ctypes
import os
import threading

ABI_VERSION = 7  # KVO_ABI_VERSION this binding was written for
LIBRARY_NAME = "libkvoffload_c.so"
ENV_LIBRARY = "KVOFFLOAD_LIB"

MESSAGE_BYTES = 256  # KVO_MESSAGE_BYTES
REASON_BYTES = 64    # KVO_REASON_BYTES
MAX_KEY_BYTES = 256  # KVO_MAX_KEY_BYTES
NO_ROW = 2**64 - 1   # KVO_NO_ROW
ERROR_BYTES = 4096   # the error buffer passed to every call


class LibraryNotFoundError(ImportError):
    """libkvoffload_c.so could not be found or loaded (an ImportError, as for a missing module)."""


# The fields of kvo_engine_spec in the C struct's order, each with its kind: the kinds of
# common/engine_spec_fields.h (the one list of EngineSpec's fields), NUMBER split by width. The
# ctypes struct and EngineSpec._to_c derive from this; tests/test_constants.py checks it against
# that header, kvoffload_c.h and the proto, and round-trips every field through the library.
ID, NUMBER32, NUMBER64, ENUM, FLAG, TIERS, IDS = "ID", "U32", "U64", "ENUM", "FLAG", "TIERS", "IDS"
SPEC_FIELDS = (
    ("engine_id", ID),
    ("dp_rank", NUMBER32),
    ("world_size", NUMBER32),
    ("local_world_size", NUMBER32),
    ("tp", NUMBER32),
    ("pp", NUMBER32),
    ("pcp", NUMBER32),
    ("dcp", NUMBER32),
    ("executor", ENUM),
    ("attention", ENUM),
    ("num_kv_groups", NUMBER32),
    ("num_layers", NUMBER32),
    ("blocks_per_row", NUMBER32),
    ("page_bytes", NUMBER64),
    ("worker_bytes_per_block", NUMBER64),
    ("budget_bytes", NUMBER64),
    ("secondary_tiers", TIERS),
    ("rows_assigned_by_engine", FLAG),
    ("stores_by_writer_only", FLAG),  # ABI 2
    ("member_uids", IDS),
    ("member_gids", IDS),
    ("pool", ID),  # ABI 5
    ("model_identity", ID),
)


def _spec_c_fields():
    types = {ID: ctypes.c_char_p, NUMBER32: ctypes.c_uint32, NUMBER64: ctypes.c_uint64,
             ENUM: ctypes.c_int32, FLAG: ctypes.c_int32, TIERS: ctypes.c_char_p}
    fields = []
    for name, kind in SPEC_FIELDS:
        if kind == IDS:  # a pointer and its count
            fields += [(name, ctypes.POINTER(ctypes.c_uint32)), ("num_" + name, ctypes.c_size_t)]
        else:
            fields.append((name, types[kind]))
    return fields


class c_engine_spec(ctypes.Structure):
    _fields_ = _spec_c_fields()


class c_client_options(ctypes.Structure):
    _fields_ = [
        ("open_timeout_ms", ctypes.c_int64),
        ("call_timeout_ms", ctypes.c_int64),
        ("reconnect", ctypes.c_int32),  # ABI 3
    ]


class c_geometry(ctypes.Structure):
    _fields_ = [
        ("replicated", ctypes.c_int32),
        ("num_copies", ctypes.c_uint32),
        ("blocks_per_row", ctypes.c_uint32),
        ("created", ctypes.c_int32),
        ("worker_bytes_per_block", ctypes.c_uint64),
        ("slot_bytes", ctypes.c_uint64),
        ("row_bytes", ctypes.c_uint64),
        ("num_rows", ctypes.c_uint64),
        ("capacity_bytes", ctypes.c_uint64),
        ("fingerprint", ctypes.c_char * 256),
    ]


class c_cuda_tensor(ctypes.Structure):
    _fields_ = [
        ("device_ptr", ctypes.c_uint64),
        ("num_blocks", ctypes.c_uint64),
        ("block_stride_bytes", ctypes.c_uint64),
        ("page_bytes", ctypes.c_uint64),
    ]


class c_block_run(ctypes.Structure):
    _fields_ = [
        ("gpu_block", ctypes.c_uint64),
        ("row", ctypes.c_uint64),
        ("num_rows", ctypes.c_uint64),
    ]


class c_block_range(ctypes.Structure):
    _fields_ = [
        ("gpu_block", ctypes.c_uint64),
        ("row", ctypes.c_uint64),
        ("first_block", ctypes.c_uint32),
        ("num_blocks", ctypes.c_uint64),
    ]


class c_host_tensor(ctypes.Structure):
    _fields_ = [
        ("handle", ctypes.c_char_p),
        ("allocation_bytes", ctypes.c_uint64),
        ("offset", ctypes.c_uint64),
        ("num_blocks", ctypes.c_uint64),
        ("block_stride_bytes", ctypes.c_uint64),
        ("page_bytes", ctypes.c_uint64),
    ]


class c_worker_info(ctypes.Structure):
    _fields_ = [
        ("slot", ctypes.c_uint32),
        ("writer", ctypes.c_int32),
        ("num_copies", ctypes.c_uint32),
        ("replicated", ctypes.c_int32),
        ("blocks_per_row", ctypes.c_uint32),
        ("device", ctypes.c_int32),
        ("row_bytes", ctypes.c_uint64),
        ("slot_bytes", ctypes.c_uint64),
        ("num_rows", ctypes.c_uint64),
        ("worker_bytes_per_block", ctypes.c_uint64),
        ("capacity_bytes", ctypes.c_uint64),
        ("session_id", ctypes.c_uint64),
        ("num_events", ctypes.c_uint64),
    ]


class c_session_state(ctypes.Structure):  # ABI 3
    _fields_ = [
        ("phase", ctypes.c_int32),
        ("code", ctypes.c_int32),
        ("generation", ctypes.c_uint64),
        ("region_changes", ctypes.c_uint64),
        ("reconnect_attempts", ctypes.c_uint64),
        ("region_epoch", ctypes.c_uint64),
        ("session_id", ctypes.c_uint64),
        ("message", ctypes.c_char * MESSAGE_BYTES),
        ("reason", ctypes.c_char * REASON_BYTES),  # ABI 7
    ]


class c_readiness(ctypes.Structure):  # ABI 6
    _fields_ = [
        ("region_epoch", ctypes.c_uint64),
        ("num_rows", ctypes.c_uint64),
        ("rows_not_ready", ctypes.c_uint64),
        ("region_bytes", ctypes.c_uint64),
        ("region_ready_bytes", ctypes.c_uint64),
        ("first_ready_seconds", ctypes.c_double),
        ("fully_ready_seconds", ctypes.c_double),
    ]


class c_finished(ctypes.Structure):
    _fields_ = [
        ("job_id", ctypes.c_uint64),
        ("code", ctypes.c_int32),
        ("bytes", ctypes.c_uint64),
        ("message", ctypes.c_char * MESSAGE_BYTES),
        ("reason", ctypes.c_char * REASON_BYTES),  # ABI 7
    ]


_P = ctypes.POINTER
_handle = ctypes.c_void_p
_err = [ctypes.c_char_p, ctypes.c_size_t]
_keys = [_handle, _P(ctypes.c_char_p), _P(ctypes.c_size_t), ctypes.c_size_t]

_PROTOTYPES = {
    "kvo_version": (ctypes.c_char_p, []),
    "kvo_abi_version": (ctypes.c_int, []),
    "kvo_last_error_reason": (ctypes.c_char_p, []),  # ABI 7
    "kvo_last_error_metadata": (ctypes.c_char_p, []),  # ABI 7
    "kvo_engine_spec_init": (None, [_P(c_engine_spec)]),
    "kvo_engine_spec_describe": (ctypes.c_int, [
        _P(c_engine_spec), ctypes.c_char_p, ctypes.c_size_t] + _err),  # ABI 4
    "kvo_worker_connect_cuda": (ctypes.c_int, [
        ctypes.c_char_p, _P(c_engine_spec), ctypes.c_uint32, ctypes.c_int32, _P(c_cuda_tensor),
        ctypes.c_size_t, ctypes.c_size_t, _P(_handle)] + _err),
    "kvo_worker_connect_host": (ctypes.c_int, [
        ctypes.c_char_p, _P(c_engine_spec), ctypes.c_uint32, _P(c_host_tensor), ctypes.c_size_t,
        _P(_handle)] + _err),
    "kvo_client_options_init": (None, [_P(c_client_options)]),
    "kvo_worker_connect_cuda_options": (ctypes.c_int, [
        ctypes.c_char_p, _P(c_engine_spec), ctypes.c_uint32, ctypes.c_int32, _P(c_cuda_tensor),
        ctypes.c_size_t, ctypes.c_size_t, _P(c_client_options), _P(_handle)] + _err),
    "kvo_worker_connect_host_options": (ctypes.c_int, [
        ctypes.c_char_p, _P(c_engine_spec), ctypes.c_uint32, _P(c_host_tensor), ctypes.c_size_t,
        _P(c_client_options), _P(_handle)] + _err),
    "kvo_scheduler_open_options": (ctypes.c_int, [
        ctypes.c_char_p, _P(c_engine_spec), ctypes.c_uint64, _P(c_client_options), _P(_handle),
        _P(c_geometry)] + _err),
    "kvo_worker_info": (ctypes.c_int, [_handle, _P(c_worker_info)] + _err),
    "kvo_worker_submit": (ctypes.c_int, [
        _handle, ctypes.c_uint64, ctypes.c_int32, _P(ctypes.c_uint64), ctypes.c_size_t,
        _P(ctypes.c_uint64), ctypes.c_size_t, ctypes.c_int32] + _err),
    "kvo_worker_submit_epoch": (ctypes.c_int, [
        _handle, ctypes.c_uint64, ctypes.c_int32, _P(ctypes.c_uint64), ctypes.c_size_t,
        _P(ctypes.c_uint64), ctypes.c_size_t, ctypes.c_int32, ctypes.c_uint64] + _err),
    "kvo_worker_submit_runs": (ctypes.c_int, [
        _handle, ctypes.c_uint64, ctypes.c_int32, _P(c_block_run), ctypes.c_size_t,
        ctypes.c_int32, ctypes.c_uint64] + _err),
    "kvo_worker_submit_ranges": (ctypes.c_int, [
        _handle, ctypes.c_uint64, ctypes.c_int32, _P(c_block_range), ctypes.c_size_t,
        ctypes.c_int32, ctypes.c_uint64] + _err),
    "kvo_worker_region_epoch": (ctypes.c_int, [_handle, _P(ctypes.c_uint64)] + _err),
    "kvo_worker_record_event": (ctypes.c_int, [_handle, ctypes.c_int32, ctypes.c_uint64] + _err),
    "kvo_worker_wait_event": (ctypes.c_int, [_handle, ctypes.c_int32, ctypes.c_uint64] + _err),
    "kvo_worker_poll": (ctypes.c_int, [
        _handle, _P(c_finished), ctypes.c_size_t, _P(ctypes.c_size_t)] + _err),
    "kvo_worker_wait": (ctypes.c_int, [
        _handle, ctypes.c_uint64, ctypes.c_int64, _P(c_finished)] + _err),
    "kvo_worker_session_status": (ctypes.c_int, [_handle] + _err),
    "kvo_worker_session_state": (ctypes.c_int, [_handle, _P(c_session_state)] + _err),
    "kvo_worker_close": (None, [_handle]),
    "kvo_scheduler_open": (ctypes.c_int, [
        ctypes.c_char_p, _P(c_engine_spec), _P(_handle), _P(c_geometry)] + _err),
    "kvo_scheduler_open_epoch": (ctypes.c_int, [
        ctypes.c_char_p, _P(c_engine_spec), ctypes.c_uint64, _P(_handle), _P(c_geometry)] + _err),
    "kvo_scheduler_region_epoch": (ctypes.c_int, [_handle, _P(ctypes.c_uint64)] + _err),
    "kvo_scheduler_geometry": (ctypes.c_int, [_handle, _P(c_geometry)] + _err),
    "kvo_scheduler_region_changes": (ctypes.c_int, [
        _handle, _P(ctypes.c_uint64), _P(ctypes.c_uint64)] + _err),
    "kvo_scheduler_lookup": (ctypes.c_int, _keys + [_P(ctypes.c_int32)] + _err),
    "kvo_scheduler_prepare_store": (ctypes.c_int, _keys + [
        _P(ctypes.c_uint8), _P(ctypes.c_uint64), _P(ctypes.c_uint8), ctypes.c_size_t,
        _P(ctypes.c_size_t), _P(ctypes.c_size_t)] + _err),
    "kvo_scheduler_complete_store": (ctypes.c_int, _keys + [ctypes.c_int] + _err),
    "kvo_scheduler_prepare_load": (ctypes.c_int, _keys + [_P(ctypes.c_uint64)] + _err),
    "kvo_scheduler_complete_load": (ctypes.c_int, _keys + _err),
    "kvo_scheduler_touch": (ctypes.c_int, _keys + _err),
    "kvo_scheduler_readiness": (ctypes.c_int, [_handle, _P(c_readiness)] + _err),  # ABI 6
    "kvo_scheduler_wait_until_ready": (ctypes.c_int, [_handle, ctypes.c_int64] + _err),
    "kvo_scheduler_close": (None, [_handle]),
}


def candidate_paths():
    """Where the library is looked for, in order (the first that exists is loaded)."""
    package_dir = os.path.dirname(os.path.abspath(__file__))
    repo_root = os.path.dirname(os.path.dirname(package_dir))  # python/kvoffload -> repo
    paths = []
    if os.environ.get(ENV_LIBRARY):
        paths.append(os.environ[ENV_LIBRARY])
    paths.append(os.path.join(package_dir, LIBRARY_NAME))
    paths.append(os.path.join("/usr/local/lib", LIBRARY_NAME))
    paths.append(os.path.join(repo_root, "bazel-bin", "client", LIBRARY_NAME))
    return paths


_lock = threading.Lock()
_lib = None


def library():
    """The loaded library (loaded on first use). Raises LibraryNotFoundError."""
    global _lib
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is None:
            _lib = _load()
    return _lib


def _load():
    tried = []
    explicit = os.environ.get(ENV_LIBRARY)
    for path in candidate_paths():
        if not os.path.exists(path):
            tried.append(path + " (absent)")
            if explicit and path == explicit:
                raise LibraryNotFoundError(
                    "%s=%s names no file; unset it or point it at %s" %
                    (ENV_LIBRARY, explicit, LIBRARY_NAME), name="kvoffload")
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            raise LibraryNotFoundError(
                "cannot load %s: %s (it needs the Debian runtime libraries of gRPC, protobuf and "
                "Abseil that it was built against)" % (path, e), name="kvoffload") from e
        for name, (restype, argtypes) in _PROTOTYPES.items():
            try:
                fn = getattr(lib, name)
            except AttributeError as e:
                raise LibraryNotFoundError(
                    "%s has no %s: it is not the kvoffload C ABI this package expects" %
                    (path, name), name="kvoffload") from e
            fn.restype = restype
            fn.argtypes = argtypes
        abi = lib.kvo_abi_version()
        if abi != ABI_VERSION:
            raise LibraryNotFoundError(
                "%s implements C ABI version %d, this package needs %d; rebuild or reinstall one "
                "of them" % (path, abi, ABI_VERSION), name="kvoffload")
        lib.kvoffload_path = path
        return lib
    raise LibraryNotFoundError(
        "kvoffload: cannot find %s. Build it with `bazel build //client:libkvoffload_c.so` and set "
        "%s to its path (or install it to /usr/local/lib, or copy it into the package directory). "
        "Tried: %s" % (LIBRARY_NAME, ENV_LIBRARY, "; ".join(tried)), name="kvoffload")
