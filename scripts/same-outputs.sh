#!/usr/bin/env bash
# A renovation's proof (docs/style.md practice 20): the outputs of REF's code and NEW's, side by side.
#   bash scripts/same-outputs.sh REF [NEW] [json|verbs|both]     (NEW: HEAD; default: json)
# json: `profiler report BUNDLE --format json` of every sample bundle; verbs: flamegraph (folded,
# pools, off-CPU, SVG, pprof, speedscope) and heatmap (IO, --cpu) of every sample bundle, and the
# stack, block and biosnoop inputs of samples/ (errors and exit codes too). Each side is checked out into a temporary worktree,
# laid out as installed (scripts/typecheck-tree.sh) and run with this checkout's .venv from a
# folder holding only samples/. Prints each output that differs and a count; exits 1 if any does.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
ref=${1:?usage: same-outputs.sh REF [NEW] [json|verbs|both]}; new=${2:-HEAD}; what=${3:-json}
py="$top/.venv/bin/python"
base=$(mktemp -d "${TMPDIR:-/tmp}/same-outputs.XXXXXX")
cleanup() {
  for side in ref new; do git -C "$top" worktree remove --force "$base/$side-src" 2>/dev/null || true; done
  rm -rf "$base"
}
trap cleanup EXIT
for side in ref new; do
  commit=$ref; [ "$side" = new ] && commit=$new
  git -C "$top" worktree add --detach "$base/$side-src" "$commit" >/dev/null 2>&1
  bash "$base/$side-src/scripts/typecheck-tree.sh" "$base/$side-tree" >/dev/null
done
mkdir "$base/run"; ln -s "$top/samples" "$base/run/samples"
n=0; bad=0
same() {  # one profiler command line, run by both sides; its stdout, stderr and exit code compared
  local a b
  a=$(cd "$base/run" && { PYTHONPATH="$base/ref-tree" nice -n 10 "$py" -m profiler "$@" 2>&1; echo "exit $?"; } | md5sum)
  b=$(cd "$base/run" && { PYTHONPATH="$base/new-tree" nice -n 10 "$py" -m profiler "$@" 2>&1; echo "exit $?"; } | md5sum)
  n=$((n + 1)); [ "$a" = "$b" ] || { echo "differs: profiler $*"; bad=$((bad + 1)); }
}
for m in $(cd "$top" && find samples -name manifest.json | sort); do
  d=$(dirname "$m")
  if [ "$what" != verbs ]; then same report "$d" --format json -o /dev/stdout; fi
  if [ "$what" != json ]; then
    same flamegraph "$d" --folded; same flamegraph "$d" --folded --pools
    same flamegraph "$d" --offcpu --folded; same flamegraph "$d" --offcpu --folded --pools
    same flamegraph "$d" --offcpu; same flamegraph "$d" --format pprof -o /dev/stdout
    same flamegraph "$d" --offcpu --format speedscope -o /dev/stdout
    same heatmap "$d" --json; same heatmap "$d" --cpu --json
  fi
done
if [ "$what" != json ]; then
  for f in $(cd "$top" && ls samples/perf-script/*.txt samples/folded/*.folded); do
    same flamegraph "$f" --folded; same flamegraph "$f" --format pprof -o /dev/stdout
    same flamegraph "$f" --from 1; same flamegraph "$f" --offcpu --folded
  done
  for f in $(cd "$top" && ls samples/block/*.txt samples/block/*.perf.data.gz samples/biosnoop/*.txt); do
    same heatmap "$f" --json
  done
fi
echo "$n outputs compared ($what), $((bad)) differ: ref $(git -C "$top" rev-parse --short "$ref"), new $(git -C "$top" rev-parse --short "$new")"
[ "$bad" = 0 ]
