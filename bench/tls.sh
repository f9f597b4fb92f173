#!/usr/bin/env bash
# /metrics throughput over TLS with keep-alive, against nginx serving the identical bytes
# over TLS with the same certificate and key, in the same run: the cost of the agent's
# rustls against OpenSSL's, on the exposition a scrape really gets.
#
# Three rows, one after the other so they share the machine's state, each `wrk -t2 -c32`
# (HTTP/1.1 with keep-alive, OpenSSL on the client side):
#   - gpu-sentinel with a web configuration giving TLS only,
#   - gpu-sentinel with TLS and basic auth (every request carries the credential; the
#     verdict is cached, so this is the cost of checking it, not of bcrypt),
#   - nginx serving a saved copy of that /metrics as a static file over TLS.
# Both servers pick TLS 1.3 with AES-256-GCM (rustls's first choice; nginx is told to
# prefer it), so the same cipher is measured; the script prints what was negotiated. The certificate is an ECDSA P-256 one made here.
#
# usage: bench/tls.sh [seconds per run, default 20] [GPUs, default 8]
#
# bench/tls.sh flood [scrapes, default 40] [BINARY ...]: a Prometheus-like scraper (a fresh
# TLS connection with the right password every 0.5 s, from 127.0.0.1) alone, then beside a
# flood of wrong passwords (100 concurrent TLS connections from 127.0.0.2, a new password
# on each request), each without and with `rate_limit` (1s, burst 20); prints the
# scraper's p50/p99 and how many of its scrapes were not 200, per binary (default
# target/release/gpu-sentinel, built). The user's hash has bcrypt cost 10.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = flood ]; then
  shift
  scrapes=${1:-40}
  shift || true
  binaries=("$@")
  if [ ${#binaries[@]} -eq 0 ]; then
    cargo build --release --quiet --package gpu-sentinel
    binaries=(target/release/gpu-sentinel)
  fi
  for tool in openssl curl python3; do
    command -v "$tool" >/dev/null || { echo "missing $tool" >&2; exit 1; }
  done
  work=$(mktemp -d)
  pids=()
  cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
  trap cleanup EXIT
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$work/server.key" -out "$work/server.crt" -days 30 -subj /CN=localhost \
    -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" 2>/dev/null
  if command -v htpasswd >/dev/null; then
    hash=$(htpasswd -nbBC 10 "" bench-password | tr -d ':\n')
  else
    hash=$(python3 -W ignore -c 'import crypt; print(crypt.crypt("bench-password", crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=1024)))')
  fi
  printf 'tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\nbasic_auth_users:\n  prometheus: %s\n' \
    "$hash" >"$work/auth.yml"
  cp "$work/auth.yml" "$work/limited.yml"
  printf 'rate_limit:\n  interval: 1s\n  burst: 20\n' >>"$work/limited.yml"
  cat >"$work/flood.py" <<'PY'
import asyncio, base64, os, ssl, sys
port, stop = int(sys.argv[1]), sys.argv[2]
ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
counts = {}
async def one(c):
    n = 0
    while not os.path.exists(stop):
        n += 1
        try:
            r, w = await asyncio.open_connection("127.0.0.1", port, ssl=ctx, local_addr=("127.0.0.2", 0))
            token = base64.b64encode(f"prometheus:guess-{c}-{n}".encode()).decode()
            w.write(f"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Basic {token}\r\n\r\n".encode())
            line = await r.readline()
            status = line.split()[1].decode() if len(line.split()) > 1 else "none"
            counts[status] = counts.get(status, 0) + 1
            w.close()
        except Exception:
            counts["error"] = counts.get("error", 0) + 1
            await asyncio.sleep(0.01)
async def main():
    await asyncio.gather(*(one(c) for c in range(100)))
asyncio.run(main())
print(" ".join(f"{k}:{v}" for k, v in sorted(counts.items())))
PY
  port=18421
  scraper() { # -> one "seconds status" line per scrape
    for _ in $(seq "$scrapes"); do
      curl -s -o /dev/null -w '%{time_total} %{http_code}\n' --max-time 15 --cacert "$work/server.crt" \
        --resolve "localhost:$port:127.0.0.1" -u prometheus:bench-password "https://localhost:$port/metrics" || true
      sleep 0.5
    done
  }
  summary() { # file -> "p50_ms p99_ms not_200"
    sort -n "$1" | awk '{t[NR]=$1*1000; if ($2 != 200) bad++} END {
      # nearest rank: with fewer than 100 scrapes p99 is the slowest one
      r50=int(NR*0.50); if (r50 < NR*0.50) r50++; r99=int(NR*0.99); if (r99 < NR*0.99) r99++
      printf "%.1f %.1f %d\n", t[r50], t[r99], bad+0 }'
  }
  echo "scraper: $scrapes scrapes, one every 0.5 s, fresh TLS connection each; flood: 100 connections of wrong passwords from 127.0.0.2; bcrypt cost 10; $(nproc) cores"
  echo
  echo "| binary | rate_limit | scraper p50 / p99 (ms), alone | not 200 | p50 / p99 (ms), flooded | not 200 | flood's answers |"
  echo "|---|---|---:|---:|---:|---:|---|"
  for bin in "${binaries[@]}"; do
    for web in auth limited; do
      "$bin" run --simulate --sim-gpus 8 --listen 127.0.0.1:$port --web.config.file "$work/$web.yml" 2>>"$work/agent.log" &
      agent=$!
      pids+=($agent)
      for _ in $(seq 100); do curl -sf --cacert "$work/server.crt" -o /dev/null --resolve "localhost:$port:127.0.0.1" \
        "https://localhost:$port/readyz" && break; sleep 0.1; done
      sleep 1
      scraper >"$work/alone"
      # The first scrape alone paid its bcrypt; restart so the flooded run starts unverified too.
      kill "$agent"; wait "$agent" 2>/dev/null || true
      "$bin" run --simulate --sim-gpus 8 --listen 127.0.0.1:$port --web.config.file "$work/$web.yml" 2>>"$work/agent.log" &
      agent=$!
      pids+=($agent)
      for _ in $(seq 100); do curl -sf --cacert "$work/server.crt" -o /dev/null --resolve "localhost:$port:127.0.0.1" \
        "https://localhost:$port/readyz" && break; sleep 0.1; done
      sleep 1
      rm -f "$work/stop"
      python3 "$work/flood.py" $port "$work/stop" >"$work/flood" &
      flood=$!
      sleep 1
      scraper >"$work/flooded"
      touch "$work/stop"
      wait $flood || true
      kill "$agent"; wait "$agent" 2>/dev/null || true
      read -r a50 a99 abad < <(summary "$work/alone")
      read -r f50 f99 fbad < <(summary "$work/flooded")
      limit=off; [ $web = limited ] && limit="1s, burst 20"
      echo "| $bin | $limit | $a50 / $a99 | $abad | $f50 / $f99 | $fbad | $(cat "$work/flood") |"
    done
  done
  exit 0
fi
secs=${1:-20}
gpus=${2:-8}
for tool in wrk nginx openssl curl; do
  command -v "$tool" >/dev/null || { echo "missing $tool (apt-get install wrk nginx-light openssl curl)" >&2; exit 1; }
done
cargo build --release --quiet --package gpu-sentinel
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
  -keyout "$work/server.key" -out "$work/server.crt" -days 1 -subj /CN=localhost \
  -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" 2>/dev/null
# The basic-auth user's bcrypt hash (cost 10): htpasswd where installed (apache2-utils),
# else Python's crypt (glibc's libxcrypt has bcrypt).
if command -v htpasswd >/dev/null; then
  hash=$(htpasswd -nbBC 10 "" bench-password | tr -d ':\n')
else
  hash=$(python3 -W ignore -c 'import crypt; print(crypt.crypt("bench-password", crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=1024)))') \
    || { echo "no bcrypt: apt-get install apache2-utils" >&2; exit 1; }
fi
printf 'tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n' >"$work/tls.yml"
cp "$work/tls.yml" "$work/auth.yml"
printf 'basic_auth_users:\n  prometheus: %s\n' "$hash" >>"$work/auth.yml"

ours=18411 authed=18412 static=18413
start_agent() { # port web-config
  target/release/gpu-sentinel run --simulate --sim-gpus "$gpus" --listen 127.0.0.1:"$1" \
    --web.config.file "$2" 2>>"$work/agent.log" &
  pids+=($!)
  for _ in $(seq 100); do curl -sf --cacert "$work/server.crt" -o /dev/null "https://localhost:$1/readyz" \
    --resolve "localhost:$1:127.0.0.1" && break; sleep 0.1; done
}
start_agent $ours "$work/tls.yml"
start_agent $authed "$work/auth.yml"
curl -sf --cacert "$work/server.crt" --resolve "localhost:$ours:127.0.0.1" \
  "https://localhost:$ours/metrics" -o "$work/metrics.prom"
bytes=$(stat -c %s "$work/metrics.prom")
mkdir -p "$work/www"
cp "$work/metrics.prom" "$work/www/metrics"
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
  server {
    listen 127.0.0.1:$static ssl;
    ssl_certificate $work/server.crt;
    ssl_certificate_key $work/server.key;
    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_prefer_server_ciphers on;
    ssl_conf_command Ciphersuites TLS_AES_256_GCM_SHA384:TLS_AES_128_GCM_SHA256:TLS_CHACHA20_POLY1305_SHA256;
    root $work/www;
  }
}
CONF
nginx -c "$work/nginx.conf" -g 'daemon off;' &
pids+=($!)
for _ in $(seq 100); do curl -sfk -o /dev/null "https://127.0.0.1:$static/metrics" && break; sleep 0.1; done
cmp -s "$work/www/metrics" <(curl -sfk "https://127.0.0.1:$static/metrics") || { echo "nginx serves other bytes" >&2; exit 1; }

cipher() { openssl s_client -connect 127.0.0.1:"$1" -servername localhost </dev/null 2>/dev/null | awk '/^New,/ {print $2, $NF}'; }

measure() { # port [header] -> "req/s p99_ms"
  local out
  if [ -n "${2:-}" ]; then
    out=$(wrk -t2 -c32 -d"${secs}s" --latency -H "$2" "https://127.0.0.1:$1/metrics")
  else
    out=$(wrk -t2 -c32 -d"${secs}s" --latency "https://127.0.0.1:$1/metrics")
  fi
  grep -q "Non-2xx" <<<"$out" && { echo "non-2xx answers from port $1:" >&2; echo "$out" >&2; exit 1; }
  local rps p99
  rps=$(awk '/^Requests\/sec/ {print $2}' <<<"$out")
  p99=$(awk '$1=="99%" {v=$2; if (v ~ /us$/) {sub(/us/,"",v); v/=1000} else if (v ~ /ms$/) {sub(/ms/,"",v)} else if (v ~ /s$/) {sub(/s/,"",v); v*=1000}; print v}' <<<"$out")
  echo "$rps $p99"
}
auth="Authorization: Basic $(printf 'prometheus:bench-password' | base64)"
read -r o_rps o_p99 < <(measure $ours)
read -r a_rps a_p99 < <(measure $authed "$auth")
read -r s_rps s_p99 < <(measure $static)
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
echo "exposition: $bytes bytes, $gpus simulated GPUs; wrk -t2 -c32 -d${secs}s over TLS, keep-alive; $(nproc) cores"
echo "negotiated: gpu-sentinel $(cipher $ours); nginx $(cipher $static)"
echo
echo "| server (TLS) | requests/s | p99 latency (ms) | requests/s vs nginx |"
echo "|---|---:|---:|---:|"
echo "| gpu-sentinel /metrics | $o_rps | $o_p99 | $(ratio "$o_rps" "$s_rps") |"
echo "| gpu-sentinel /metrics, basic auth | $a_rps | $a_p99 | $(ratio "$a_rps" "$s_rps") |"
echo "| nginx static file | $s_rps | $s_p99 | 1.00 |"
