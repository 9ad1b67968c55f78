#!/usr/bin/env python3
"""Writes docs/api.md, the gRPC API reference, from the comments of kvoffload.proto and of
error_info.proto (the error reasons).

  python3 proto/gen_api_doc.py            # rewrite docs/api.md
  python3 proto/gen_api_doc.py --check    # exit 1 if docs/api.md is stale (CI)
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROTO = ROOT / "proto/kvoffload/v1/kvoffload.proto"
ERRORS = ROOT / "proto/kvoffload/v1/error_info.proto"
DOC = ROOT / "docs/api.md"


def render(text: str, errors: str = "") -> str:
    out = ["# kvoffload gRPC API (`kvoffload.v1`)", "",
           "Generated from `proto/kvoffload/v1/kvoffload.proto` and `error_info.proto` by "
           "`proto/gen_api_doc.py`; edit the .proto comments, not this file.", ""]
    out.extend(render_file(text))
    if errors:
        out.extend(["", "## Errors (`error_info.proto`)", ""])
        out.extend(render_file(errors))
    return "\n".join(out).rstrip() + "\n"


def render_file(text: str) -> list:
    out: list[str] = []
    lines = text.splitlines()
    comment: list[str] = []
    header_done = False
    block = None  # ("message"|"enum"|"service", name)
    rows: list[str] = []

    def flush_block():
        nonlocal block, rows
        if block is None:
            return
        kind, name, doc = block
        out.append(f"### {kind} `{name}`")
        out.append("")
        if doc:
            out.append(doc)
            out.append("")
        if rows:
            if kind == "service":
                out.append("| rpc | request | response | notes |")
                out.append("|---|---|---|---|")
            elif kind == "enum":
                out.append("| value | number | notes |")
                out.append("|---|---|---|")
            else:
                out.append("| field | type | number | notes |")
                out.append("|---|---|---|---|")
            out.extend(rows)
            out.append("")
        block, rows = None, []

    for raw in lines:
        line = raw.strip()
        if line.startswith("//"):
            text_part = line[2:].strip()
            if set(text_part) <= set("-") and text_part:
                out_section = None
                continue
            comment.append(text_part)
            continue
        if not header_done and line.startswith("syntax"):
            out.extend(c for c in comment)
            out.append("")
            comment, header_done = [], True
            continue
        m = re.match(r"(message|enum|service)\s+(\w+)\s*\{", line)
        if m:
            flush_block()
            block = (m.group(1), m.group(2), " ".join(comment))
            comment = []
            continue
        if block is None:
            comment = []
            continue
        trailing = ""
        if "//" in line:
            line, trailing = line.split("//", 1)
            line, trailing = line.strip(), trailing.strip()
        notes = " ".join(comment + ([trailing] if trailing else [])).replace("|", "\\|")
        comment = []
        m = re.match(r"rpc\s+(\w+)\((stream\s+)?([\w.]+)\)\s+returns\s+\((stream\s+)?([\w.]+)\)", line)
        if m:
            req = ("stream " if m.group(2) else "") + m.group(3)
            resp = ("stream " if m.group(4) else "") + m.group(5)
            rows.append(f"| `{m.group(1)}` | `{req}` | `{resp}` | {notes} |")
            continue
        m = re.match(r"(\w+)\s*=\s*(\d+);", line)
        if m and block[0] == "enum":
            rows.append(f"| `{m.group(1)}` | {m.group(2)} | {notes} |")
            continue
        m = re.match(r"((?:repeated\s+)?(?:map<[^>]+>|[\w.]+))\s+(\w+)\s*=\s*(\d+)", line)
        if m and m.group(1) not in ("oneof",):
            rows.append(f"| `{m.group(2)}` | `{m.group(1)}` | {m.group(3)} | {notes} |")
            continue
        if line.startswith("}") and not line.startswith("}}"):
            # closing brace of a oneof stays inside the message; a top-level one ends the block
            if raw.startswith("}"):
                flush_block()
    flush_block()
    return out


def main() -> int:
    doc = render(PROTO.read_text(), ERRORS.read_text())
    if "--check" in sys.argv:
        if not DOC.exists() or DOC.read_text() != doc:
            print("docs/api.md is stale: run python3 proto/gen_api_doc.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
