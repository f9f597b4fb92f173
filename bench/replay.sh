#!/usr/bin/env bash
# Replay throughput against Python's csv module merely reading the same file, on two
# shapes of nvidia-smi log, and the engine's memory over a week of 8 GPUs.
#
#   bench/replay.sh [ROWS] [RUNS]      # default: 1,000,000 rows a shape, best of 3 runs each
#   BEFORE=path/to/gpu-sentinel bench/replay.sh …   # and another build (say main's) beside
#                                                    # this one, in the same alternation
#   BIN=path/to/gpu-sentinel bench/replay.sh …      # that build instead of building this tree
#
# The logs are what `nvidia-smi --query-gpu=<fields> --format=csv -l 5` writes
# (bench/gen_smi_csv.py): `wide`, 8 GPUs and 29 fields (1,000,000 rows span 7.2 days), and
# `narrow`, 64 GPUs and 10 fields (21.7 hours). Runs of the programs alternate, over both
# shapes, so load from elsewhere on the machine hits all alike; the best run of each counts.
# The cost per GPU-sample (one row) compares the shapes: the engine's work per GPU should
# not grow with the GPUs per round.
set -euo pipefail
cd "$(dirname "$0")/.."
rows=${1:-1000000}
runs=${2:-3}
bin=${BIN:-}
if [ -z "$bin" ]; then
  cargo build --release --quiet --bin gpu-sentinel
  bin=target/release/gpu-sentinel
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
shapes="wide narrow"
before=${BEFORE:-}
if [ -n "$before" ]; then
  [ -x "$before" ] || { echo "BEFORE=$before is not an executable" >&2; exit 1; }
  # A copy, so that a rebuild while the benchmark runs cannot swap it.
  cp "$before" "$work/before"
  before=$work/before
fi

for shape in $shapes; do
  python3 bench/gen_smi_csv.py "$rows" "$shape" >"$work/$shape.csv"
done
head -n $((rows / 4 + 1)) "$work/wide.csv" >"$work/quarter.csv"

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
  for shape in $shapes; do
    time_run "python-$shape" python3 bench/py_csv_read.py "$work/$shape.csv"
    time_run "replay-$shape" "$bin" replay "$work/$shape.csv" --json --save-state "$work/state-$shape.json"
    cp "$work/out" "$work/report-$shape.json"
    time_run "pinned-$shape" taskset -c 0 "$bin" replay "$work/$shape.csv" --json
    if [ -n "$before" ]; then
      time_run "before-$shape" "$before" replay "$work/$shape.csv" --json
      cp "$work/out" "$work/before-report-$shape.json"
      time_run "before-pinned-$shape" taskset -c 0 "$before" replay "$work/$shape.csv" --json
    fi
  done
done
time_run quarter "$bin" replay "$work/quarter.csv" --json

best() { awk -v n="$1" '$1 == n' "$work/runs" | sort -k2,2n | head -1; }
for shape in $shapes; do
  read -r _ py_wall py_user py_rss <<<"$(best "python-$shape")"
  read -r _ rs_wall rs_user rs_rss <<<"$(best "replay-$shape")"
  read -r _ pin_wall pin_user _ <<<"$(best "pinned-$shape")"
  report=$work/report-$shape.json
  samples=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["samples"])' "$report")
  gpus=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["gpus"]))' "$report")
  span=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["start"], "to", r["end"])' "$report")
  echo "== $shape: $gpus GPUs, rows: $rows ($(du -m "$work/$shape.csv" | cut -f1) MiB), samples replayed: $samples, $span"
  echo "python csv.reader, best of $runs: ${py_wall}s wall, ${py_user}s user, max RSS $((py_rss / 1024)) MiB"
  echo "gpu-sentinel replay --json, best of $runs: ${rs_wall}s wall, ${rs_user}s user, max RSS $((rs_rss / 1024)) MiB"
  echo "replay pinned to one CPU: ${pin_wall}s wall, ${pin_user}s user"
  awk -v p="$py_wall" -v r="$rs_wall" 'BEGIN { printf "ratio (python wall / replay wall): %.2fx\n", p / r }'
  awk -v p="$py_user" -v r="$rs_user" 'BEGIN { printf "ratio (python CPU / replay CPU): %.2fx\n", p / r }'
  awk -v p="$py_wall" -v r="$pin_wall" 'BEGIN { printf "ratio (python wall / replay on one CPU): %.2fx\n", p / r }'
  awk -v w="$rs_wall" -v c="$rs_user" -v p="$pin_wall" -v n="$samples" 'BEGIN {
    printf "per GPU-sample: %.3f us wall, %.3f us CPU, %.3f us on one CPU\n", w * 1e6 / n, c * 1e6 / n, p * 1e6 / n }'
  if [ -n "$before" ]; then
    read -r _ b_wall b_user b_rss <<<"$(best "before-$shape")"
    read -r _ bp_wall bp_user _ <<<"$(best "before-pinned-$shape")"
    echo "BEFORE replay --json, best of $runs: ${b_wall}s wall, ${b_user}s user, max RSS $((b_rss / 1024)) MiB; pinned to one CPU: ${bp_wall}s wall"
    awk -v p="$py_wall" -v r="$b_wall" -v q="$bp_wall" 'BEGIN {
      printf "BEFORE ratio (python wall / replay wall): %.2fx; on one CPU: %.2fx\n", p / r, p / q }'
    awk -v b="$b_wall" -v r="$rs_wall" -v bc="$b_user" -v rc="$rs_user" 'BEGIN {
      printf "this build against BEFORE: %.2fx faster (wall), %.2fx less CPU\n", b / r, bc / rc }'
    if cmp -s "$report" "$work/before-report-$shape.json"; then
      echo "replay --json: the same bytes as BEFORE's"
    else
      echo "replay --json: DIFFERS from BEFORE's"
    fi
  fi
  echo "$shape $rs_wall $rs_user $pin_wall $samples" >>"$work/per-sample"
done
awk '{ wall[$1] = $2 / $5; cpu[$1] = $3 / $5; pin[$1] = $4 / $5 }
  END { printf "per GPU-sample cost, narrow (64 GPUs) / wide (8 GPUs): %.2fx wall, %.2fx CPU, %.2fx on one CPU\n",
    wall["narrow"] / wall["wide"], cpu["narrow"] / cpu["wide"], pin["narrow"] / pin["wide"] }' "$work/per-sample"
read -r _ q_wall _ q_rss <<<"$(best quarter)"
read -r _ _ _ rs_rss <<<"$(best replay-wide)"
echo "wide: replay of the first quarter: ${q_wall}s wall, max RSS $((q_rss / 1024)) MiB (whole: $((rs_rss / 1024)) MiB)"
echo "wide: engine state after the replay (JSON, as persisted): $(stat -c %s "$work/state-wide.json") bytes"
echo "narrow: engine state after the replay (JSON, as persisted): $(stat -c %s "$work/state-narrow.json") bytes"
echo "all runs (name wall user maxrss_kib):"
cat "$work/runs"
