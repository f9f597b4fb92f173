#!/usr/bin/env bash
# RSS and CPU of the simulated exporter at a 1 s collection interval, scraped once a
# second like a busy Prometheus would, measured from /proc over a steady window.
#
# usage: [BIN=path/to/gpu-sentinel] bench/resources.sh [window seconds, default 60] [GPUs, default 8]
# Without BIN the release build of this checkout is built and measured.
set -euo pipefail
cd "$(dirname "$0")/.."
window=${1:-60}
gpus=${2:-8}
bin=${BIN:-}
if [ -z "$bin" ]; then
  cargo build --release --quiet --package gpu-sentinel
  bin=target/release/gpu-sentinel
fi
work=$(mktemp -d)
trap 'kill $pid 2>/dev/null || true; rm -rf "$work"' EXIT
port=18411
printf '[collect]\ninterval = "1s"\n' >"$work/config.toml"
"$bin" run --simulate --sim-gpus "$gpus" --config "$work/config.toml" \
  --listen 127.0.0.1:$port 2>"$work/agent.log" &
pid=$!
for _ in $(seq 100); do curl -sf -o /dev/null http://127.0.0.1:$port/readyz && break; sleep 0.1; done
sleep 5 # let allocations settle
ticks=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
c0=$(cpu); t0=$(date +%s.%N)
end=$(( $(date +%s) + window ))
max_rss=0
while [ "$(date +%s)" -lt "$end" ]; do
  curl -sf -o /dev/null http://127.0.0.1:$port/metrics
  rss=$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status")
  [ "$rss" -gt "$max_rss" ] && max_rss=$rss
  sleep 1
done
c1=$(cpu); t1=$(date +%s.%N)
hwm=$(awk '/^VmHWM/ {print $2}' "/proc/$pid/status")
threads=$(awk '/^Threads/ {print $2}' "/proc/$pid/status")
awk -v c="$((c1 - c0))" -v hz="$ticks" -v t0="$t0" -v t1="$t1" -v rss="$max_rss" -v hwm="$hwm" \
    -v gpus="$gpus" -v threads="$threads" -v w="$window" 'BEGIN {
  printf "| GPUs | interval | window | max RSS (MiB) | peak RSS VmHWM (MiB) | CPU (%% of one core) | threads |\n"
  printf "|---:|---:|---:|---:|---:|---:|---:|\n"
  printf "| %d | 1 s | %d s | %.1f | %.1f | %.2f | %d |\n", gpus, w, rss / 1024, hwm / 1024, 100 * c / hz / (t1 - t0), threads
}'
