#!/usr/bin/env bash
# Materialises the unmodified vLLM files the real-source harness loads (MANIFEST.tsv: generation,
# path, commit, sha256) into DEST/<generation>/<path>, and checks every sha256.
#
#   prepare.sh SOURCE [SOURCE...] DEST
#
# Each SOURCE may be
#   - a git directory or clone holding the commits (bare mirror: github eigen-hub/vllm has the
#     v0.20.2 tag bc150f5, neuralmagic/vllm has main 017e9f4 and 7cfb97e, zh19990906/vllm has
#     the tags v0.21.0 ... v0.26.0), read with `git show COMMIT:PATH`;
#   - a folder laid out as DEST is (SOURCE/<generation>/<path>), e.g. an earlier DEST;
#   - a plain vLLM checkout (SOURCE/<path>), used only when the file's sha256 matches.
# Sources are tried in order for every file. Exits 1 naming each file it could not find or whose
# hash differs; nothing from vLLM is stored in this repository.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
manifest="$here/MANIFEST.tsv"
if [ "$#" -lt 2 ]; then
  sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
  exit 2
fi
dest="${!#}"
sources=("${@:1:$#-1}")
mkdir -p "$dest"

sha() { sha256sum "$1" | cut -d' ' -f1; }

is_git() { git --git-dir="$1" rev-parse --git-dir >/dev/null 2>&1 || git -C "$1" rev-parse --git-dir >/dev/null 2>&1; }

git_show() {  # dir commit path out
  if git --git-dir="$1" cat-file -e "$2:$3" 2>/dev/null; then
    git --git-dir="$1" show "$2:$3" >"$4"
  elif git -C "$1" cat-file -e "$2:$3" 2>/dev/null; then
    git -C "$1" show "$2:$3" >"$4"
  else
    return 1
  fi
}

missing=0
count=0
tmp="$(mktemp)"
trap 'rm -f "$tmp"' EXIT
while IFS=$'\t' read -r gen path commit want; do
  [ "$gen" = "generation" ] && continue
  [ -z "$gen" ] && continue
  out="$dest/$gen/$path"
  mkdir -p "$(dirname "$out")"
  if [ -f "$out" ] && [ "$(sha "$out")" = "$want" ]; then
    count=$((count + 1))
    continue
  fi
  found=""
  for src in "${sources[@]}"; do
    if is_git "$src" && git_show "$src" "$commit" "$path" "$tmp"; then
      :
    elif [ -f "$src/$gen/$path" ]; then
      cp "$src/$gen/$path" "$tmp"
    elif [ -f "$src/$path" ]; then
      cp "$src/$path" "$tmp"
    else
      continue
    fi
    if [ "$(sha "$tmp")" = "$want" ]; then
      cp "$tmp" "$out"
      found="$src"
      break
    fi
    echo "prepare.sh: $gen $path from $src: sha256 $(sha "$tmp"), want $want" >&2
  done
  if [ -z "$found" ]; then
    echo "prepare.sh: MISSING $gen $path (commit $commit, sha256 $want)" >&2
    missing=$((missing + 1))
  else
    count=$((count + 1))
  fi
done <"$manifest"

if [ "$missing" -ne 0 ]; then
  echo "prepare.sh: $missing file(s) missing or wrong; $count ok" >&2
  exit 1
fi
{
  echo "vLLM files for kvoffload's real-source harness (python/tests/vllm_real), materialised by"
  echo "prepare.sh from MANIFEST.tsv; every sha256 checked. Not to be committed anywhere."
  echo "generation, commit, files:"
  awk -F'\t' 'NR > 1 && $1 != "" { n[$1]++; c[$1] = $3; if (!($1 in o)) o[$1] = ++k }
               END { for (g in o) printf "%d %-14s %s %d\n", o[g], g, c[g], n[g] }' "$manifest" |
    sort -n | cut -d' ' -f2-
} >"$dest/README.txt"
echo "prepare.sh: $count files in $dest, sha256 verified"
