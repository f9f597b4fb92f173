#!/usr/bin/env bash
# The fleet report against one pass of the store over the same samples.
#
#   bench/report.sh [HOSTS] [DAYS] [RUNS]     # default: 64 hosts (8 GPUs each), 7 days, best of 3
#   DIALECT=dcgm bench/report.sh …            # dcgm-exporter's metrics instead of gpu-sentinel's
#   RULES=1 bench/report.sh …                 # with the hourly recording rules' records over the
#                                             # whole history (promtool create-blocks-from rules)
#   INTERVAL=5m bench/report.sh …             # the recording's scrape interval (default 60s)
#   MAX_SAMPLES=3000000 bench/report.sh …     # Prometheus --query.max-samples (default: its own)
#   VICTORIA=1 bench/report.sh …              # also the report against VictoriaMetrics (default
#                                             # flags), the history loaded through its import API
#   TRUTH=1 bench/report.sh …                 # check teams' held and idle GPU-hours (within 2%) and
#                                             # the night-idle hosts against the recording
#   TILE_DAYS=1 bench/report.sh 256 7 …       # record 1 day and repeat it, shifted a day at a
#                                             # time, to fill the 7 (bench/tile_history.sh): a
#                                             # week at 256 hosts is ~95 min of `record` here;
#                                             # with BENCH_BLOCKS, the recorded day is kept
#                                             # (DIR.tile.om) and reused
#   BENCH_BLOCKS=DIR bench/report.sh …        # keep the TSDB blocks (and the history, with VICTORIA
#                                             # or TRUTH) in DIR, or reuse them from there
#   BENCH_BEFORE=BINARY bench/report.sh …     # also time another gpu-sentinel in the same runs
#                                             # (json), and compare the two json reports' figures
#   BIN=BINARY bench/report.sh …              # time this build instead of building target/release
#
# `record --format openmetrics` writes the simulated fleet's history at INTERVAL, restricted to
# the families the report reads; promtool turns it into TSDB blocks (54 h at most, as a
# Prometheus holding a week has compacted them; the server keeps them as they are); the
# Debian `prometheus` serves them. Then, in the same run and against the same server,
# alternating:
#   pass:   sum(count_over_time(FAMILY[DAYSd])) for each family the report reads, instant
#           queries at the last recorded sample one after the other (curl) — the store
#           reading every raw sample the report could read once, answering a number each:
#           "one pass over the data";
#   report: gpu-sentinel report over the same DAYS days, --format json and --format html
#           (/usr/bin/time: wall and max RSS; the queries it sent from its `store` key);
#   before: the same with BENCH_BEFORE's binary, when given.
# The best run of each counts; the first (cold) run is printed too.
set -euo pipefail
cd "$(dirname "$0")/.."
hosts=${1:-64}
days=${2:-7}
runs=${3:-3}
dialect=${DIALECT:-native}
interval=${INTERVAL:-60s}
for tool in prometheus promtool curl python3 /usr/bin/time; do
  command -v "$tool" >/dev/null || {
    echo "missing $tool (apt-get install prometheus curl python3 time)" >&2
    exit 1
  }
done
if [ "${VICTORIA:-0}" = 1 ]; then
  command -v victoria-metrics >/dev/null || { echo "missing victoria-metrics (apt-get install victoria-metrics)" >&2; exit 1; }
fi
if [ -z "${BIN:-}" ]; then
  CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-1} cargo build --release --locked --quiet --bin gpu-sentinel
fi
interval_s=$(python3 -c 'import re, sys; m = re.fullmatch(r"(\d+)(s|m)", sys.argv[1]); print(int(m[1]) * (60 if m[2] == "m" else 1))' "$interval")

work=$(mktemp -d)
prom=""
vm=""
stop() {
  if [ -n "$1" ]; then
    kill "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
  fi
}
cleanup() {
  stop "$prom"
  stop "$vm"
  rm -rf "$work"
}
trap cleanup EXIT
# A copy, so a rebuild during the run does not change what is measured.
cp "${BIN:-target/release/gpu-sentinel}" "$work/gpu-sentinel"
bin=$work/gpu-sentinel
before_bin=""
if [ -n "${BENCH_BEFORE:-}" ]; then
  [ -x "$BENCH_BEFORE" ] || { echo "BENCH_BEFORE=$BENCH_BEFORE is not an executable" >&2; exit 1; }
  cp "$BENCH_BEFORE" "$work/gpu-sentinel-before"
  before_bin=$work/gpu-sentinel-before
fi
data=${BENCH_BLOCKS:-$work/data}
history=$data.om

# What the report reads (crates/fleet/src/dialect.rs, figures.rs), and the teams it is configured
# with (bench/report_truth.py counts them the same way).
if [ "$dialect" = dcgm ]; then
  pass_families="DCGM_FI_DEV_FB_USED DCGM_FI_DEV_GPU_UTIL DCGM_FI_DEV_POWER_USAGE"
  printf '[export]\ndcgm_compat = true\n' >"$work/config.toml"
  research_hosts='hosts = ["sim-node-02"]'
else
  pass_families="gpu_utilization_ratio gpu_owner_seconds_total gpu_power_watts gpu_failure_risk_score gpu_failure_risk_contribution"
  research_hosts=""
fi
printf '[[teams]]\nname = "research"\nnamespaces = ["ml-*"]\n%s\n[[teams]]\nname = "serving"\nnamespaces = ["inference"]\n' \
  "$research_hosts" >>"$work/config.toml"
# The idle line the report judges night-idle hosts by: [capacity] idle_utilization's default.
idle_line=0.2
names="(${pass_families// /|})"
families="^${names}\$"
keep_history=0
[ "${VICTORIA:-0}" = 1 ] || [ "${TRUTH:-0}" = 1 ] && keep_history=1

# 1. The history, and the blocks.
if [ -n "$(find "$data" -mindepth 2 -maxdepth 2 -name meta.json 2>/dev/null)" ]; then
  made="blocks reused from $data"
else
  recorded_days=${TILE_DAYS:-$days}
  [ $((days % recorded_days)) = 0 ] || { echo "TILE_DAYS=$recorded_days does not divide $days days" >&2; exit 1; }
  [ "$recorded_days" = "$days" ] || [ "${TRUTH:-0}" = 0 ] || {
    # report_truth.py reads the history it is given, not the tiles.
    echo "TRUTH=1 and TILE_DAYS do not go together" >&2
    exit 1
  }
  [ "$recorded_days" = "$days" ] || [ "${VICTORIA:-0}" = 0 ] || {
    # VictoriaMetrics imports the history whole; the tiles are made a block at a time.
    echo "VICTORIA=1 and TILE_DAYS do not go together" >&2
    exit 1
  }
  recording=$history
  [ "$recorded_days" = "$days" ] || recording=$data.tile.om
  record_wall=0 record_rss=0
  if [ ! -s "$recording" ]; then
    /usr/bin/time -f "%e %M" -o "$work/record.time" "$bin" record --simulate --config "$work/config.toml" \
      --simulated-duration "${recorded_days}d" --interval "$interval" --format openmetrics --hosts "$hosts" \
      --families "$families" --out "$recording" 2>"$work/record.log"
    read -r record_wall record_rss <"$work/record.time"
  fi
  mkdir -p "$data"
  blocks_began=$(date +%s.%N)
  if [ "$recording" = "$history" ]; then
    # Ground truth for the pass: the recording's samples of those families.
    grep -cE "^${names}\{" "$history" >"$data.samples"
    om_mib=$(($(stat -c %s "$history") >> 20))
    /usr/bin/time -f "%e %M" -o "$work/blocks.time" promtool tsdb create-blocks-from openmetrics \
      -q --max-block-duration=54h "$history" "$data" >/dev/null
    read -r _ blocks_rss <"$work/blocks.time"
  else
    # The tiles one block's span at a time (promtool aligns its blocks to multiples of
    # the block duration), so blocks from separate runs never overlap.
    block=$((54 * 3600))
    first=$(awk '!/^#/ { print int($NF); exit }' "$recording")
    last=$(($(tail -2 "$recording" | awk '!/^#/ { print int($NF) }') + (days / recorded_days - 1) * recorded_days * 86400))
    : >"$data.samples.parts"
    om_mib=0 blocks_rss=0
    for ((at = first / block * block; at <= last; at += block)); do
      bench/tile_history.sh "$recording" $((days / recorded_days)) $((recorded_days * 86400)) "$history" "$at" $((at + block))
      grep -cE "^${names}\{" "$history" >>"$data.samples.parts" || true
      om_mib=$((om_mib + ($(stat -c %s "$history") >> 20)))
      /usr/bin/time -f "%e %M" -o "$work/blocks.time" promtool tsdb create-blocks-from openmetrics \
        -q --max-block-duration=54h "$history" "$data" >/dev/null
      read -r _ rss <"$work/blocks.time"
      [ "$rss" -gt "$blocks_rss" ] && blocks_rss=$rss
      rm "$history"
    done
    awk '{ s += $1 } END { print s }' "$data.samples.parts" >"$data.samples"
    rm "$data.samples.parts"
  fi
  blocks_wall=$(awk -v a="$blocks_began" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", b - a }')
  if [ "${TRUTH:-0}" = 1 ]; then
    python3 bench/report_truth.py "$history" "$dialect" "$interval_s" "$hosts" >"$data.truth.json"
  fi
  [ "$keep_history" = 1 ] || rm -f "$history"
  [ "$recording" = "$history" ] || [ -n "${BENCH_BLOCKS:-}" ] || rm "$recording"
  made="record (${recorded_days} d): ${record_wall}s wall, max RSS $((record_rss / 1024)) MiB; ${om_mib} MiB of OpenMetrics
promtool tsdb create-blocks-from openmetrics: ${blocks_wall}s wall, max RSS $((blocks_rss / 1024)) MiB"
fi
# The last recorded sample: the newest raw block's maxTime (exclusive, in milliseconds).
end_ms=$(python3 -c '
import glob, json, sys
print(max(json.load(open(m))["maxTime"] for m in glob.glob(sys.argv[1] + "/*/meta.json")
          if json.load(open(m))["stats"]["numSeries"] > 0) - 1)
' "$data")
end=$(python3 -c 'import sys; print(int(sys.argv[1]) // 1000)' "$end_ms")
iso() { python3 -c 'import datetime, sys; print(datetime.datetime.fromtimestamp(int(sys.argv[1]), datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))' "$1"; }
to=$(iso "$end")
from=$(iso $((end - days * 86400)))

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
port=$(free_port)
url=http://127.0.0.1:$port
printf 'global:\n  scrape_interval: %s\n  evaluation_interval: %s\n' "$interval" "$interval" >"$work/prometheus.yml"
start_prometheus() {
  local blocks
  blocks=$(find "$data" -mindepth 2 -maxdepth 2 -name meta.json | wc -l)
  prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$data" \
    --storage.tsdb.retention.time=100y --storage.tsdb.max-block-duration=54h \
    --web.listen-address="127.0.0.1:$port" "$@" 2>"$work/prometheus.log" &
  prom=$!
  for _ in $(seq 1200); do
    loaded=$(curl -sf "$url/metrics" | awk '$1 == "prometheus_tsdb_blocks_loaded" { print $2 }') || true
    if curl -sf -o /dev/null "$url/-/ready" && [ "${loaded:-0}" = "$blocks" ]; then return; fi
    sleep 0.5
  done
  echo "prometheus did not load $blocks blocks" >&2
  tail "$work/prometheus.log" >&2
  exit 1
}

prom_cpu() { awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f", ($14 + $15) / hz }' "/proc/$1/stat"; }

# 2. The hourly rules' records over the whole history, evaluated by a Prometheus on the raw
# blocks (unlimited) and written as blocks beside them.
rules_made=""
if [ "${RULES:-0}" = 1 ] && [ ! -f "$data.rules" ]; then
  start_prometheus
  awk 'BEGIN { print "groups:" } /^  - name: gpu-sentinel-fleet-hourly/ { on = 1 } on' \
    alerts/gpu-sentinel-fleet.rules.yml >"$work/hourly.rules.yml"
  first=$(python3 -c '
import glob, json, sys
print(min(json.load(open(m))["minTime"] for m in glob.glob(sys.argv[1] + "/*/meta.json")) // 1000)
' "$data")
  # From the first whole hour of the history, whose record covers the hour the history
  # starts in, as a store whose rules were loaded before it would hold them (the report
  # reads that hour's part in the period raw). On the hour: promtool 2.42, started inside
  # an hour, evaluated the hourly group and wrote no block at all (tests/it/fleet_limits.rs
  # says more).
  /usr/bin/time -f "%e %M" -o "$work/rules.time" promtool tsdb create-blocks-from rules \
    --start=$(((first + 3599) / 3600 * 3600)) --end="$end" --url="$url" --output-dir="$work/rules" \
    "$work/hourly.rules.yml" >"$work/rules.log" 2>&1 || { cat "$work/rules.log" >&2; exit 1; }
  stop "$prom"
  prom=""
  mv "$work"/rules/*/ "$data"/
  read -r rules_wall rules_rss <"$work/rules.time"
  # promtool writes the records as blocks of an hour or two each, a few hundred for a week
  # beside the raw ones; a Prometheus that evaluated the rules would have compacted them
  # with its own. This one compacts them about a minute after it starts: let it, before
  # anything is measured (the blocks loaded unchanged for 150 s and its CPU idle).
  start_prometheus
  settled=0 loaded_before="" cpu_before=$(prom_cpu "$prom")
  for _ in $(seq 360); do
    sleep 10
    loaded=$(curl -sf "$url/metrics" | awk '$1 == "prometheus_tsdb_blocks_loaded" { print $2 }') || true
    cpu=$(prom_cpu "$prom")
    if [ -n "$loaded" ] && [ "$loaded" = "$loaded_before" ] &&
      awk -v a="$cpu_before" -v b="$cpu" 'BEGIN { exit !(b - a < 0.5) }'; then
      settled=$((settled + 10))
      [ "$settled" -ge 150 ] && break
    else
      settled=0
    fi
    loaded_before=$loaded cpu_before=$cpu
  done
  [ "$settled" -ge 150 ] || echo "note: Prometheus was still compacting the blocks after an hour; measuring anyway" >&2
  stop "$prom"
  prom=""
  echo "promtool tsdb create-blocks-from rules: ${rules_wall}s wall, max RSS $((rules_rss / 1024)) MiB" >"$data.rules"
fi
[ -f "$data.rules" ] && rules_made=$(cat "$data.rules")
blocks=$(find "$data" -mindepth 2 -maxdepth 2 -name meta.json | wc -l)
data_mib=$(du -sm "$data" | cut -f1)

# 3. Prometheus on the blocks.
limit_flags=()
[ -n "${MAX_SAMPLES:-}" ] && limit_flags=(--query.max-samples="$MAX_SAMPLES")
start_prometheus "${limit_flags[@]}"

rss_mib() { awk '/^VmRSS/ { print int($2 / 1024) }' "/proc/$1/status"; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }

# Each run appends "name wall maxrss_kib store_cpu_s queries refused" to $work/runs.
pass() {
  local base=$1 pid=$2 name=$3 before after wall=0 count=0 one family refused=0
  before=$(prom_cpu "$pid")
  # A query a family: a store with a scaled --query.max-samples may refuse them all at once.
  for family in $pass_families; do
    if one=$(curl -sf -o "$work/$name.json" -w '%{time_total}' "$base/api/v1/query" \
      --data-urlencode "query=sum(count_over_time(${family}[${days}d]))" \
      --data-urlencode "time=$end"); then
      wall=$(awk -v a="$wall" -v b="$one" 'BEGIN { print a + b }')
      count=$(python3 -c 'import json, sys; r = json.load(open(sys.argv[1]))["data"]["result"]; print(int(sys.argv[2]) + (int(float(r[0]["value"][1])) if r else 0))' "$work/$name.json" "$count")
    else
      refused=1
    fi
  done
  after=$(prom_cpu "$pid")
  echo "$count" >"$work/$name.count"
  [ "$refused" = 1 ] && wall=refused
  echo "$name $wall 0 $(elapsed "$before" "$after") $(wc -w <<<"$pass_families") $refused" >>"$work/runs"
}
# report BASE PID NAME FORMAT [before]
report() {
  local base=$1 pid=$2 name=$3 format=$4 binary=$bin before after queries refused
  [ "${5:-}" = before ] && binary=$before_bin
  before=$(prom_cpu "$pid")
  # At debug, the client logs each query with its duration (crates/fleet/src/prom.rs).
  RUST_LOG=gpu_sentinel_fleet=debug /usr/bin/time -f "%e %M" -o "$work/time" \
    "$binary" report --prometheus "$base" --from "$from" --to "$to" --format "$format" \
    --config "$work/config.toml" --out "$work/$name.$format" 2>"$work/report.log" || {
    tail -20 "$work/report.log" >&2
    exit 1
  }
  after=$(prom_cpu "$pid")
  queries=$(grep -c 'store answered' "$work/report.log" || true)
  refused=$(grep -c 'asking for it in two halves' "$work/report.log" || true)
  echo "$name $(cat "$work/time") $(elapsed "$before" "$after") $queries $refused" >>"$work/runs"
  cp "$work/report.log" "$work/queries.$name"
}
# What the report asked before it planned by the store's limits (dcgm-exporter's held time,
# the whole period in one subquery at a minute): the store's answer to it.
old_answer=""
if [ "$dialect" = dcgm ]; then
  old_answer=$(curl -s -o "$work/old.json" -w '%{http_code}' "$url/api/v1/query" \
    --data-urlencode "query=sum by (Hostname, gpu, namespace) (count_over_time(((DCGM_FI_DEV_FB_USED > 1024 or DCGM_FI_DEV_FB_USED{pod!=\"\"}) unless on(Hostname, gpu) (DCGM_FI_DEV_GPU_UTIL >= 5))[$((days * 86400))s:60s])) * 60" \
    --data-urlencode "time=$end")
  old_answer="HTTP $old_answer: $(head -c 300 "$work/old.json")"
fi
for _ in $(seq "$runs"); do
  pass "$url" "$prom" pass
  report "$url" "$prom" json json
  report "$url" "$prom" html html
  if [ -n "$before_bin" ]; then
    report "$url" "$prom" before-json json before
  fi
done

# 4. VictoriaMetrics at its default flags, the same history (and records) imported.
if [ "${VICTORIA:-0}" = 1 ]; then
  [ -f "$history" ] || { echo "VICTORIA=1 needs the history (record again, or BENCH_BLOCKS kept with VICTORIA=1)" >&2; exit 1; }
  vport=$(free_port)
  vurl=http://127.0.0.1:$vport
  victoria-metrics -storageDataPath="$work/vm" -httpListenAddr="127.0.0.1:$vport" 2>"$work/vm.log" &
  vm=$!
  for _ in $(seq 120); do curl -sf -o /dev/null "$vurl/health" && break; sleep 0.5; done
  import_began=$(date +%s.%N)
  # The OpenMetrics samples as the Prometheus text format has them: timestamps in ms.
  sed -E '/^#/d; s/ ([0-9]+)\.([0-9]{3})$/ \1\2/' "$history" |
    split -C 64M --filter="curl -sf --data-binary @- $vurl/api/v1/import/prometheus" -
  if [ -f "$data.rules" ]; then
    # The records, from the Prometheus that holds them, as VictoriaMetrics's JSON lines.
    curl -sf "$url/api/v1/query" --data-urlencode 'query={__name__=~"instance_gpu.*|Hostname_gpu.*|fleet:.*_hourly_rules:.*"}[400d]' \
      --data-urlencode "time=$end" | python3 -c '
import json, sys
for s in json.load(sys.stdin)["data"]["result"]:
    print(json.dumps({"metric": s["metric"], "values": [float(v) for _, v in s["values"]],
                      "timestamps": [round(t * 1000) for t, _ in s["values"]]}))
' | curl -sf --data-binary @- "$vurl/api/v1/import"
  fi
  curl -sf "$vurl/internal/force_flush" >/dev/null
  sleep 3
  import_wall=$(elapsed "$import_began" "$(date +%s.%N)")
  for _ in $(seq "$runs"); do
    pass "$vurl" "$vm" vm-pass
    report "$vurl" "$vm" vm-json json
  done
fi

# 5. Sanity, and the figures against the recording.
samples=$(cat "$work/pass.count")
gpus=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["fleet"]["gpus"])' "$work/json.json")
expected=$(cat "$data.samples")
[ "$samples" = "$expected" ] || echo "note: the pass counted $samples samples, the recording has $expected (a refused family counts none)"
[ "$gpus" = $((hosts * 8)) ] || { echo "the report saw $gpus GPUs, expected $((hosts * 8))" >&2; exit 1; }
truth_lines=""
if [ -f "$data.truth.json" ]; then
  for doc in json vm-json; do
    [ -f "$work/$doc.json" ] || continue
    truth_lines+=$(python3 - "$data.truth.json" "$work/$doc.json" "$doc" "$idle_line" <<'PY'
import json, sys
truth, doc, name = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3]
worst = 0.0
out = []
for team in doc["teams"]:
    t = truth["teams"].get(team["team"], {"busy": 0.0, "idle": 0.0})
    for key, want in (("gpu_hours", t["busy"] + t["idle"]), ("idle_gpu_hours", t["idle"])):
        got = team[key]
        err = abs(got - want) / want if want else 0.0
        worst = max(worst, err)
        out.append(f"{team['team']} {key} {got:.1f} vs {want:.1f} ({err * 100:+.2f}%)")
night = doc["fleet"]["energy"]["night_idle_hosts"]
if "night_utilization" in truth:
    # Hosts clearly under the idle line at night must be found, those clearly over it not;
    # within 2 points of it (an inference host's trough) either is right: the report's
    # hourly slices start at the period's start, not on the clock hour.
    line = 100.0 * float(sys.argv[4])
    util = truth["night_utilization"]
    must = sorted(h for h, u in util.items() if u < line - 2.0)
    never = sorted(h for h, u in util.items() if u > line + 2.0)
    missed, wrong = [h for h in must if h not in night], [h for h in night if h in never]
    near = [f"{h} {util[h]:.1f}%" for h in night if h not in must]
    verdict = ("as recorded" if not missed and not wrong else f"DIFFER: missed {missed}, wrongly {wrong}")
    verdict += f"; {len(must)} under the line by 2 points all found" if not missed else ""
    verdict += f"; also near the line: {', '.join(near)}" if near else ""
else:
    verdict = "as recorded" if night == truth["night_idle_hosts"] else "DIFFER: " + str(night)
print(f"{name}: worst team error {worst * 100:.2f}% ({'within' if worst <= 0.02 else 'OVER'} 2%); night-idle hosts "
      f"{verdict} ({len(night)}); " + "; ".join(out))
PY
)
    truth_lines+=$'\n'
  done
fi

best() { awk -v n="$1" '$1 == n' "$work/runs" | sort -k2,2n | head -1; }
first() { awk -v n="$1" '$1 == n' "$work/runs" | head -1 | cut -d' ' -f2; }
ratio() { case "$2" in refused) echo "n/a" ;; *) awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }' ;; esac; }
read -r _ pass_wall _ pass_cpu _ _ <<<"$(best pass)"

echo "$hosts hosts × 8 GPUs × $days days at $interval, $dialect metrics$([ "${RULES:-0}" = 1 ] && echo ', hourly rules recorded'), $from to $to"
echo "$(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); commit $(git rev-parse --short HEAD); $(date -u +%Y-%m-%dT%H:%MZ)"
echo "Prometheus --query.max-samples: ${MAX_SAMPLES:-default (50000000)}"
[ -n "$old_answer" ] && echo "the unsplit held-time query the report sent before: $old_answer"
echo "$made"
[ -n "$rules_made" ] && echo "$rules_made"
echo "TSDB: $blocks blocks, $data_mib MiB; raw samples counted by the pass: $samples (the recording has $expected)"
[ -n "${import_wall:-}" ] && echo "VictoriaMetrics import (OpenMetrics as text format, records as JSON lines): ${import_wall}s"
printf '%s' "$truth_lines"
echo
echo "| store | run | wall (s) | vs the pass | first (s) | max RSS (MiB) | store CPU (s) | queries | refused | read |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---|"
row() {
  local store=$1 name=$2 pass=$3 read
  read -r _ wall rss cpu queries refused <<<"$(best "$name")"
  read=$(python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); s = d.get("store", {}); print("%s (%s h recorded)" % (s.get("read", "?"), s.get("recorded_hours", 0)))' "$work/$name.json" 2>/dev/null || echo "-")
  echo "| $store | $name | $wall | $(ratio "$wall" "$pass") | $(first "$name") | $((rss / 1024)) | $cpu | $queries | $refused | $read |"
}
echo "| Prometheus | pass | $pass_wall | 1.00 | $(first pass) | | $pass_cpu | $(wc -w <<<"$pass_families") | | |"
row Prometheus json "$pass_wall"
row Prometheus html "$pass_wall"
[ -n "$before_bin" ] && row Prometheus before-json "$pass_wall"
if [ "${VICTORIA:-0}" = 1 ]; then
  read -r _ vpass_wall _ vpass_cpu _ _ <<<"$(best vm-pass)"
  echo "| VictoriaMetrics | pass | $vpass_wall | 1.00 | $(first vm-pass) | | $vpass_cpu | $(wc -w <<<"$pass_families") | | |"
  row VictoriaMetrics vm-json "$vpass_wall"
fi
echo
echo "the last json run's slowest queries (seconds, series, points, query; up to 4 overlap):"
python3 - "$work/queries.json" <<'PY'
import re, sys
rows = []
for line in open(sys.argv[1], errors="replace"):
    m = re.search(r'query="(.*)" seconds=([0-9.e-]+) series=(\d+) points=(\d+)', line)
    if m:
        rows.append((float(m[2]), m[3], m[4], m[1].replace('\\"', '"')))
print(f"{len(rows)} queries, {sum(r[0] for r in rows):.2f}s in all")
for seconds, series, points, query in sorted(rows, reverse=True)[:6]:
    print(f"{seconds:7.2f} {series:>5} {points:>7} {query[:220]}")
PY
if [ -n "$before_bin" ]; then
  echo
  # Every figure of the last two json reports, all but the `store` key (what was read, how).
  python3 - "$work/json.json" "$work/before-json.json" <<'PY'
import json, sys
def flat(v, path=""):
    if isinstance(v, dict):
        for k, x in v.items():
            if not (path == "" and k in ("store", "generated_at")):
                yield from flat(x, f"{path}.{k}")
    elif isinstance(v, list):
        for i, x in enumerate(v):
            yield from flat(x, f"{path}[{i}]")
    else:
        yield path, v
a, b = (dict(flat(json.load(open(f)))) for f in sys.argv[1:])
differ = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
print(f"the json report against before-json: {len(a)} figures, {len(differ)} differ"
      + "".join(f"\n  {k}: {a.get(k)} vs {b.get(k)}" for k in differ[:10]))
PY
fi
echo
echo "all runs (name wall maxrss_kib store_cpu_s queries refused):"
cat "$work/runs"
