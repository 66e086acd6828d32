#!/usr/bin/env bash
# Lay the installed package out as Python sees it (profiler.analyzers -> analyzers/, ...) so mypy
# type-checks the package under its real module names: bash scripts/typecheck-tree.sh [DIR]
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
tree=${1:-$top/build/typecheck}
rm -rf "$tree"; mkdir -p "$tree/profiler"
for e in "$top"/profiler/*; do ln -s "$e" "$tree/profiler/$(basename "$e")"; done
for d in collectors analyzers templates; do ln -s "$top/$d" "$tree/profiler/$d"; done
echo "$tree"
