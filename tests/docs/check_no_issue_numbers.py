#!/usr/bin/env python3
"""Checks that code and docs name features, not this project's issue numbers.

"(issue 19)" tells a newcomer nothing; "(durable regions)" tells them where to look. Every tracked
file outside the run records (runs/, dated evidence) and vendored code (third_party/) is read, and
each `issue N`, `issues N`, `issue #N` (any case) fails, unless it quotes an upstream project's
issue: the project is named right before it ("vLLM issue 12345", "LMCache's GitHub issue #88") or
right after it ("issue #88 of LMCache"). Upstream references without the word "issue" ("Dynamo
#15079", "PegaFlow 403") never match.

    python3 tests/docs/check_no_issue_numbers.py              # exit 1 listing each file:line
    python3 tests/docs/check_no_issue_numbers.py --self_test  # proves it fails on bad input
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

ISSUE = re.compile(r"\bissues? ?#?[0-9]+", re.I)
# Projects whose issue trackers the code and docs may cite by number.
UPSTREAM = (r"vLLM|LMCache|Dynamo|PegaFlow|SGLang|PyTorch|NCCL|NIXL|Mooncake|llm-d|gRPC|Abseil|"
            r"Bazel|spdlog|protobuf|liburing|TensorRT-LLM|Triton|NVIDIA")
UPSTREAM_BEFORE = re.compile(r"\b(?:%s)(?:'s)?(?: GitHub)? $" % UPSTREAM, re.I)
UPSTREAM_AFTER = re.compile(r"^ (?:of|in|on) (?:the )?(?:%s)\b" % UPSTREAM, re.I)
# Not this project's text: dated run records and vendored code.
SKIPPED_DIRS = ("runs/", "third_party/")
# This file: its examples and self test are issue numbers on purpose.
SELF = os.path.relpath(os.path.abspath(__file__), ROOT)


def violations_in(text):
    """(line number, line) of every issue number in `text` that is not an upstream reference."""
    bad = []
    for n, line in enumerate(text.splitlines(), 1):
        for m in ISSUE.finditer(line):
            if UPSTREAM_BEFORE.search(line[:m.start()]) or UPSTREAM_AFTER.search(line[m.end():]):
                continue
            bad.append((n, line.strip()))
            break
    return bad


def tracked_files(root):
    """The repository's files: git's list in a checkout, else every file under `root`."""
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z"], capture_output=True,
                             check=True).stdout.decode()
        return [p for p in out.split("\0") if p]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for d, dirs, names in os.walk(root):
            dirs[:] = [x for x in dirs if x != ".git" and not x.startswith("bazel-")]
            files += [os.path.relpath(os.path.join(d, x), root) for x in names]
        return files


def check(root):
    bad = []
    for rel in sorted(tracked_files(root)):
        if rel.startswith(SKIPPED_DIRS) or rel == SELF:
            continue
        path = os.path.join(root, rel)
        if not os.path.isfile(path) or os.path.islink(path):
            continue
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except (UnicodeDecodeError, OSError):
            continue  # binary (fuzz corpus, images): no prose
        bad += [(rel, n, line) for n, line in violations_in(text)]
    return bad


def self_test():
    cases = {
        "a.cc": ("// Serve while pinning (issue 19): the region\n", [1]),
        "b.md": ("Pools\n\n## Pools (Issue #18)\nissues 9, 10 and 11 merged\n", [3, 4]),
        "c.py": ('"""Probe (issue17 item 2)."""\nx = 1\n', [1]),
        "up.md": ("vLLM issue 12345 and LMCache's GitHub issue #88; see issue #7 of NCCL.\n"
                  "Dynamo #15079, PegaFlow 403.\n", []),
        # An upstream reference does not excuse one of ours on the same line.
        "mixed.md": ("vLLM issue 12345, fixed here by the disk tier (issue 30)\n", [1]),
        "runs/2026-12-04-abc1234-gpu/SUMMARY.md": ("stage of issue 17\n", None),
        "third_party/x/BUILD": ("# issue 42 upstream\n", None),
    }
    with tempfile.TemporaryDirectory() as root:
        for rel, (text, _) in cases.items():
            os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
            with open(os.path.join(root, rel), "w") as f:
                f.write(text)
        with open(os.path.join(root, "blob.bin"), "wb") as f:
            f.write(b"\xff\xfe issue 3 \x00")
        got = {}
        for rel, n, _ in check(root):
            got.setdefault(rel, []).append(n)
    want = {rel: lines for rel, (_, lines) in cases.items() if lines}
    if got != want:
        sys.exit(f"self test FAILED: got {got}, want {want}")
    print("self test passed")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--self_test", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        self_test()
        return
    bad = check(ROOT)
    for rel, n, line in bad:
        print(f"{rel}:{n}: {line[:120]}")
    if bad:
        sys.exit(f"{len(bad)} line(s) cite an issue number; name the feature instead")
    print("no issue numbers outside runs/ and third_party/")


if __name__ == "__main__":
    main()
