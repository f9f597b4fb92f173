#!/usr/bin/env bash
# Where replay's time goes: valgrind's callgrind counts the instructions of
# `gpu-sentinel replay` over an nvidia-smi log (instructions are repeatable, unlike seconds
# on a shared machine) and prints the total per row and the top functions.
#
# usage: bench/replay-profile.sh [ROWS, default 40000]
set -euo pipefail
cd "$(dirname "$0")/.."
rows=${1:-40000}
command -v valgrind >/dev/null || { echo "missing valgrind (apt-get install valgrind)" >&2; exit 1; }
cargo build --release --quiet --bin gpu-sentinel
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 bench/gen_smi_csv.py "$rows" >"$work/smi.csv"
valgrind --tool=callgrind --callgrind-out-file="$work/cg.out" \
  target/release/gpu-sentinel replay "$work/smi.csv" --json >/dev/null 2>"$work/valgrind.log"
callgrind_annotate "$work/cg.out" >"$work/annotated" 2>/dev/null
total=$(awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1; exit}' "$work/annotated")
echo "$rows rows: $total instructions, $((total / rows)) per row"
echo "top functions (instructions, share):"
awk '/file:function/ {on=1; next} on && NF {print "  " $0}' "$work/annotated" | head -15 | cut -c1-140
