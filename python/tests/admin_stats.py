"""Admin.Stats of a test daemon, for tests that check daemon-side counters the C ABI does not
report (the tiers' TierStats). One unary gRPC call on admin.sock with raw bytes (grpcio, no
generated code); the reply is decoded by its wire format, with field numbers and types read from
proto/kvoffload/v1/kvoffload.proto, so a renumbered field cannot be decoded silently wrong.

    tier_stats(runtime_dir)["spills_ok"]   # the "disk" tier's counters, a dict by field name
"""

import os
import re
import struct
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STATS_METHOD = "/kvoffload.v1.Admin/Stats"


def proto_text():
    """The text of proto/kvoffload/v1/kvoffload.proto ($KVOFFLOAD_PROTO), else SkipTest."""
    path = os.environ.get("KVOFFLOAD_PROTO") or os.path.join(REPO, "proto", "kvoffload", "v1",
                                                             "kvoffload.proto")
    if not os.path.exists(path):
        raise unittest.SkipTest("no kvoffload.proto at %s" % path)
    with open(path) as f:
        return f.read()


def _message_fields(text, message):
    """{field number: (name, type, repeated)} of `message` in the proto text."""
    body = re.search(r"^message %s \{(.*?)\n\}" % message, text, re.S | re.M)
    if body is None:
        raise AssertionError("no message %s in kvoffload.proto" % message)
    fields = {}
    for rep, typ, name, num in re.findall(r"^\s*(repeated\s+)?([\w.]+)\s+(\w+)\s*=\s*(\d+)\s*;",
                                          body.group(1), re.M):
        fields[int(num)] = (name, typ, bool(rep))
    return fields


def _varint(buf, pos):
    shift = value = 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7


def _wire_fields(buf):
    """[(field number, wire type, value)] of one serialized message (value: int or bytes)."""
    out, pos = [], 0
    while pos < len(buf):
        tag, pos = _varint(buf, pos)
        num, wt = tag >> 3, tag & 7
        if wt == 0:
            value, pos = _varint(buf, pos)
        elif wt == 1:
            value, pos = buf[pos:pos + 8], pos + 8
        elif wt == 2:
            n, pos = _varint(buf, pos)
            value, pos = buf[pos:pos + n], pos + n
        elif wt == 5:
            value, pos = buf[pos:pos + 4], pos + 4
        else:
            raise AssertionError("unexpected wire type %d in Admin.Stats" % wt)
        out.append((num, wt, value))
    return out


_SCALARS = {"uint64", "uint32", "int64", "int32", "bool", "double", "string"}


def _decode(buf, fields):
    """A dict of the scalar fields of `fields` (proto defaults for absent ones)."""
    out = {}
    for name, typ, rep in fields.values():
        if typ in _SCALARS and not rep:
            out[name] = "" if typ == "string" else 0.0 if typ == "double" else 0
    for num, wt, value in _wire_fields(buf):
        if num not in fields:
            continue
        name, typ, rep = fields[num]
        if typ not in _SCALARS or rep:
            continue
        if typ == "double":
            assert wt == 1, (name, wt)
            out[name] = struct.unpack("<d", value)[0]
        elif typ == "string":
            assert wt == 2, (name, wt)
            out[name] = value.decode()
        else:
            assert wt == 0, (name, wt)
            out[name] = bool(value) if typ == "bool" else value
    return out


def stats_bytes(runtime_dir, timeout_s=10.0):
    """The serialized StatsResponse of the daemon on runtime_dir (its admin.sock)."""
    try:
        import grpc
    except ImportError:
        raise unittest.SkipTest("no grpcio in this interpreter (Admin.Stats is gRPC)")
    with grpc.insecure_channel("unix:" + os.path.join(runtime_dir, "admin.sock")) as channel:
        call = channel.unary_unary(STATS_METHOD)  # bytes in, bytes out
        return call(b"", timeout=timeout_s)


def tiers(runtime_dir):
    """{tier name: {TierStats field: value}} from Admin.Stats."""
    text = proto_text()
    response = _message_fields(text, "StatsResponse")
    tiers_field = [num for num, (name, _, _) in response.items() if name == "tiers"]
    if len(tiers_field) != 1:
        raise AssertionError("StatsResponse has no field `tiers`")
    tier_fields = _message_fields(text, "TierStats")
    out = {}
    for num, wt, value in _wire_fields(stats_bytes(runtime_dir)):
        if num == tiers_field[0]:
            assert wt == 2
            t = _decode(value, tier_fields)
            out[t["name"]] = t
    return out


def tier_stats(runtime_dir, name="disk"):
    """The TierStats of tier `name` (AssertionError when Admin.Stats has none)."""
    all_tiers = tiers(runtime_dir)
    if name not in all_tiers:
        raise AssertionError("no %r tier in Admin.Stats (tiers: %s)" % (name, sorted(all_tiers)))
    return all_tiers[name]
