#!/usr/bin/env bash
# Replay throughput against Python's csv module merely reading the same file, and the
# engine's memory over a week of 8 GPUs.
#
#   bench/replay.sh [ROWS] [RUNS]      # default: 1,000,000 rows, best of 3 runs each
#
# The log is what `nvidia-smi --query-gpu=<29 fields> --format=csv -l 5` writes for 8 GPUs
# (bench/gen_smi_csv.py): 1,000,000 rows span 7.2 days. Runs of the two programs alternate,
# so load from elsewhere on the machine hits both alike; the best run of each counts.
set -euo pipefail
cd "$(dirname "$0")/.."
rows=${1:-1000000}
runs=${2:-3}
cargo build --release --quiet --bin gpu-sentinel
bin=target/release/gpu-sentinel
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

python3 bench/gen_smi_csv.py "$rows" >"$work/smi.csv"
head -n $((rows / 4 + 1)) "$work/smi.csv" >"$work/quarter.csv"

# time_run NAME CMD…: appends "NAME wall user maxrss_kib" to $work/runs.
time_run() {
  local name=$1
  shift
  /usr/bin/time -f "$name %e %U %M" -a -o "$work/runs" "$@" >"$work/out" 2>"$work/err" || {
    cat "$work/err" >&2
    exit 1
  }
}

# The replay reads on one thread and steps the engine on another; pinned to one CPU it
# shows what a single core does.
for _ in $(seq "$runs"); do
  time_run python python3 bench/py_csv_read.py "$work/smi.csv"
  time_run replay "$bin" replay "$work/smi.csv" --json --save-state "$work/state.json"
  cp "$work/out" "$work/report.json"
  time_run pinned taskset -c 0 "$bin" replay "$work/smi.csv" --json
done
time_run quarter "$bin" replay "$work/quarter.csv" --json

best() { awk -v n="$1" '$1 == n' "$work/runs" | sort -k2,2n | head -1; }
read -r _ py_wall py_user py_rss <<<"$(best python)"
read -r _ rs_wall rs_user rs_rss <<<"$(best replay)"
read -r _ q_wall _ q_rss <<<"$(best quarter)"
read -r _ pin_wall pin_user _ <<<"$(best pinned)"
samples=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["samples"])' "$work/report.json")
span=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["start"], "to", r["end"])' "$work/report.json")
state=$(stat -c %s "$work/state.json")

echo "rows: $rows ($(du -m "$work/smi.csv" | cut -f1) MiB), samples replayed: $samples, $span"
echo "python csv.reader, best of $runs: ${py_wall}s wall, ${py_user}s user, max RSS $((py_rss / 1024)) MiB"
echo "gpu-sentinel replay --json, best of $runs: ${rs_wall}s wall, ${rs_user}s user, max RSS $((rs_rss / 1024)) MiB"
echo "replay pinned to one CPU: ${pin_wall}s wall, ${pin_user}s user"
echo "replay of the first quarter: ${q_wall}s wall, max RSS $((q_rss / 1024)) MiB"
awk -v p="$py_wall" -v r="$rs_wall" 'BEGIN { printf "ratio (python wall / replay wall): %.2fx\n", p / r }'
awk -v p="$py_user" -v r="$rs_user" 'BEGIN { printf "ratio (python CPU / replay CPU): %.2fx\n", p / r }'
awk -v p="$py_wall" -v r="$pin_wall" 'BEGIN { printf "ratio (python wall / replay on one CPU): %.2fx\n", p / r }'
echo "engine state after the replay (JSON, as persisted): $state bytes"
echo "all runs (name wall user maxrss_kib):"
cat "$work/runs"
