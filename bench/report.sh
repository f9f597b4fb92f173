#!/usr/bin/env bash
# The fleet report against one pass of Prometheus over the same samples.
#
#   bench/report.sh [HOSTS] [DAYS] [RUNS]     # default: 64 hosts (8 GPUs each), 7 days, best of 3
#   BENCH_BLOCKS=DIR bench/report.sh …        # keep the TSDB blocks in DIR, or reuse them from
#                                             # there (recording 64 hosts takes a while)
#
# `record --format openmetrics` writes the simulated fleet's history at 60 s, restricted to
# the families the report reads; promtool turns it into TSDB blocks; the Debian
# `prometheus` serves them. Then, in the same run and against the same server, alternating:
#   pass:   sum(count_over_time(gpu_utilization_ratio[DAYSd])) as an instant query at the
#           last recorded sample — Prometheus reading every utilization sample once (curl);
#   report: gpu-sentinel report over the same DAYS days, --format json and --format html
#           (/usr/bin/time: wall and max RSS).
# The best run of each counts; the first (cold) run is printed too. The period is given as
# --from/--to ending at the last recorded sample, which is what --last DAYSd asks at the
# moment the recording ends: the pass and the report see the same samples however long the
# backfill took.
set -euo pipefail
cd "$(dirname "$0")/.."
hosts=${1:-64}
days=${2:-7}
runs=${3:-3}
for tool in prometheus promtool curl python3 /usr/bin/time; do
  command -v "$tool" >/dev/null || {
    echo "missing $tool (apt-get install prometheus curl python3 time)" >&2
    exit 1
  }
done
CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-1} cargo build --release --locked --quiet --bin gpu-sentinel
# What the report queries (src/fleet/dialect.rs, figures.rs): utilization, owner seconds,
# power, and the risk score with its contributions.
families='^gpu_(utilization_ratio|owner_seconds_total|power_watts|failure_risk_(score|contribution))$'

work=$(mktemp -d)
prom=""
cleanup() {
  if [ -n "$prom" ]; then
    kill "$prom" 2>/dev/null || true
    wait "$prom" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
# A copy, so a rebuild during the run does not change what is measured.
cp target/release/gpu-sentinel "$work/gpu-sentinel"
bin=$work/gpu-sentinel
data=${BENCH_BLOCKS:-$work/data}

# 1. The history, and the blocks. Blocks of up to 54 h are what a Prometheus holding a week
# has compacted its 2 h blocks into; the server below keeps them as they are
# (--storage.tsdb.max-block-duration), so no compaction runs while the clock does.
if [ -n "$(find "$data" -mindepth 2 -maxdepth 2 -name meta.json 2>/dev/null)" ]; then
  made="blocks reused from $data"
else
  /usr/bin/time -f "%e %M" -o "$work/record.time" "$bin" record --simulate \
    --simulated-duration "${days}d" --interval 60s --format openmetrics --hosts "$hosts" \
    --families "$families" --out "$work/history.om" 2>"$work/record.log"
  read -r record_wall record_rss <"$work/record.time"
  # Ground truth for the pass: the recording's utilization samples (a GPU that falls off
  # the bus has none while it is gone).
  grep -c '^gpu_utilization_ratio{' "$work/history.om" >"$data.samples"
  om_mib=$(($(stat -c %s "$work/history.om") >> 20))
  /usr/bin/time -f "%e %M" -o "$work/blocks.time" promtool tsdb create-blocks-from openmetrics \
    -q --max-block-duration=54h "$work/history.om" "$data" >/dev/null
  read -r blocks_wall blocks_rss <"$work/blocks.time"
  rm "$work/history.om"
  made="record: ${record_wall}s wall, max RSS $((record_rss / 1024)) MiB, ${om_mib} MiB of OpenMetrics
promtool tsdb create-blocks-from openmetrics: ${blocks_wall}s wall, max RSS $((blocks_rss / 1024)) MiB"
fi
blocks=$(find "$data" -mindepth 2 -maxdepth 2 -name meta.json | wc -l)
data_mib=$(du -sm "$data" | cut -f1)
# The last recorded sample: the newest block's maxTime (exclusive, in milliseconds).
end_ms=$(python3 -c '
import glob, json, sys
print(max(json.load(open(m))["maxTime"] for m in glob.glob(sys.argv[1] + "/*/meta.json")) - 1)
' "$data")
end=$(python3 -c 'import sys; print(int(sys.argv[1]) // 1000)' "$end_ms")
iso() { python3 -c 'import datetime, sys; print(datetime.datetime.fromtimestamp(int(sys.argv[1]), datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))' "$1"; }
to=$(iso "$end")
from=$(iso $((end - days * 86400)))

# 2. Prometheus on the blocks, ready once it answers and has loaded every block.
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
url=http://127.0.0.1:$port
printf 'global:\n  scrape_interval: 1m\n' >"$work/prometheus.yml"
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$data" \
  --storage.tsdb.retention.time=100y --storage.tsdb.max-block-duration=54h \
  --web.listen-address="127.0.0.1:$port" 2>"$work/prometheus.log" &
prom=$!
for _ in $(seq 600); do
  loaded=$(curl -sf "$url/metrics" | awk '$1 == "prometheus_tsdb_blocks_loaded" { print $2 }') || true
  if curl -sf -o /dev/null "$url/-/ready" && [ "${loaded:-0}" = "$blocks" ]; then break; fi
  sleep 0.5
done
[ "${loaded:-0}" = "$blocks" ] || { echo "prometheus did not load $blocks blocks" >&2; tail "$work/prometheus.log" >&2; exit 1; }

# Prometheus's CPU seconds so far (user + system), from /proc.
prom_cpu() { awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f", ($14 + $15) / hz }' "/proc/$prom/stat"; }
prom_rss_mib() { awk '/^VmRSS/ { print int($2 / 1024) }' "/proc/$prom/status"; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }

# 3. Alternating runs; each appends "name wall maxrss_kib prometheus_cpu_s" to $work/runs.
pass() {
  local before after wall
  before=$(prom_cpu)
  wall=$(curl -sf -o "$work/pass.json" -w '%{time_total}' "$url/api/v1/query" \
    --data-urlencode 'query=sum(count_over_time(gpu_utilization_ratio['"$days"'d]))' \
    --data-urlencode "time=$end")
  after=$(prom_cpu)
  echo "pass $wall 0 $(elapsed "$before" "$after")" >>"$work/runs"
}
report() {
  local format=$1 before after
  before=$(prom_cpu)
  # At debug, the client logs each query with its duration (src/fleet/prom.rs).
  RUST_LOG=gpu_sentinel::fleet::prom=debug /usr/bin/time -f "%e %M" -o "$work/time" \
    "$bin" report --prometheus "$url" --from "$from" --to "$to" --format "$format" \
    --out "$work/report.$format" 2>"$work/report.log" || {
    cat "$work/report.log" >&2
    exit 1
  }
  after=$(prom_cpu)
  echo "$format $(cat "$work/time") $(elapsed "$before" "$after")" >>"$work/runs"
  cp "$work/report.log" "$work/queries.$format"
}
for _ in $(seq "$runs"); do
  pass
  report json
  report html
done

# 4. Sanity: the pass counted every sample; the report saw every GPU.
samples=$(python3 -c 'import json, sys; print(int(float(json.load(open(sys.argv[1]))["data"]["result"][0]["value"][1])))' "$work/pass.json")
gpus=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["fleet"]["gpus"])' "$work/report.json")
expected=$(cat "$data.samples")
[ "$samples" = "$expected" ] || { echo "the pass counted $samples samples, the recording has $expected" >&2; exit 1; }
[ "$gpus" = $((hosts * 8)) ] || { echo "the report saw $gpus GPUs, expected $((hosts * 8))" >&2; exit 1; }
series=$(curl -sf "$url/api/v1/query" --data-urlencode "query=count({__name__=~\".+\"})" \
  --data-urlencode "time=$end" | python3 -c 'import json, sys; print(json.load(sys.stdin)["data"]["result"][0]["value"][1])')
html_kib=$(($(stat -c %s "$work/report.html") >> 10))

best() { awk -v n="$1" '$1 == n' "$work/runs" | sort -k2,2n | head -1; }
first() { awk -v n="$1" '$1 == n' "$work/runs" | head -1; }
read -r _ pass_wall _ pass_cpu <<<"$(best pass)"
read -r _ json_wall json_rss json_cpu <<<"$(best json)"
read -r _ html_wall html_rss html_cpu <<<"$(best html)"
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }

echo "$hosts hosts × 8 GPUs × $days days at 60 s, $from to $to; $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "families: $families"
echo "$made"
echo "TSDB: $blocks blocks, $data_mib MiB"
echo "series in the store: $series; utilization samples counted by the pass: $samples, as recorded ($hosts × 8 × $days × 1440 = $((hosts * 8 * days * 1440)) less the steps a GPU was off the bus)"
echo "report's GPUs: $gpus; HTML: $html_kib KiB"
echo "pass: best ${pass_wall}s, first (cold) $(first pass | cut -d' ' -f2)s; Prometheus CPU ${pass_cpu}s"
echo "report --format json: best ${json_wall}s, max RSS $((json_rss / 1024)) MiB, first $(first json | cut -d' ' -f2)s; Prometheus CPU ${json_cpu}s"
echo "report --format html: best ${html_wall}s, max RSS $((html_rss / 1024)) MiB, first $(first html | cut -d' ' -f2)s; Prometheus CPU ${html_cpu}s"
echo "Prometheus RSS after the runs: $(prom_rss_mib) MiB"
echo
echo "| | wall (s) | vs the pass | max RSS (MiB) | Prometheus CPU (s) |"
echo "|---|---:|---:|---:|---:|"
echo "| pass: \`sum(count_over_time(gpu_utilization_ratio[${days}d]))\` | $pass_wall | 1.00 | | $pass_cpu |"
echo "| \`report --format json\` | $json_wall | $(ratio "$json_wall" "$pass_wall") | $((json_rss / 1024)) | $json_cpu |"
echo "| \`report --format html\` | $html_wall | $(ratio "$html_wall" "$pass_wall") | $((html_rss / 1024)) | $html_cpu |"
echo
echo "the last json run's slowest queries (seconds, series, points, query):"
python3 - "$work/queries.json" <<'PY'
import re, sys
rows = []
for line in open(sys.argv[1], errors="replace"):
    m = re.search(r'query="(.*)" seconds=([0-9.e-]+) series=(\d+) points=(\d+)', line)
    if m:
        rows.append((float(m[2]), m[3], m[4], m[1].replace('\\"', '"')))
print(f"{len(rows)} queries, {sum(r[0] for r in rows):.2f}s in all")
for seconds, series, points, query in sorted(rows, reverse=True)[:8]:
    print(f"{seconds:7.2f} {series:>5} {points:>7} {query}")
PY
echo
echo "all runs (name wall maxrss_kib prometheus_cpu_s):"
cat "$work/runs"
