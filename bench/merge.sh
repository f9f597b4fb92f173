#!/usr/bin/env bash
# What joining a store's answers costs the fleet client: bench/merge_cost.rs against a store
# on loopback answering SERIES series in two windows of 12 hourly steps each, at each size,
# the old join (a label-set comparison with every series so far) timed on the same pieces
# where it finishes in minutes.
#
#   bench/merge.sh                 # 5,000 10,000 20,000 100,000 series
#   SIZES="1000 2000" bench/merge.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SIZES=${SIZES:-"5000 10000 20000 100000"}
BEFORE_UP_TO=${BEFORE_UP_TO:-20000}
CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-1} cargo build --release --locked --quiet --example merge-cost
bin=target/release/examples/merge-cost
echo "$(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), commit $(git rev-parse --short HEAD)"
for n in $SIZES; do
  before=""
  [ "$n" -le "$BEFORE_UP_TO" ] && before=--before
  "$bin" "$n" 2 24 $before
done
