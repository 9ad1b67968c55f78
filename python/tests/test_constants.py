"""Every constant the Python package repeats from the C header agrees with it (issue 20: one
definition; the binding cannot include the header, so this test is the tie). The header is
client/kvoffload_c.h, itself checked against common/limits.h at compile time."""

import os
import re
import unittest

from kvoffload import _native, client

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
    path = os.environ.get("KVOFFLOAD_PROTO") or os.path.join(REPO, "proto", "kvoffload", "v1",
                                                             "kvoffload.proto")
    if not os.path.exists(path):
        raise unittest.SkipTest("no kvoffload.proto at %s" % path)
    with open(path) as f:
        text = f.read()
    body = re.search(r"message EngineSpec \{(.*?)\n\}", text, re.S).group(1)
    return re.findall(r"^\s*(?:repeated\s+)?\w+\s+(\w+)\s*=\s*\d+;", body, re.M)


class EngineSpecFieldsReachEveryLayer(unittest.TestCase):
    """Every field of the wire's EngineSpec exists in the C struct and in Python's EngineSpec (the
    C++ struct is checked against the proto by spec_from_c_test's round trip)."""

    def test_every_proto_field_is_in_c_and_python(self):
        fields = proto_engine_spec_fields()
        self.assertIn("stores_by_writer_only", fields)
        c_fields = {name for name, _ in _native.c_engine_spec._fields_}
        py_fields = {f.name for f in client.dataclasses.fields(client.EngineSpec)}
        path = os.path.join(REPO, "client", "kvoffload_c.h")
        with open(path) as f:
            header = f.read()
        struct = re.search(r"typedef struct kvo_engine_spec \{(.*?)\} kvo_engine_spec;",
                           header, re.S).group(1)
        for name in fields:
            self.assertIn(name, c_fields, "ctypes c_engine_spec lacks " + name)
            self.assertIn(name, py_fields, "Python EngineSpec lacks " + name)
            self.assertRegex(struct, r"\b%s;" % name, "kvoffload_c.h lacks " + name)


class ConstantsAgreeWithTheCHeader(unittest.TestCase):

    def setUp(self):
        self.c = header_defines()

    def test_abi_and_sizes(self):
        self.assertEqual(_native.ABI_VERSION, self.c["KVO_ABI_VERSION"])
        self.assertEqual(_native.MAX_KEY_BYTES, self.c["KVO_MAX_KEY_BYTES"])
        self.assertEqual(_native.MESSAGE_BYTES, self.c["KVO_MESSAGE_BYTES"])

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

    def test_default_deadlines(self):
        c = self.c
        self.assertEqual(client.DEFAULT_OPEN_TIMEOUT_S * 1000, c["KVO_DEFAULT_OPEN_TIMEOUT_MS"])
        self.assertEqual(client.DEFAULT_CALL_TIMEOUT_S * 1000, c["KVO_DEFAULT_CALL_TIMEOUT_MS"])


if __name__ == "__main__":
    unittest.main()
