#!/usr/bin/env bash
# The fleet report against one pass of Prometheus over the same samples.
#
#   bench/report.sh [HOSTS] [DAYS] [RUNS]     # default: 64 hosts (8 GPUs each), 7 days, best of 3
#   BENCH_BLOCKS=DIR bench/report.sh …        # keep the TSDB blocks in DIR, or reuse them from
#                                             # there (recording 64 hosts takes a while)
#   BENCH_BEFORE=BINARY bench/report.sh …     # also time another gpu-sentinel (an older build)
#                                             # in the same runs, and compare its figures
#
# `record --format openmetrics` writes the simulated fleet's history at 60 s, restricted to
# the families the report reads; promtool turns it into TSDB blocks; the Debian
# `prometheus` serves them. Then, in the same run and against the same server, alternating:
#   pass:   sum(count_over_time(gpu_utilization_ratio[DAYSd])) as an instant query at the
#           last recorded sample — Prometheus reading every utilization sample once (curl);
#   report: gpu-sentinel report over the same DAYS days, --format json and --format html
#           (/usr/bin/time: wall and max RSS);
#   before: the same with BENCH_BEFORE's binary, when given.
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
before_bin=""
if [ -n "${BENCH_BEFORE:-}" ]; then
  [ -x "$BENCH_BEFORE" ] || { echo "BENCH_BEFORE=$BENCH_BEFORE is not an executable" >&2; exit 1; }
  cp "$BENCH_BEFORE" "$work/gpu-sentinel-before"
  before_bin=$work/gpu-sentinel-before
fi
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
# report FORMAT [before]: the binary under test, or BENCH_BEFORE's.
report() {
  local format=$1 name=$1 binary=$bin before after
  if [ "${2:-}" = before ]; then
    name=before-$format
    binary=$before_bin
  fi
  before=$(prom_cpu)
  # At debug, the client logs each query with its duration (src/fleet/prom.rs).
  RUST_LOG=gpu_sentinel::fleet::prom=debug /usr/bin/time -f "%e %M" -o "$work/time" \
    "$binary" report --prometheus "$url" --from "$from" --to "$to" --format "$format" \
    --out "$work/$name.$format" 2>"$work/report.log" || {
    cat "$work/report.log" >&2
    exit 1
  }
  after=$(prom_cpu)
  echo "$name $(cat "$work/time") $(elapsed "$before" "$after")" >>"$work/runs"
  cp "$work/report.log" "$work/queries.$name"
}
for _ in $(seq "$runs"); do
  pass
  report json
  report html
  if [ -n "$before_bin" ]; then
    report json before
    report html before
  fi
done

# 4. Sanity: the pass counted every sample; the report saw every GPU.
samples=$(python3 -c 'import json, sys; print(int(float(json.load(open(sys.argv[1]))["data"]["result"][0]["value"][1])))' "$work/pass.json")
gpus=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["fleet"]["gpus"])' "$work/json.json")
expected=$(cat "$data.samples")
[ "$samples" = "$expected" ] || { echo "the pass counted $samples samples, the recording has $expected" >&2; exit 1; }
[ "$gpus" = $((hosts * 8)) ] || { echo "the report saw $gpus GPUs, expected $((hosts * 8))" >&2; exit 1; }
series=$(curl -sf "$url/api/v1/query" --data-urlencode "query=count({__name__=~\".+\"})" \
  --data-urlencode "time=$end" | python3 -c 'import json, sys; print(json.load(sys.stdin)["data"]["result"][0]["value"][1])')
html_kib=$(($(stat -c %s "$work/html.html") >> 10))

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
if [ -n "$before_bin" ]; then
  read -r _ bjson_wall bjson_rss bjson_cpu <<<"$(best before-json)"
  read -r _ bhtml_wall bhtml_rss bhtml_cpu <<<"$(best before-html)"
  echo "before, --format json: best ${bjson_wall}s, max RSS $((bjson_rss / 1024)) MiB, first $(first before-json | cut -d' ' -f2)s; Prometheus CPU ${bjson_cpu}s"
  echo "before, --format html: best ${bhtml_wall}s, max RSS $((bhtml_rss / 1024)) MiB, first $(first before-html | cut -d' ' -f2)s; Prometheus CPU ${bhtml_cpu}s"
fi
echo "Prometheus RSS after the runs: $(prom_rss_mib) MiB"
echo
echo "| | wall (s) | vs the pass | max RSS (MiB) | Prometheus CPU (s) |"
echo "|---|---:|---:|---:|---:|"
echo "| pass: \`sum(count_over_time(gpu_utilization_ratio[${days}d]))\` | $pass_wall | 1.00 | | $pass_cpu |"
echo "| \`report --format json\` | $json_wall | $(ratio "$json_wall" "$pass_wall") | $((json_rss / 1024)) | $json_cpu |"
echo "| \`report --format html\` | $html_wall | $(ratio "$html_wall" "$pass_wall") | $((html_rss / 1024)) | $html_cpu |"
if [ -n "$before_bin" ]; then
  echo "| before: \`report --format json\` | $bjson_wall | $(ratio "$bjson_wall" "$pass_wall") | $((bjson_rss / 1024)) | $bjson_cpu |"
  echo "| before: \`report --format html\` | $bhtml_wall | $(ratio "$bhtml_wall" "$pass_wall") | $((bhtml_rss / 1024)) | $bhtml_cpu |"
  echo
  echo "figures, before → now:"
  python3 - "$work/before-json.json" "$work/json.json" <<'PY'
import json, sys
old, new = (json.load(open(p)) for p in sys.argv[1:3])
def show(name, get):
    try:
        a, b = get(old), get(new)
    except (KeyError, IndexError, TypeError):
        return
    print(f"  {name}: {a} → {b}")
fleet = lambda d: d["fleet"]
show("GPUs", lambda d: fleet(d)["gpus"])
show("utilization", lambda d: round(fleet(d)["utilization"], 4))
show("scale", lambda d: (fleet(d)["scale"]["direction"], fleet(d)["scale"]["gpus"]))
show("capacity: forecast demand, recommended GPUs", lambda d: (round(fleet(d)["capacity"]["forecast_demand_gpus"], 2), fleet(d)["capacity"]["recommended_gpus"]))
show("capacity: last month's GPU-hours", lambda d: round(fleet(d)["capacity"]["monthly_gpu_hours"][-1], 1))
show("tco: owned per GPU-hour", lambda d: round(fleet(d)["tco"]["owned_per_gpu_hour"], 4))
show("night-idle hosts", lambda d: len(fleet(d)["energy"]["night_idle_hosts"]))
show("night kWh", lambda d: round(fleet(d)["energy"]["kwh"], 1))
show("weekend-idle hosts", lambda d: len(fleet(d)["energy"]["weekend_idle_hosts"]))
show("weekend kWh", lambda d: round(fleet(d)["energy"]["weekend_kwh"], 1))
show("top risk", lambda d: (fleet(d)["risk"][0]["host"], fleet(d)["risk"][0]["gpu"]))
show("heatmap cells", lambda d: len(fleet(d)["heatmap"]))
for t_old in old["teams"]:
    name = t_old["team"]
    show(f"team {name}: held, idle GPU-hours, waste", lambda d: next((round(t["gpu_hours"], 1), round(t["idle_gpu_hours"], 1), round(t["waste_cost"], 1)) for t in d["teams"] if t["team"] == name))
PY
fi
echo
for name in json before-json; do
  [ -f "$work/queries.$name" ] || continue
  echo "the last $name run's slowest queries (seconds, series, points, query; up to 4 overlap):"
  python3 - "$work/queries.$name" <<'PY'
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
done
echo
echo "all runs (name wall maxrss_kib prometheus_cpu_s):"
cat "$work/runs"
