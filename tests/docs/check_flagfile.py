#!/usr/bin/env python3
"""Checks that every flag in deploy/kvoffloadd.flags is one of kvoffloadd's, set to its default,
and that every default the docs state ("[--flag, VALUE]" or "`--flag` (default VALUE") is the
code's.

The defaults come from the binary itself (`kvoffloadd --helpfull`, which prints each flag of
daemon/main.cc with `default: ...`), so a default changed in the code and not in the flagfile
(or the reverse) fails, as does a flagfile line naming a flag the daemon no longer has.
Flags of the daemon the flagfile leaves out are listed, not failed (they keep their default).

    python3 tests/docs/check_flagfile.py --kvoffloadd bazel-bin/daemon/kvoffloadd
    python3 tests/docs/check_flagfile.py --kvoffloadd ... --self_test  # fails on a mismatch
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# The flagfile's deliberate departures from the code's defaults, with the value they must have:
# the groups deploy/kvoffload.sysusers.conf creates (the code's default, empty, is the daemon's
# own group, which suits a daemon run by hand). Nothing else may differ.
DEPLOYMENT_VALUES = {
    "socket_group": "kvoffload",
    "admin_socket_group": "kvoffload-admin",
    "admin_group": "kvoffload-admin",
}


# The files that define kvoffloadd's own flags (the rest of --helpfull is Abseil's and gRPC's).
FLAG_FILES = ["daemon/main.cc", "daemon/tier_flags.cc"]


def code_defaults(kvoffloadd):
    """{flag: default as the flagfile writes it} for the flags of FLAG_FILES."""
    out = subprocess.run([kvoffloadd, "--helpfull"], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, timeout=30).stdout.decode("utf-8", "replace")
    text = ""
    for name in FLAG_FILES:
        section = out.split("Flags from %s:" % name, 1)
        if len(section) != 2:
            raise SystemExit("check_flagfile: no 'Flags from %s' in %s --helpfull" %
                             (name, kvoffloadd))
        # Up to the blank line after it.
        text += re.split(r"\n\s*\n", section[1].lstrip("\n"), 1)[0] + "\n"
    defaults = {}
    # An entry: "--name (help ...); default: VALUE;" over one or more indented lines.
    for entry in re.split(r"\n    (?=--)", "\n" + text):
        entry = " ".join(line.strip() for line in entry.strip().splitlines())
        m = re.match(r"--([a-z0-9_]+) \(.*\); default: (.*);$", entry)
        if not m:
            continue
        value = m.group(2)
        if len(value) >= 2 and value[0] == '"' and value[-1] == '"':
            value = value[1:-1]
        defaults[m.group(1)] = value
    if not defaults:
        raise SystemExit("check_flagfile: no flag defaults parsed from %s --helpfull" % kvoffloadd)
    return defaults


def flagfile_values(path):
    """[(line number, flag, value)] of the flagfile's --name=value lines."""
    values = []
    for number, line in enumerate(open(path, encoding="utf-8"), 1):
        line = line.rstrip("\n")
        if not line.strip() or line.startswith("#"):
            continue
        m = re.match(r"--([a-z0-9_]+)=(.*)$", line)
        if not m:
            values.append((number, None, line))
            continue
        values.append((number, m.group(1), m.group(2)))
    return values


def check(defaults, flagfile):
    problems = []
    name = os.path.relpath(flagfile, ROOT)
    for number, flag, value in flagfile_values(flagfile):
        if flag is None:
            problems.append("%s:%d: not a --name=value line: %r" % (name, number, value))
        elif flag not in defaults:
            problems.append("%s:%d: --%s is not a flag of kvoffloadd" % (name, number, flag))
        elif flag in DEPLOYMENT_VALUES:
            if value != DEPLOYMENT_VALUES[flag]:
                problems.append("%s:%d: --%s=%s but the deployment's value is %r (sysusers.conf)"
                                % (name, number, flag, value, DEPLOYMENT_VALUES[flag]))
        elif value != defaults[flag]:
            problems.append("%s:%d: --%s=%s but the code's default is %r" %
                            (name, number, flag, value, defaults[flag]))
    return problems


# Where defaults are written in prose: the proto's header, the docs and the README.
DOC_FILES = ["README.md", "proto/kvoffload/v1/kvoffload.proto"] + [
    os.path.join("docs", n) for n in sorted(os.listdir(os.path.join(ROOT, "docs")))
    if n.endswith(".md")]
DOC_DEFAULT = re.compile(r"\[--([a-z0-9_]+), ([^]]+)\]|`--([a-z0-9_]+)` \(default ([^)]+)\)")
# Prose for a default the code computes at start (the flag itself is empty).
COMPUTED = {"max_region_bytes": ("half of RAM", "half of physical memory")}
UNITS = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def doc_value(text):
    """A documented default as the code prints it: "2^20" -> "1048576", "128 MiB" ->
    "134217728", "`/run/x`" -> "/run/x"; text after a comma is prose ("8, at most 16")."""
    value = text.split(",")[0].strip().strip("`")
    m = re.fullmatch(r"(\d+)\^(\d+)", value)
    if m:
        return str(int(m.group(1)) ** int(m.group(2)))
    m = re.fullmatch(r"(\d+) ?(KiB|MiB|GiB)", value)
    if m:
        return str(int(m.group(1)) * UNITS[m.group(2)])
    return value


# A flags table row: "| `--a` | 8 | ..." or "| `--a` / `--b` | 8192 / 4096 | ...".
TABLE_ROW = re.compile(r"^\|\s*((?:`--[a-z0-9_]+`(?:\s*/\s*)?)+)\s*\|\s*([^|]+?)\s*\|")


def stated_defaults(line):
    """[(flag, the default as the line states it)] of one line of prose or of a flags table."""
    found = [(m.group(1) or m.group(3), (m.group(2) or m.group(4)).strip())
             for m in DOC_DEFAULT.finditer(line)]
    row = TABLE_ROW.match(line)
    if row:
        flags = re.findall(r"`--([a-z0-9_]+)`", row.group(1))
        values = [v.strip() for v in row.group(2).split(" / ")]
        if len(values) == len(flags):
            found += list(zip(flags, values))
        else:
            found += [(f, row.group(2).strip()) for f in flags]
    return found


def check_docs(defaults, files):
    problems = []
    for name in files:
        for number, line in enumerate(open(os.path.join(ROOT, name), encoding="utf-8"), 1):
            for flag, said in stated_defaults(line):
                if flag not in defaults:
                    problems.append("%s:%d: --%s is not a flag of kvoffloadd" % (name, number, flag))
                elif flag in COMPUTED:
                    if not said.startswith(COMPUTED[flag]):
                        problems.append("%s:%d: --%s default said %r, the code computes %r" %
                                        (name, number, flag, said, COMPUTED[flag][0]))
                elif doc_value(said) != defaults[flag]:
                    problems.append("%s:%d: --%s default said %r but the code's is %r" %
                                    (name, number, flag, said, defaults[flag]))
    return problems


def self_test(kvoffloadd, flagfile):
    defaults = code_defaults(kvoffloadd)
    sysusers = open(os.path.join(ROOT, "deploy", "kvoffload.sysusers.conf"), encoding="utf-8").read()
    for flag, group in DEPLOYMENT_VALUES.items():
        assert flag in defaults, flag
        assert re.search(r"^[ug] %s " % re.escape(group), sysusers, re.M), (flag, group)
    assert not check(defaults, flagfile), check(defaults, flagfile)
    original = open(flagfile, encoding="utf-8").read()
    cases = [
        ("a value changed", original.replace("--job_timeout_s=30\n", "--job_timeout_s=31\n"),
         "--job_timeout_s=31 but the code's default is '30'"),
        ("an empty default given a value", original.replace("--max_region_bytes=\n",
                                                             "--max_region_bytes=64GiB\n"),
         "--max_region_bytes=64GiB"),
        ("an unknown flag", original + "--no_such_flag=1\n", "--no_such_flag is not a flag"),
        ("a deployment value changed", original.replace("--socket_group=kvoffload\n",
                                                        "--socket_group=users\n"),
         "--socket_group=users but the deployment's value is 'kvoffload'"),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        bad = os.path.join(tmp, "kvoffloadd.flags")
        for what, text, expected in cases:
            assert text != original, what
            open(bad, "w", encoding="utf-8").write(text)
            found = check(defaults, bad)
            assert any(expected in p for p in found), (what, found)
            rc = subprocess.call([sys.executable, os.path.abspath(__file__), "--kvoffloadd",
                                  kvoffloadd, "--flagfile", bad],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            assert rc == 1, (what, rc)
    assert not check_docs(defaults, DOC_FILES), check_docs(defaults, DOC_FILES)
    with tempfile.TemporaryDirectory(dir=ROOT) as tmp:
        doc = os.path.join(tmp, "doc.md")
        for text, expected in [("[--max_engines, 255]", "--max_engines default said '255'"),
                               ("`--pool_member_floor` (default 0.5)", "said '0.5'"),
                               ("[--max_blocks_per_job, 2^21]", "said '2^21'"),
                               ("[--max_region_bytes, all of RAM]", "the code computes"),
                               ("[--no_such_flag, 1]", "--no_such_flag is not a flag"),
                               ("| `--max_engines` | 512 | engines |", "said '512'"),
                               ("| `--max_jobs_per_engine` / `--max_jobs_per_session` | 8192 / 4095 |"
                                " x |", "--max_jobs_per_session default said '4095'")]:
            line = text if text.startswith("|") else "x " + text + " y"
            open(doc, "w", encoding="utf-8").write(line + "\n")
            found = check_docs(defaults, [os.path.relpath(doc, ROOT)])
            assert any(expected in p for p in found), (text, found)
    print("check_flagfile self test: OK (%d flags; 4 flagfile and 7 doc mismatches caught)" %
          len(defaults))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kvoffloadd", default=os.path.join(ROOT, "bazel-bin", "daemon",
                                                             "kvoffloadd"))
    parser.add_argument("--flagfile", default=os.path.join(ROOT, "deploy", "kvoffloadd.flags"))
    parser.add_argument("--self_test", action="store_true")
    args = parser.parse_args()
    if args.self_test:
        self_test(args.kvoffloadd, args.flagfile)
        return 0
    defaults = code_defaults(args.kvoffloadd)
    problems = check(defaults, args.flagfile) + check_docs(defaults, DOC_FILES)
    for p in problems:
        print("check_flagfile: " + p, file=sys.stderr)
    if problems:
        return 1
    given = {flag for _, flag, _ in flagfile_values(args.flagfile)}
    left_out = sorted(set(defaults) - given)
    print("check_flagfile: %d flags in %s and every default stated in %d docs equal the code's "
          "defaults (the groups: the deployment's)%s" %
          (len(given), os.path.relpath(args.flagfile, ROOT), len(DOC_FILES),
           "; left out (their defaults apply): " + ", ".join(left_out) if left_out else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
