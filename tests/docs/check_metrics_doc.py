#!/usr/bin/env python3
"""Checks that docs/metrics.md documents every metric kvoffloadd exports, and nothing else.

The exported list comes from the code: every string literal that is a whole metric name
("kvoffload_...") in the non-test sources of daemon/metrics/, and the `state` label values of the
rows families (`{"name", s.index.rows_...}` entries). A family missing from the doc's tables, a
documented family the code does not export, or a state the family's row does not name fails.

    python3 tests/docs/check_metrics_doc.py              # exit 0: they agree; 1: what differs
    python3 tests/docs/check_metrics_doc.py --self_test  # proves the check fails on a mismatch
"""

import argparse
import glob
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

NAME = re.compile(r'"(kvoffload_[a-z0-9_]+)"')
# A state of a rows family: {"not_ready", s.index.rows_not_ready} or {"online", p.rows_online}.
STATE = re.compile(r'\{"([a-z_]+)",\s*[a-z]\.(?:index\.)?rows_[a-z_]+\}')


def exported(root):
    """{family: set of states} from daemon/metrics/*.cc (tests excluded)."""
    families = {}
    for path in sorted(glob.glob(os.path.join(root, "daemon", "metrics", "*.cc"))):
        if path.endswith("_test.cc"):
            continue
        text = open(path, encoding="utf-8").read()
        names = [(m.start(), m.group(1)) for m in NAME.finditer(text)]
        for pos, name in names:
            families.setdefault(name, set())
        for m in STATE.finditer(text):
            # A state belongs to the nearest family named before it.
            before = [name for pos, name in names if pos < m.start()]
            if not before:
                raise SystemExit("%s: state %r before any metric name" % (path, m.group(1)))
            families[before[-1]].add(m.group(1))
    return families


def documented(doc_path):
    """{family: text of its table row} from the doc's table rows ("| `kvoffload_x...` |")."""
    rows = {}
    for line in open(doc_path, encoding="utf-8"):
        m = re.match(r"\|\s*`(kvoffload_[a-z0-9_]+)(?:\{[^}]*\})?`\s*\|", line)
        if m:
            rows[m.group(1)] = line
    return rows


def check(root, doc_path):
    code = exported(root)
    doc = documented(doc_path)
    problems = []
    for name in sorted(code):
        if name not in doc:
            problems.append("%s is exported (daemon/metrics) but has no row in %s" %
                            (name, os.path.relpath(doc_path, root)))
            continue
        for state in sorted(code[name]):
            if "`%s`" % state not in doc[name]:
                problems.append("%s{state=\"%s\"} is exported but its row in %s does not name `%s`"
                                % (name, state, os.path.relpath(doc_path, root), state))
    for name in sorted(set(doc) - set(code)):
        problems.append("%s is documented in %s but not exported by daemon/metrics" %
                        (name, os.path.relpath(doc_path, root)))
    return code, problems


def self_test():
    """The check passes on the tree and fails on each kind of mismatch."""
    code, problems = check(ROOT, os.path.join(ROOT, "docs", "metrics.md"))
    assert not problems, problems
    assert "kvoffload_region_ready_bytes" in code and "not_ready" in code["kvoffload_rows"], code
    doc = open(os.path.join(ROOT, "docs", "metrics.md"), encoding="utf-8").read()
    with tempfile.TemporaryDirectory() as tmp:
        bad = os.path.join(tmp, "metrics.md")
        cases = [
            ("a metric's row removed", re.sub(r"\n\| `kvoffload_rows_not_durable_total`[^\n]*",
                                              "", doc), "kvoffload_rows_not_durable_total is exported"),
            ("a state removed", doc.replace("`not_ready` (memory", "(memory"),
             'kvoffload_rows{state="not_ready"}'),
            ("a metric the code lacks", doc + "\n| `kvoffload_made_up` | gauge | | x |\n",
             "kvoffload_made_up is documented"),
        ]
        for what, text, expected in cases:
            assert text != doc, what
            open(bad, "w", encoding="utf-8").write(text)
            _, found = check(ROOT, bad)
            assert any(expected in p for p in found), (what, found)
            # The command line fails too.
            rc = subprocess.call([sys.executable, os.path.abspath(__file__), "--doc", bad],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            assert rc == 1, (what, rc)
    print("check_metrics_doc self test: OK (%d families; 3 mismatches caught)" % len(code))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--doc", default=os.path.join(ROOT, "docs", "metrics.md"))
    parser.add_argument("--self_test", action="store_true")
    args = parser.parse_args()
    if args.self_test:
        self_test()
        return 0
    code, problems = check(ROOT, args.doc)
    for p in problems:
        print("check_metrics_doc: " + p, file=sys.stderr)
    if problems:
        return 1
    print("check_metrics_doc: %d metric families, all in %s" % (len(code), os.path.relpath(args.doc, ROOT)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
