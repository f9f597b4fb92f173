#!/usr/bin/env bash
# Collection cost per GPU per tick through the fake NVML library (the production
# nvml-wrapper path: dlopen, every call family, per-call error handling) at 8 and 1024 GPUs.
# The fake's clock is manual, so simulator stepping is not part of what is timed.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet --workspace --lib --bins --examples
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
for gpus in 8 1024; do
  ticks=$(( gpus > 100 ? 10 : 200 ))
  printf '[simulation]\ngpus = %d\n[clock]\nmode = "manual"\n' "$gpus" >"$work/s.toml"
  FAKE_NVML_SCENARIO="$work/s.toml" target/release/examples/collect-cost target/release/libfake_nvml.so "$ticks"
done
