#!/usr/bin/env bash
# Where replay's time goes: valgrind's callgrind counts the instructions of
# `gpu-sentinel replay` over an nvidia-smi log (instructions are repeatable, unlike seconds
# on a shared machine) and prints the total per row, the inclusive cost per row of the
# replay's parts, and the top functions.
#
# usage: bench/replay-profile.sh [ROWS, default 40000] [SHAPE: wide (default) or narrow]
#        BIN=path/to/gpu-sentinel bench/replay-profile.sh …   # profile another build
set -euo pipefail
cd "$(dirname "$0")/.."
rows=${1:-40000}
shape=${2:-wide}
command -v valgrind >/dev/null || { echo "missing valgrind (apt-get install valgrind)" >&2; exit 1; }
bin=${BIN:-}
if [ -z "$bin" ]; then
  cargo build --release --quiet --bin gpu-sentinel
  bin=target/release/gpu-sentinel
fi
work=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] && cp "$work/cg.out" "$KEEP"; rm -rf "$work"' EXIT
python3 bench/gen_smi_csv.py "$rows" "$shape" >"$work/smi.csv"
valgrind --tool=callgrind --callgrind-out-file="$work/cg.out" \
  "$bin" replay "$work/smi.csv" --json >/dev/null 2>"$work/valgrind.log"
callgrind_annotate "$work/cg.out" >"$work/annotated" 2>/dev/null
callgrind_annotate --inclusive=yes "$work/cg.out" >"$work/inclusive" 2>/dev/null
total=$(awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1; exit}' "$work/annotated")
echo "$shape, $rows rows: $total instructions, $((total / rows)) per row"
# Inclusive instructions per row of the replay's parts (the first symbol matching each).
echo "parts (inclusive instructions per row):"
for part in 'SnapshotReader>::next_into' 'smi_row::read' 'smi_lines::Cells::split_plain' \
  'csv_core::reader::Reader::read_record' 'Engine::step' 'Engine::assess_risk' \
  'window::Windows::summaries_into' 'window::Windows::add' 'window::Ring::add' \
  'risk::assess_with' 'risk::assess' 'Hold::apply' 'Signals::of' 'RiskState::observe' \
  'PeerScratch::median' 'ReportBuilder::observe' 'ReplayRules>::step'; do
  line=$(grep -F "$part [" "$work/inclusive" | head -1 || true)
  [ -n "$line" ] || continue
  count=$(awk '{gsub(",", "", $1); print $1}' <<<"$line")
  name=$(sed -E 's/^ *[0-9,]+ \([^)]*\) *//' <<<"$line" | cut -c1-90)
  printf "  %7d  %s\n" "$((count / rows))" "$name"
done
echo "top functions (instructions, share):"
awk '/file:function/ {on=1; next} on && NF {print "  " $0}' "$work/annotated" | head -20 | cut -c1-140
