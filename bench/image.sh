#!/usr/bin/env bash
# The container image's size and how long scripts/build-image.sh takes, cold and warm.
#
#   bench/image.sh [BINARY] [RUNS]
#
# BINARY (default target/release/gpu-sentinel, which must exist) is what the image ships;
# its compilation is not timed here. Cold: an empty cache, so the base is made by
# mmdebstrap from Debian's archive (no registry is reachable here) and imported. Warm:
# RUNS (default 3) more runs over that cache, as a developer's or a CI machine's second run.
# Each run is timed twice: the build (base and `buildah build`) and the check from inside
# (--check-only). The cache is a temporary directory, so the default one (target/image-cache)
# is left alone. Sizes: buildah's (uncompressed, as `docker images` shows), the base's, and
# the image as a docker-archive, plain and gzip-compressed (about what a registry sends).
set -euo pipefail
cd "$(dirname "$0")/.."
binary=${1:-target/release/gpu-sentinel}
runs=${2:-3}
[ -x "$binary" ] || {
  echo "no $binary: build it first (cargo build --release --locked)" >&2
  exit 1
}
cache=$(mktemp -d /tmp/gpu-sentinel-image-bench.XXXXXX)
trap 'rm -rf "$cache"' EXIT
export GPU_SENTINEL_IMAGE_CACHE=$cache
tag=localhost/gpu-sentinel:bench
bh() { buildah --root "$cache/storage" --runroot "$cache/run" --storage-driver vfs "$@"; }

seconds() { # COMMAND...: runs it quietly, prints its wall time in seconds
  local start=$EPOCHREALTIME
  "$@" >"$cache/last.log" 2>&1 || {
    cat "$cache/last.log" >&2
    exit 1
  }
  printf '%.1f' "$(echo "$EPOCHREALTIME - $start" | awk '{print $1 - $3}')"
}

echo "commit $(git rev-parse --short=12 HEAD), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "binary: $binary, $(stat -c %s "$binary") bytes"
printf '| run | build (s) | check (s) |\n|---|---:|---:|\n'
for run in $(seq 0 "$runs"); do
  build=$(seconds scripts/build-image.sh --binary "$binary" --tag "$tag")
  check=$(seconds scripts/build-image.sh --check-only --tag "$tag")
  if [ "$run" -eq 0 ]; then name=cold; else name="warm $run"; fi
  printf '| %s | %s | %s |\n' "$name" "$build" "$check"
done

bh push --quiet "$tag" "docker-archive:$cache/image.tar:$tag"
echo
echo "image $tag: $(bh images --format '{{.Size}}' "$tag") (base debian:bookworm-slim" \
  "$(bh images --format '{{.Size}}' docker.io/library/debian:bookworm-slim))"
echo "docker-archive: $(stat -c %s "$cache/image.tar") bytes, gzip -6: $(gzip -6 -c "$cache/image.tar" | wc -c) bytes"
echo "stripped agent binary in the image: $(stat -c %s target/image/gpu-sentinel) bytes"
