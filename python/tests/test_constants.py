"""Every constant the Python package repeats from the C header agrees with it (the house: one
definition; the binding cannot include the header, so this test is the tie). The header is
client/kvoffload_c.h, itself checked against common/limits.h at compile time."""

import ctypes
import os
import re
import unittest

from kvoffload import _native, client

from admin_stats import proto_text

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def header_defines():
    path = os.environ.get("KVOFFLOAD_C_HEADER") or os.path.join(REPO, "client", "kvoffload_c.h")
    if not os.path.exists(path):
        raise unittest.SkipTest("no kvoffload_c.h at %s" % path)
    defines = {}
    with open(path) as f:
        for line in f:
            m = re.match(r"#define (KVO_[A-Z0-9_]+) (-?\d+)\b", line)
            if m:
                defines[m.group(1)] = int(m.group(2))
    return defines


def proto_engine_spec_fields():
    text = proto_text()
    body = re.search(r"message EngineSpec \{(.*?)\n\}", text, re.S).group(1)
    return re.findall(r"^\s*(?:repeated\s+)?\w+\s+(\w+)\s*=\s*\d+;", body, re.M)


def repo_file(*parts):
    path = os.path.join(REPO, *parts)
    if not os.path.exists(path):
        raise unittest.SkipTest("no %s" % path)
    with open(path) as f:
        return f.read()


def common_spec_table():
    """[(name, kind)] of KVOFFLOAD_ENGINE_SPEC_FIELDS in common/engine_spec_fields.h."""
    text = repo_file("common", "engine_spec_fields.h")
    body = re.search(r"#define KVOFFLOAD_ENGINE_SPEC_FIELDS\(.*?\)(.*?)\n\n", text, re.S).group(1)
    return re.findall(r"\b([A-Z]+)\((\w+)\)", body)


def c_header_spec_struct():
    """[(c type, name)] of kvo_engine_spec in kvoffload_c.h, in the struct's order."""
    header = repo_file("client", "kvoffload_c.h")
    struct = re.search(r"typedef struct kvo_engine_spec \{(.*?)\} kvo_engine_spec;",
                       header, re.S).group(1)
    struct = re.sub(r"/\*.*?\*/", "", struct, flags=re.S)
    return [(" ".join(t.split()), n)
            for t, n in re.findall(r"^\s*([\w\s]+\**)\s*\b(\w+);", struct, re.M)]


class EngineSpecFieldsReachEveryLayer(unittest.TestCase):
    """One list of EngineSpec's fields (common/engine_spec_fields.h): the proto, the C struct,
    the binding's SPEC_FIELDS (and so its ctypes struct) and the Python dataclass agree with it,
    and every field set in Python comes back from the library unchanged."""

    def test_the_table_is_the_protos_fields_in_order(self):
        self.assertEqual([name for _, name in common_spec_table()], proto_engine_spec_fields())

    def test_binding_kinds_are_the_tables(self):
        table = {name: kind for kind, name in common_spec_table()}
        binding = {name: ("NUMBER" if kind in (_native.NUMBER32, _native.NUMBER64) else kind)
                   for name, kind in _native.SPEC_FIELDS}
        self.assertEqual(binding, table)
        self.assertEqual({f.name for f in client.dataclasses.fields(client.EngineSpec)},
                         set(table))

    def test_ctypes_struct_is_the_headers(self):
        c_types = {"const char*": ctypes.c_char_p, "uint32_t": ctypes.c_uint32,
                   "uint64_t": ctypes.c_uint64, "int32_t": ctypes.c_int32,
                   "size_t": ctypes.c_size_t,
                   "const uint32_t*": ctypes.POINTER(ctypes.c_uint32)}
        want = [(name, c_types[t]) for t, name in c_header_spec_struct()]
        self.assertEqual(list(_native.c_engine_spec._fields_), want)

    def test_every_field_comes_back_from_the_library(self):
        values, want = {}, {}
        for i, (name, kind) in enumerate(_native.SPEC_FIELDS):
            if kind == _native.ID:
                values[name] = want[name] = "id-%d" % i
            elif kind in (_native.NUMBER32, _native.NUMBER64):
                values[name] = 1000 + i if kind == _native.NUMBER32 else (1 << 40) + i
                want[name] = str(values[name])
            elif kind == _native.ENUM:  # the last value: never the default
                table = {"executor": client.EXECUTORS, "attention": client.ATTENTIONS}[name]
                values[name] = want[name] = max(table, key=table.get)
            elif kind == _native.FLAG:
                values[name], want[name] = True, "1"
            elif kind == _native.TIERS:
                values[name], want[name] = ["t%d" % i, "u%d" % i], "[t%d,u%d]" % (i, i)
            elif kind == _native.IDS:
                values[name], want[name] = [i, 7 * i], "[%d,%d]" % (i, 7 * i)
            else:
                self.fail("SPEC_FIELDS: %s has kind %r" % (name, kind))
        described = client.EngineSpec(**values).describe()
        got = dict(item.split("=", 1) for item in described.split(" "))
        self.assertEqual(got, want)


class ConstantsAgreeWithTheCHeader(unittest.TestCase):

    def setUp(self):
        self.c = header_defines()

    def test_abi_and_sizes(self):
        self.assertEqual(_native.ABI_VERSION, self.c["KVO_ABI_VERSION"])
        self.assertEqual(_native.MAX_KEY_BYTES, self.c["KVO_MAX_KEY_BYTES"])
        self.assertEqual(_native.MESSAGE_BYTES, self.c["KVO_MESSAGE_BYTES"])
        self.assertEqual(_native.REASON_BYTES, self.c["KVO_REASON_BYTES"])

    def test_verdict_structs_end_with_message_and_reason(self):
        for struct in (_native.c_finished, _native.c_session_state):
            self.assertEqual(struct._fields_[-2], ("message", ctypes.c_char * _native.MESSAGE_BYTES))
            self.assertEqual(struct._fields_[-1], ("reason", ctypes.c_char * _native.REASON_BYTES))

    def test_status_codes(self):
        for code in client.StatusCode:
            self.assertEqual(code.value, self.c["KVO_" + code.name], code.name)

    def test_enums(self):
        self.assertEqual(client.Direction.STORE, self.c["KVO_STORE"])
        self.assertEqual(client.Direction.LOAD, self.c["KVO_LOAD"])
        for state in client.KeyState:
            self.assertEqual(state.value, self.c["KVO_KEY_" + state.name], state.name)
        for phase in client.SessionPhase:
            self.assertEqual(phase.value, self.c["KVO_SESSION_" + phase.name], phase.name)
        for name, value in client.EXECUTORS.items():
            self.assertEqual(value, self.c["KVO_EXECUTOR_" + name.upper()], name)
        for name, value in client.ATTENTIONS.items():
            self.assertEqual(value, self.c["KVO_ATTENTION_" + name.upper()], name)

    def test_readiness_struct_is_the_headers(self):
        header = repo_file("client", "kvoffload_c.h")
        struct = re.search(r"typedef struct kvo_readiness \{(.*?)\} kvo_readiness;", header,
                           re.S).group(1)
        struct = re.sub(r"/\*.*?\*/", "", struct, flags=re.S)
        c_types = {"uint64_t": ctypes.c_uint64, "double": ctypes.c_double}
        want = [(name, c_types[t]) for t, name in re.findall(r"^\s*(\w+)\s+(\w+);", struct, re.M)]
        self.assertEqual(len(want), 7)
        self.assertEqual(list(_native.c_readiness._fields_), want)
        self.assertEqual([f.name for f in client.dataclasses.fields(client.Readiness)],
                         [name for name, _ in want])

    def test_default_deadlines(self):
        c = self.c
        self.assertEqual(client.DEFAULT_OPEN_TIMEOUT_S * 1000, c["KVO_DEFAULT_OPEN_TIMEOUT_MS"])
        self.assertEqual(client.DEFAULT_CALL_TIMEOUT_S * 1000, c["KVO_DEFAULT_CALL_TIMEOUT_MS"])


class ReasonsAgree(unittest.TestCase):
    """The error reasons: common/refusals.h lists them once; Python's Reason and the table of
    error_info.proto (docs/api.md) hold the same names."""

    def test_python_header_and_proto_list_the_same_reasons(self):
        header = re.findall(r'X\(k\w+, "(\w+)"\)', repo_file("common", "refusals.h"))
        self.assertGreaterEqual(len(header), 5)
        python = sorted(v for k, v in vars(client.Reason).items() if k.isupper())
        self.assertEqual(sorted(header), python)
        proto = re.findall(r"^// - `(\w+)`: ", repo_file("proto", "kvoffload", "v1",
                                                          "error_info.proto"), re.M)
        self.assertEqual(proto, header)  # the same order too


if __name__ == "__main__":
    unittest.main()
