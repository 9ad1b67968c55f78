#!/usr/bin/env python3
"""Checks that no client code decides on an error's words (the house, round 2).

A refusal's identity is its code plus its reason (docs/api.md "Errors"; common/refusals.h); the
message is for people and may be reworded. This fails on client code (client/ and python/
kvoffload, tests excluded: a test may check that a message is helpful) that branches on message
text:

  Python:  "..." in e.message / in str(e) / in message / in err.value, .message.startswith("...")
  C++:     absl::StrContains / StartsWith / EndsWith / .find("...") on a message() or
           error_message()

    python3 tests/docs/check_error_decisions.py              # exit 1 listing each place
    python3 tests/docs/check_error_decisions.py --self_test  # proves the patterns catch them
"""

import argparse
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PYTHON = [
    # "text" in e.message / str(e) / message / err.value...
    re.compile(r"""["'][^"']*["']\s+(?:not\s+)?in\s+(?:str\(\s*\w+\s*\)|[\w.]*message\b|"""
               r"""[\w.]*err\w*\.value\b)"""),
    re.compile(r"""\bmessage\w*\s*\.\s*(?:startswith|endswith|find|index)\(\s*["']"""),
    re.compile(r"""\bstr\(\s*\w+\s*\)\s*\.\s*(?:startswith|endswith|find|index)\(\s*["']"""),
]
CPP = [
    re.compile(r"\b(?:StrContains|StartsWith|EndsWith|StrContainsIgnoreCase)\(\s*[\w.>\-()]*"
               r"(?:message|error_message)\(\)"),
    re.compile(r"(?:message|error_message)\(\)\s*\.\s*(?:find|rfind|compare|starts_with)\(\s*\""),
]


def violations(path, text):
    patterns = PYTHON if path.endswith(".py") else CPP
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        code = line.split("#", 1)[0] if path.endswith(".py") else line.split("//", 1)[0]
        if any(p.search(code) for p in patterns):
            out.append("%s:%d: decides on message text: %s" % (path, number, line.strip()))
    return out


def client_sources():
    for top, exts in (("client", (".cc", ".h")), (os.path.join("python", "kvoffload"), (".py",))):
        for directory, _, files in os.walk(os.path.join(ROOT, top)):
            for name in sorted(files):
                if not name.endswith(exts) or name.endswith("_test.cc") or \
                        name.startswith("test_"):
                    continue
                path = os.path.join(directory, name)
                with open(path, encoding="utf-8") as f:
                    yield os.path.relpath(path, ROOT), f.read()


def self_test():
    bad_py = [
        'if code == NOT_FOUND and "not in the index" not in str(e):',
        'rule = "rule " in message',
        'elif "different spec" in error.message:',
        'if e.message.startswith("no engine "):',
        'if "x" in err.value.decode():',
    ]
    for line in bad_py:
        assert violations("a.py", line), line
    bad_cc = [
        'absl::StrContains(status.error_message(), "planned against region epoch"));',
        'absl::StartsWith(status.message(), "no engine ")',
        'if (s.message().find("rule ") != std::string::npos) {',
    ]
    for line in bad_cc:
        assert violations("a.cc", line), line
    good = {
        "a.py": 'if e.reason == Reason.KEY_NOT_IN_INDEX:\n'
                'raise KvoffloadError(code, "%s: %s" % (what, e.message))\n'
                'for part in message.split():  # "x" in message is fine in a comment\n',
        "a.cc": 'if (common::ErrorReason(s) == common::reason::kEngineNotFound) return true;\n'
                'CopyString(status.message(), err, err_len);\n',
    }
    for path, text in good.items():
        assert not violations(path, text), violations(path, text)
    print("check_error_decisions: self test passed")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--self_test", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        self_test()
        return 0
    bad = [v for path, text in client_sources() for v in violations(path, text)]
    for line in bad:
        print("check_error_decisions: " + line)
    if bad:
        print("check_error_decisions: decide on code + reason (docs/api.md \"Errors\"), not on "
              "the message")
        return 1
    print("check_error_decisions: no client code decides on an error's message")
    return 0


if __name__ == "__main__":
    sys.exit(main())
