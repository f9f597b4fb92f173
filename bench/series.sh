#!/usr/bin/env bash
# What the exposition costs the Prometheus it feeds: a real Prometheus scrapes AGENTS
# simulated agents (8 GPUs each, the simulator's default) for RUN seconds, with and without
# dcgm_compat, for the binary under test and, when BEFORE is set, an older one in the same
# session. Prints, per run: the store's head series (its own self-scrape left out), series
# per host and per GPU, Prometheus' resident memory, the bytes of one scrape (plain and
# gzip), and the same extrapolated to 1,000 hosts.
#
#   BIN=target/release/gpu-sentinel BEFORE=/tmp/gs-old AGENTS=32 RUN=180 bench/series.sh
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${BIN:-target/release/gpu-sentinel}
BEFORE=${BEFORE:-}
AGENTS=${AGENTS:-32}
RUN=${RUN:-180}
INTERVAL=${INTERVAL:-5s}
BASE_PORT=${BASE_PORT:-19500}
PROM_PORT=${PROM_PORT:-19490}
HOSTS=1000

command -v prometheus >/dev/null || { echo "needs prometheus (apt-get install prometheus)" >&2; exit 1; }
[ -x "$BIN" ] || { echo "no binary at $BIN (cargo build --release)" >&2; exit 1; }

work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

query() { # instant query → first value
  curl -sf "http://127.0.0.1:$PROM_PORT/api/v1/query" --data-urlencode "query=$1" |
    python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else "nan")'
}

one_run() { # label binary dcgm_compat
  local label=$1 bin=$2 dcgm=$3
  local dir="$work/$label-$dcgm"
  mkdir -p "$dir/data"
  printf '[export]\ndcgm_compat = %s\n' "$dcgm" >"$dir/config.toml"
  local targets=""
  for i in $(seq 0 $((AGENTS - 1))); do
    local port=$((BASE_PORT + i))
    "$bin" run --simulate --config "$dir/config.toml" --listen "127.0.0.1:$port" \
      >/dev/null 2>"$dir/agent-$i.log" &
    pids+=($!)
    targets+="'127.0.0.1:$port',"
  done
  cat >"$dir/prometheus.yml" <<EOF
global:
  scrape_interval: $INTERVAL
scrape_configs:
  - job_name: gpu
    static_configs:
      - targets: [${targets%,}]
  - job_name: prometheus
    static_configs:
      - targets: ['127.0.0.1:$PROM_PORT']
EOF
  # Let the agents serve their first collection before the first scrape.
  sleep 3
  prometheus --config.file="$dir/prometheus.yml" --storage.tsdb.path="$dir/data" \
    --web.listen-address="127.0.0.1:$PROM_PORT" >"$dir/prometheus.log" 2>&1 &
  local prom=$!
  pids+=($prom)
  sleep "$RUN"
  local head self rss plain gzip
  head=$(query 'prometheus_tsdb_head_series')
  self=$(query 'count({job="prometheus"})')
  rss=$(awk '/VmRSS/ {print $2 * 1024}' "/proc/$prom/status")
  plain=$(curl -sf "http://127.0.0.1:$BASE_PORT/metrics" | wc -c)
  gzip=$(curl -sf -H 'Accept-Encoding: gzip' "http://127.0.0.1:$BASE_PORT/metrics" | wc -c)
  python3 - "$label" "$dcgm" "$head" "$self" "$rss" "$plain" "$gzip" "$AGENTS" "$HOSTS" <<'EOF'
import sys
label, dcgm, head, self_, rss, plain, gz, agents, hosts = sys.argv[1:]
head, self_, rss, plain, gz = float(head), float(self_), float(rss), float(plain), float(gz)
agents, hosts = int(agents), int(hosts)
gpu_series = head - self_
per_host = gpu_series / agents
print(f"{label:7} dcgm_compat={dcgm:5}  head series {head:8.0f} (self {self_:.0f})  "
      f"per host {per_host:7.1f}  per GPU {per_host / 8:6.1f}  prometheus RSS {rss / 2**20:7.1f} MiB  "
      f"scrape {plain / 1024:6.1f} KiB plain, {gz / 1024:5.1f} KiB gzip  "
      f"→ {hosts} hosts: {per_host * hosts / 1e6:5.2f} M series, "
      f"{rss / max(head, 1) * per_host * hosts / 2**30:5.1f} GiB at this RSS per series, "
      f"{gz * hosts / 2**20:6.1f} MiB gzip per scrape round")
EOF
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  pids=()
}

echo "$AGENTS agents x 8 simulated GPUs, scraped every $INTERVAL for ${RUN}s by $(prometheus --version 2>&1 | head -1)"
for dcgm in false true; do
  [ -n "$BEFORE" ] && one_run before "$BEFORE" "$dcgm"
  one_run after "$BIN" "$dcgm"
done
