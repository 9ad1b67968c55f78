"""Records the kv_offload interface of every supported vLLM release (names and parameter lists
only, never vLLM's code) into vllm_signatures.json, and checks a test double against it.

    python3 vllm_signatures.py record [--out vllm_signatures.json]   # reads the git mirrors
    python3 vllm_signatures.py check                                  # every double vs the file
    python3 vllm_signatures.py show RELEASE

What is recorded, per release and per file of vLLM's kv_offload interface: each class with its
bases, its methods' parameter lists (names, "*"/"**" for varargs, "=" after a name with a
default; "self" dropped), its annotated fields (dataclasses) and its enum members
(NAME = ... assignments in the class body). The doubles under vllm_double/<release>/ must have
exactly these for every recorded class (a double may have more classes, never different ones),
which is what the CI check (test_vllm_spec.SignatureDriftTest) asserts.
"""

import argparse
import ast
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
RECORD = os.path.join(HERE, "vllm_signatures.json")
DOUBLES = os.path.join(HERE, "vllm_double")

ZH = "/work/.mirror/zh19990906+vllm/repo"
NM = "/work/.mirror/neuralmagic+vllm/repo"
EH = "/work/.mirror/eigen-hub+vllm/repo"

_OLD = ("vllm/v1/kv_offload/abstract.py", "vllm/v1/kv_offload/mediums.py",
        "vllm/v1/kv_offload/spec.py", "vllm/v1/kv_offload/worker/worker.py")
_BASE_WORKER = ("vllm/v1/kv_offload/base.py", "vllm/v1/kv_offload/worker/worker.py")
_BASE = ("vllm/v1/kv_offload/base.py",)
_BASE_CONFIG = ("vllm/v1/kv_offload/base.py", "vllm/v1/kv_offload/config.py")

# release -> (mirror, commit or tag, files).
RELEASES = {
    "v0_20_2": (EH, "bc150f5", _OLD),
    "v0_21_0": (ZH, "v0.21.0", _BASE_WORKER),
    "v0_22_0": (ZH, "v0.22.0", _BASE_WORKER),
    "v0_22_1": (ZH, "v0.22.1", _BASE_WORKER),
    "v0_23_0": (ZH, "v0.23.0", _BASE_WORKER),
    "v0_24_0": (ZH, "v0.24.0", _BASE_WORKER),
    "v0_25_0": (ZH, "v0.25.0", _BASE),
    "v0_25_1": (ZH, "v0.25.1", _BASE),
    "v0_26_0": (ZH, "v0.26.0", _BASE_CONFIG),
    "main_017e9f4": (NM, "017e9f4", _BASE_CONFIG),
    "main_7cfb97e": (NM, "7cfb97e", _BASE_CONFIG),
}


def _params(fn):
    a = fn.args
    out = []
    positional = a.posonlyargs + a.args
    first_default = len(positional) - len(a.defaults)
    for i, p in enumerate(positional):
        out.append(p.arg + ("=" if i >= first_default else ""))
    if a.vararg:
        out.append("*" + a.vararg.arg)
    elif a.kwonlyargs:
        out.append("*")
    for p, d in zip(a.kwonlyargs, a.kw_defaults):
        out.append(p.arg + ("=" if d is not None else ""))
    if a.kwarg:
        out.append("**" + a.kwarg.arg)
    if out and out[0] in ("self", "cls"):
        out = out[1:]
    return out


def _name(node):
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Subscript):
        return _name(node.value)
    return ast.dump(node)


def describe(source):
    """{class: {bases, methods: {name: [params]}, fields: [..], members: [..]}} of a module."""
    out = {}
    for node in ast.parse(source).body:
        if not isinstance(node, ast.ClassDef):
            continue
        bases = [_name(b) for b in node.bases]
        is_enum = any(b in ("Enum", "IntEnum", "StrEnum", "Flag", "IntFlag") for b in bases)
        cls = {"bases": bases, "methods": {}, "fields": [], "members": []}
        for item in node.body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                cls["methods"][item.name] = _params(item)
            elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                cls["fields"].append(item.target.id)
            elif is_enum and isinstance(item, ast.Assign):
                cls["members"] += [t.id for t in item.targets if isinstance(t, ast.Name)]
        out[node.name] = cls
    return out


def _git_show(mirror, rev, path):
    return subprocess.run(["git", "--git-dir", mirror, "show", "%s:%s" % (rev, path)],
                          check=True, capture_output=True, text=True).stdout


def record(out_path):
    data = {}
    for release, (mirror, rev, files) in RELEASES.items():
        commit = subprocess.run(["git", "--git-dir", mirror, "rev-parse", rev + "^{commit}"],
                                check=True, capture_output=True, text=True).stdout.strip()
        data[release] = {"commit": commit,
                         "files": {f: describe(_git_show(mirror, commit, f)) for f in files}}
    with open(out_path, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.write("\n")


def load():
    with open(RECORD) as f:
        return json.load(f)


# release -> its double (vllm_double/<name>); releases whose recorded signatures are identical
# share one (0.22.1 = 0.22.0, 0.25.1 = 0.25.0, main 7cfb97e = main 017e9f4: checked by drift()).
DOUBLE_OF = {
    "v0_20_2": "v0_20_2", "v0_21_0": "v0_21_0", "v0_22_0": "v0_22_0", "v0_22_1": "v0_22_0",
    "v0_23_0": "v0_23_0", "v0_24_0": "v0_24_0", "v0_25_0": "v0_25_0", "v0_25_1": "v0_25_0",
    "v0_26_0": "v0_26_0", "main_017e9f4": "main_2026_08", "main_7cfb97e": "main_2026_08",
}
DOUBLES_IN_USE = sorted(set(DOUBLE_OF.values()))


def double_dir(release):
    """The double that mirrors `release`."""
    return os.path.join(DOUBLES, DOUBLE_OF[release])


def drift(release, recorded=None):
    """What the release's double has different from the recorded signatures: a list of
    strings, empty when the double mirrors them exactly."""
    recorded = recorded or load()
    files = recorded[release]["files"]
    problems = []
    root = double_dir(release)
    for path, classes in sorted(files.items()):
        full = os.path.join(root, path)
        if not os.path.exists(full):
            problems.append("%s: missing %s" % (release, path))
            continue
        with open(full) as f:
            have = describe(f.read())
        for name, want in sorted(classes.items()):
            got = have.get(name)
            if got is None:
                problems.append("%s: %s lacks class %s" % (release, path, name))
                continue
            for what in ("bases", "fields", "members"):
                if got[what] != want[what]:
                    problems.append("%s: %s.%s %s %s, recorded %s" % (
                        release, path, name, what, got[what], want[what]))
            for m in sorted(set(want["methods"]) | set(got["methods"])):
                if want["methods"].get(m) != got["methods"].get(m):
                    problems.append("%s: %s.%s.%s(%s), recorded (%s)" % (
                        release, path, name, m,
                        ", ".join(got["methods"].get(m, ["<absent>"])),
                        ", ".join(want["methods"].get(m, ["<absent>"]))))
        extra = sorted(set(have) - set(classes))
        for name in extra:
            problems.append("%s: %s has class %s that the release does not" % (
                release, path, name))
    return problems


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("--out", default=RECORD)
    sub.add_parser("check")
    s = sub.add_parser("show")
    s.add_argument("release")
    args = p.parse_args(argv)
    if args.cmd == "record":
        record(args.out)
        return 0
    if args.cmd == "show":
        json.dump(load()[args.release], sys.stdout, indent=1, sort_keys=True)
        return 0
    problems = [x for rel in load() for x in drift(rel)]
    print("\n".join(problems) or "every double mirrors its release")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
