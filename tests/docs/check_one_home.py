#!/usr/bin/env python3
"""Checks that each daemon setting has its default written once.

1. Every ABSL_FLAG in daemon/main.cc takes its default from an options struct or a named
   constant (daemon_options.h, backend_factory.h, ...): a number, true/false or a non-empty
   string literal as a flag's default fails (the empty string, "unset", is allowed).
2. No default is restated: a field initialised to the same value under the same name in two of
   the settings structs (a struct or class whose name ends in Options, Limits or Deps, in daemon/
   or common/ headers) fails, e.g. `job_timeout = absl::Seconds(30)` in two headers.

    python3 tests/docs/check_one_home.py              # exit 1 listing each violation
    python3 tests/docs/check_one_home.py --self_test  # proves both checks fail on bad input
"""

import argparse
import collections
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

FLAG = re.compile(r"ABSL_FLAG\(\s*([\w:]+)\s*,\s*(\w+)\s*,\s*", re.S)
STRUCT = re.compile(r"^(?:struct|class)\s+(\w*(?:Options|Limits|Deps))\b[^;]*\{", re.M)
FIELD = re.compile(r"^\s+[\w:<>,\s\*]+?\s(\w+)\s*=\s*([^;{}]+);", re.M)
# Values that say "nothing set", not a chosen default.
TRIVIAL = {"0", "0u", "nullptr", "false", "true", "{}", "-1", "\"\"", "absl::ZeroDuration()"}


def first_argument(text, start):
    """The text of the macro argument starting at `start` (up to its top-level comma)."""
    depth, i, in_string = 0, start, False
    while i < len(text):
        c = text[i]
        if in_string:
            if c == "\\":
                i += 1
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            return text[start:i].strip()
        i += 1
    return text[start:].strip()


def literal_flag_defaults(main_cc):
    bad = []
    for m in FLAG.finditer(main_cc):
        default = first_argument(main_cc, m.end())
        if default == '""':
            continue
        if (re.fullmatch(r"[-+]?[\d.]+[uUlLfF]*|true|false|\d+u?\s*<<\s*\d+", default) or
                re.fullmatch(r'"[^"]+"', default) or re.search(r"\b\d+\b", default) and
                not re.search(r"[A-Za-z_]\w*\(", default)):
            bad.append("daemon/main.cc: --%s has the literal default %s; take it from its "
                       "options struct" % (m.group(2), default))
    return bad


def struct_bodies(text):
    for m in STRUCT.finditer(text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        yield m.group(1), text[m.end():i - 1]


def restated_defaults(headers):
    """headers: {path: text}. Violations for (field, value) pairs in two settings structs."""
    seen = collections.defaultdict(list)
    for path, text in sorted(headers.items()):
        for name, body in struct_bodies(text):
            for f in FIELD.finditer(body):
                value = " ".join(f.group(2).split())
                if value in TRIVIAL:
                    continue
                seen[(f.group(1), value)].append("%s (%s)" % (name, path))
    return ["the default %s = %s is written in %s" % (field, value, " and ".join(where))
            for (field, value), where in sorted(seen.items()) if len(where) > 1]


def repository_headers():
    out = {}
    for top in ("daemon", "common"):
        for dirpath, _, files in os.walk(os.path.join(ROOT, top)):
            for name in files:
                if name.endswith(".h"):
                    path = os.path.join(dirpath, name)
                    with open(path) as f:
                        out[os.path.relpath(path, ROOT)] = f.read()
    return out


def self_test():
    assert literal_flag_defaults('ABSL_FLAG(int64_t, job_timeout_s, 30, "x");'), "number"
    assert literal_flag_defaults('ABSL_FLAG(bool, huge, true, "x");'), "bool"
    assert literal_flag_defaults('ABSL_FLAG(std::string, backend, "auto", "x");'), "string"
    assert literal_flag_defaults('ABSL_FLAG(uint64_t, n, 1u << 20, "x");'), "shift"
    assert not literal_flag_defaults('ABSL_FLAG(std::string, g, "", "x");'), "empty string"
    assert not literal_flag_defaults(
        'ABSL_FLAG(int64_t, t, Seconds(D().jobs.job_timeout), "x, y");'), "from a struct"
    two = {"a.h": "struct AOptions {\n  absl::Duration job_timeout = absl::Seconds(30);\n};\n",
           "b.h": "struct BLimits {\n  absl::Duration job_timeout = absl::Seconds(30);\n};\n"}
    assert restated_defaults(two), "a restated default"
    two["b.h"] = two["b.h"].replace("30", "31")
    assert not restated_defaults(two), "different values are different settings"
    print("check_one_home: self test passed")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--self_test", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        self_test()
        return 0
    bad = []
    for name in ("main.cc", "tier_flags.cc"):  # every file that defines kvoffloadd's flags
        with open(os.path.join(ROOT, "daemon", name)) as f:
            bad += [b.replace("daemon/main.cc", "daemon/" + name)
                    for b in literal_flag_defaults(f.read())]
    bad += restated_defaults(repository_headers())
    for line in bad:
        print("check_one_home: " + line)
    if bad:
        return 1
    print("check_one_home: every flag takes its default from one options struct; no default "
          "is restated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
