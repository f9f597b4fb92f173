#!/usr/bin/env bash
# /metrics throughput and latency against two references serving the identical bytes:
#   - prometheus-node-exporter's textfile collector (the nvidia-smi -> textfile setup),
#   - nginx serving the bytes as a static file (the practical ceiling on this machine).
# All three are measured in one run with wrk (2 threads, 32 connections), one after the
# other, so they share the machine's state. Results print as a markdown table.
#
# usage: bench/http.sh [seconds per run, default 20] [GPUs, default 8]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-20}
gpus=${2:-8}
for tool in wrk nginx prometheus-node-exporter; do
  command -v "$tool" >/dev/null || { echo "missing $tool (apt-get install wrk nginx-light prometheus-node-exporter)" >&2; exit 1; }
done
cargo build --release --quiet --package gpu-sentinel
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

ours=18401 node=18402 static=18403
target/release/gpu-sentinel run --simulate --sim-gpus "$gpus" --listen 127.0.0.1:$ours 2>"$work/agent.log" &
pids+=($!)
for _ in $(seq 100); do curl -sf -o /dev/null http://127.0.0.1:$ours/readyz && break; sleep 0.1; done
curl -sf http://127.0.0.1:$ours/metrics -o "$work/metrics.prom"
bytes=$(stat -c %s "$work/metrics.prom")

mkdir -p "$work/textfile" "$work/www"
cp "$work/metrics.prom" "$work/textfile/gpu.prom"
cp "$work/metrics.prom" "$work/www/metrics"
prometheus-node-exporter --collector.disable-defaults --collector.textfile \
  --collector.textfile.directory="$work/textfile" --web.listen-address=127.0.0.1:$node \
  >"$work/node.log" 2>&1 &
pids+=($!)
cat >"$work/nginx.conf" <<CONF
worker_processes auto;
pid $work/nginx.pid;
error_log $work/nginx-error.log;
events { worker_connections 1024; }
http {
  access_log off;
  sendfile on;
  tcp_nopush on;
  keepalive_requests 1000000;
  default_type text/plain;
  client_body_temp_path $work;
  proxy_temp_path $work; fastcgi_temp_path $work; uwsgi_temp_path $work; scgi_temp_path $work;
  server { listen 127.0.0.1:$static; root $work/www; }
}
CONF
nginx -c "$work/nginx.conf" -g 'daemon off;' &
pids+=($!)
for port in $node $static; do
  for _ in $(seq 100); do curl -sf -o /dev/null http://127.0.0.1:$port/metrics && break; sleep 0.1; done
done

measure() { # name port -> "req/s p99_ms"
  local out
  out=$(wrk -t2 -c32 -d"${secs}s" --latency "http://127.0.0.1:$2/metrics")
  local rps p99
  rps=$(awk '/^Requests\/sec/ {print $2}' <<<"$out")
  p99=$(awk '$1=="99%" {v=$2; if (v ~ /us$/) {sub(/us/,"",v); v/=1000} else if (v ~ /ms$/) {sub(/ms/,"",v)} else if (v ~ /s$/) {sub(/s/,"",v); v*=1000}; print v}' <<<"$out")
  echo "$rps $p99"
}
read -r o_rps o_p99 < <(measure ours $ours)
read -r n_rps n_p99 < <(measure node $node)
read -r s_rps s_p99 < <(measure static $static)
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
echo "exposition: $bytes bytes, $gpus simulated GPUs; wrk -t2 -c32 -d${secs}s; $(nproc) cores"
echo
echo "| server | requests/s | p99 latency (ms) | requests/s vs nginx static |"
echo "|---|---:|---:|---:|"
echo "| gpu-sentinel /metrics | $o_rps | $o_p99 | $(ratio "$o_rps" "$s_rps") |"
echo "| node_exporter textfile | $n_rps | $n_p99 | $(ratio "$n_rps" "$s_rps") |"
echo "| nginx static file | $s_rps | $s_p99 | 1.00 |"
