#!/usr/bin/env bash
# What one save of the engine state costs at 8 and 64 GPUs with full history windows:
# the clone the collection thread makes, and the serialise + write + fsync the saver
# thread does (crates/agent/src/agent/saver.rs). Writes into a temporary directory on the disk of
# $TMPDIR; point TMPDIR at the state directory's disk to measure that one.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet --example save-cost
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
for gpus in 8 64; do
  target/release/examples/save-cost "$gpus" "$work"
done
