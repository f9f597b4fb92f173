#!/usr/bin/env bash
# Replay throughput against two baselines merely reading the same file: Python's csv module
# (a plain loop over csv.reader, no row kept) and polars.read_csv (the whole file parsed
# into a DataFrame, every column a string, on polars' default thread pool), on two shapes
# of nvidia-smi log, and the engine's memory over a week of 8 GPUs.
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
# Each baseline's run must report ROWS data rows (and polars the shape's columns), or the
# script fails. polars is installed with pip if python3 cannot import it; the script fails
# if that does not work. polars' wall time counts starting Python and importing polars, as
# a user's script does; the time of read_csv itself is printed beside it. The cost per
# GPU-sample (one row) compares the shapes: the engine's work per GPU should not grow with
# the GPUs per round. The replay is timed as `replay --json` (parsing, the engine's steps,
# the alert rules and the report: what the baselines are held against), and again with
# `--save-state`, whose engine state written and synced to disk is printed beside it.
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

if ! python3 -c 'import polars' 2>/dev/null; then
  echo "installing polars (pip)" >&2
  python3 -m pip install --quiet --root-user-action=ignore polars || {
    echo "bench/replay.sh: cannot install polars with pip; it is one of the baselines" >&2
    exit 1
  }
  python3 -c 'import polars' || {
    echo "bench/replay.sh: polars installed but python3 cannot import it" >&2
    exit 1
  }
fi

declare -A fields=([wide]=29 [narrow]=10)
for shape in $shapes; do
  python3 bench/gen_smi_csv.py "$rows" "$shape" >"$work/$shape.csv"
done
head -n $((rows / 4 + 1)) "$work/wide.csv" >"$work/quarter.csv"

# time_run NAME CMD…: appends "NAME wall user maxrss_kib sys" to $work/runs.
time_run() {
  local name=$1
  shift
  /usr/bin/time -f "$name %e %U %M %S" -a -o "$work/runs" "$@" >"$work/out" 2>"$work/err" || {
    cat "$work/err" >&2
    exit 1
  }
}

# The replay reads on one thread and steps the engine on another; pinned to one CPU it
# shows what a single core does.
for _ in $(seq "$runs"); do
  for shape in $shapes; do
    time_run "python-$shape" python3 bench/py_csv_read.py "$work/$shape.csv"
    read -r got_rows got_fields <"$work/out"
    if [ "$got_rows" != "$rows" ] || [ "$got_fields" != "$(((rows + 1) * ${fields[$shape]}))" ]; then
      echo "python csv on $shape: $got_rows rows, $got_fields fields; want $rows rows" >&2
      exit 1
    fi
    time_run "polars-$shape" python3 bench/polars_read.py "$work/$shape.csv"
    read -r got_rows got_cols pl_threads pl_version pl_parse <"$work/out"
    echo "$shape $pl_parse" >>"$work/polars-parse"
    if [ "$got_rows" != "$rows" ] || [ "$got_cols" != "${fields[$shape]}" ]; then
      echo "polars on $shape: $got_rows rows, $got_cols columns; want $rows and ${fields[$shape]}" >&2
      exit 1
    fi
    time_run "replay-$shape" "$bin" replay "$work/$shape.csv" --json
    cp "$work/out" "$work/report-$shape.json"
    time_run "saved-$shape" "$bin" replay "$work/$shape.csv" --json --save-state "$work/state-$shape.json"
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
  read -r _ py_wall py_user py_rss py_sys <<<"$(best "python-$shape")"
  read -r _ pl_wall pl_user pl_rss pl_sys <<<"$(best "polars-$shape")"
  pl_parse=$(awk -v s="$shape" '$1 == s' "$work/polars-parse" | sort -k2,2n | head -1 | cut -d' ' -f2)
  read -r _ rs_wall rs_user rs_rss rs_sys <<<"$(best "replay-$shape")"
  read -r _ pin_wall pin_user _ <<<"$(best "pinned-$shape")"
  report=$work/report-$shape.json
  samples=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["samples"])' "$report")
  gpus=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["gpus"]))' "$report")
  span=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["start"], "to", r["end"])' "$report")
  echo "== $shape: $gpus GPUs, rows: $rows ($(du -m "$work/$shape.csv" | cut -f1) MiB), samples replayed: $samples, $span"
  echo "python csv.reader loop (no row kept), best of $runs: ${py_wall}s wall, ${py_user}s user, ${py_sys}s sys, max RSS $((py_rss / 1024)) MiB"
  echo "polars $pl_version read_csv (all strings, $pl_threads threads), best of $runs: ${pl_wall}s wall (read_csv itself ${pl_parse}s at best), ${pl_user}s user, ${pl_sys}s sys, max RSS $((pl_rss / 1024)) MiB"
  echo "gpu-sentinel replay --json, best of $runs: ${rs_wall}s wall, ${rs_user}s user, ${rs_sys}s sys, max RSS $((rs_rss / 1024)) MiB"
  echo "replay pinned to one CPU: ${pin_wall}s wall, ${pin_user}s user"
  read -r _ sv_wall sv_user _ <<<"$(best "saved-$shape")"
  awk -v s="$sv_wall" -v u="$sv_user" -v l="$pl_wall" 'BEGIN {
    printf "replay --json --save-state (the engine state written and synced), best: %.2fs wall, %.2fs user; polars wall / it: %.2fx\n", s, u, l / s }'
  # CPU: user and system time together (polars spends much of its CPU time in the
  # kernel, faulting in the DataFrame's pages).
  for base in "python-csv $py_wall $py_user $py_sys" "polars $pl_wall $pl_user $pl_sys"; do
    read -r name b_wall b_user b_sys <<<"$base"
    awk -v n="$name" -v p="$b_wall" -v r="$rs_wall" -v pc="$b_user" -v ps="$b_sys" \
      -v rc="$rs_user" -v rs="$rs_sys" -v q="$pin_wall" 'BEGIN {
      printf "ratio (%s wall / replay wall): %.2fx; CPU (user+sys) / CPU: %.2fx; wall / replay on one CPU: %.2fx\n",
        n, p / r, (pc + ps) / (rc + rs), p / q }'
  done
  awk -v p="$pl_parse" -v r="$rs_wall" -v q="$pin_wall" 'BEGIN {
    printf "ratio (polars read_csv itself / replay wall): %.2fx; / replay on one CPU: %.2fx\n", p / r, p / q }'
  awk -v w="$rs_wall" -v c="$rs_user" -v p="$pin_wall" -v n="$samples" 'BEGIN {
    printf "per GPU-sample: %.3f us wall, %.3f us CPU (user), %.3f us on one CPU\n", w * 1e6 / n, c * 1e6 / n, p * 1e6 / n }'
  if [ -n "$before" ]; then
    read -r _ b_wall b_user b_rss _ <<<"$(best "before-$shape")"
    read -r _ bp_wall bp_user _ <<<"$(best "before-pinned-$shape")"
    echo "BEFORE replay --json, best of $runs: ${b_wall}s wall, ${b_user}s user, max RSS $((b_rss / 1024)) MiB; pinned to one CPU: ${bp_wall}s wall"
    awk -v p="$py_wall" -v l="$pl_wall" -v r="$b_wall" -v q="$bp_wall" 'BEGIN {
      printf "BEFORE ratio (python-csv wall / replay wall): %.2fx; on one CPU: %.2fx\n", p / r, p / q
      printf "BEFORE ratio (polars wall / replay wall): %.2fx; on one CPU: %.2fx\n", l / r, l / q }'
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
read -r _ q_wall _ q_rss _ <<<"$(best quarter)"
read -r _ _ _ rs_rss _ <<<"$(best replay-wide)"
echo "wide: replay of the first quarter: ${q_wall}s wall, max RSS $((q_rss / 1024)) MiB (whole: $((rs_rss / 1024)) MiB)"
echo "wide: engine state after the replay (JSON, as persisted): $(stat -c %s "$work/state-wide.json") bytes"
echo "narrow: engine state after the replay (JSON, as persisted): $(stat -c %s "$work/state-narrow.json") bytes"
echo "all runs (name wall user maxrss_kib sys):"
cat "$work/runs"
