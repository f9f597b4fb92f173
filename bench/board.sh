#!/usr/bin/env bash
# Serving the board (`/`) against serving `/metrics`, from one running agent: both answers
# are bytes rendered once per collection, so a page load should cost what a scrape costs.
# wrk runs the same load on each (keep-alive, 2 threads, 32 connections, same duration),
# `/` first, then `/metrics`, then both again in the other order, so neither gets the
# quieter half of the run; the table shows each path's better run. wrk shares the machine
# with the agent.
#
# usage: bench/board.sh [seconds per run, default 20] [GPUs, default 8]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-20}
gpus=${2:-8}
for tool in wrk curl; do
  command -v "$tool" >/dev/null || { echo "missing $tool (apt-get install wrk curl)" >&2; exit 1; }
done
cargo build --release --quiet --package gpu-sentinel
work=$(mktemp -d)
agent=""
cleanup() { [ -n "$agent" ] && kill "$agent" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

port=18404
target/release/gpu-sentinel run --simulate --sim-gpus "$gpus" --listen 127.0.0.1:$port 2>"$work/agent.log" &
agent=$!
for _ in $(seq 100); do curl -sf -o /dev/null http://127.0.0.1:$port/readyz && break; sleep 0.1; done
sleep 6  # a few collections, so the render stage below is a steady one
board_bytes=$(curl -sf http://127.0.0.1:$port/ | wc -c)
metrics_bytes=$(curl -sf http://127.0.0.1:$port/metrics | wc -c)

measure() { # path -> "req/s p99_ms"
  local out rps p99
  out=$(wrk -t2 -c32 -d"${secs}s" --latency "http://127.0.0.1:$port$1")
  rps=$(awk '/^Requests\/sec/ {print $2}' <<<"$out")
  p99=$(awk '$1=="99%" {v=$2; if (v ~ /us$/) {sub(/us/,"",v); v/=1000} else if (v ~ /ms$/) {sub(/ms/,"",v)} else if (v ~ /s$/) {sub(/s/,"",v); v*=1000}; print v}' <<<"$out")
  echo "$rps $p99"
}
best() { # "rps p99" "rps p99" -> the one with more req/s
  awk -v a="$1" -v b="$2" 'BEGIN { split(a, x, " "); split(b, y, " "); print (x[1] >= y[1] ? a : b) }'
}
b1=$(measure /); m1=$(measure /metrics)
m2=$(measure /metrics); b2=$(measure /)
# The collection's render stage: exposition, /api/v1 documents and the board, once per tick.
render_ms=$(curl -sf http://127.0.0.1:$port/metrics |
  awk '/^gpu_sentinel_collect_duration_seconds\{stage="render"\}/ {printf "%.3f", $2 * 1000}')
read -r b_rps b_p99 <<<"$(best "$b1" "$b2")"
read -r m_rps m_p99 <<<"$(best "$m1" "$m2")"
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
echo "board: $board_bytes bytes, exposition: $metrics_bytes bytes, $gpus simulated GPUs;" \
  "wrk -t2 -c32 -d${secs}s, each path twice (/ first, then /metrics first); $(nproc) cores"
echo "runs (req/s p99 ms): / $b1 | $b2; /metrics $m1 | $m2"
echo "render stage of the last collection (exposition, documents, board): ${render_ms} ms"
echo
echo "| path | bytes | requests/s | p99 latency (ms) | requests/s vs /metrics |"
echo "|---|---:|---:|---:|---:|"
echo "| / (board) | $board_bytes | $b_rps | $b_p99 | $(ratio "$b_rps" "$m_rps") |"
echo "| /metrics | $metrics_bytes | $m_rps | $m_p99 | 1.00 |"
