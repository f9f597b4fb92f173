#!/usr/bin/env bash
# The test command: the README names it and .ci/run calls it. It installs what the tests
# need (real Prometheus tools, never mocks), then runs formatting, lints, the build of every
# workspace member (the fake NVML library included), the container image's build and check,
# and every test.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\n== %s\n' "$*"; }

# Debian packages whose programs the tests run for real.
declare -A needs=(
  [promtool]=prometheus
  [prometheus]=prometheus
  [prometheus-alertmanager]=prometheus-alertmanager
  # tests/it/fleet_limits.rs: the fleet report, review and replay against VictoriaMetrics at
  # its default flags.
  [victoria-metrics]=victoria-metrics
  # tests/it/board.rs, tests/it/fleet_report.rs: the live page and the HTML report in a
  # headless browser.
  [chromium]=chromium
  # tests/it/web_config.rs: test CAs and certificates (openssl), HTTP/2 over TLS (curl).
  [openssl]=openssl
  [curl]=curl
  # tests/it/deploy.rs: the systemd unit, the binary's shared libraries.
  [systemd-analyze]=systemd
  [readelf]=binutils
  # kubectl is usually on the machine image already; Debian's older one renders the same.
  [kubectl]=kubernetes-client
  # scripts/build-image.sh: the container image built and checked without a Docker engine
  # or a registry. Installed without recommends, which is enough as root: buildah's vfs
  # storage and chroot isolation need neither fuse-overlayfs nor runc/crun, and mmdebstrap
  # runs as root without fakechroot. jq reads the image's configuration, capsh the
  # capabilities, ip and pgrep the run check's private network namespace.
  [buildah]=buildah
  [mmdebstrap]=mmdebstrap
  [jq]=jq
  [capsh]=libcap2-bin
  [ip]=iproute2
  [pgrep]=procps
  # tests/it/deploy_health.rs: the Slurm health-check scripts of deploy/slurm.
  [shellcheck]=shellcheck
)
missing=()
for tool in "${!needs[@]}"; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("${needs[$tool]}")
done
if [ ${#missing[@]} -gt 0 ]; then
  pkgs=$(printf '%s\n' "${missing[@]}" | sort -u | tr '\n' ' ')
  log "installing $pkgs"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends $pkgs >/dev/null
fi

# The Kubernetes manifests (tests/it/deploy.rs) are validated offline by kubernetes-validate,
# which ships the Kubernetes schemas (and brings PyYAML, which the tests read YAML with).
# kubectl, for `kubectl kustomize`, is on the machine image.
if ! command -v kubernetes-validate >/dev/null 2>&1; then
  log "installing kubernetes-validate"
  python3 -m pip install --quiet --root-user-action=ignore kubernetes-validate
fi

# Tests that need these tools fail, rather than skip, when this is set.
export GPU_SENTINEL_REQUIRE_TOOLS=1

log "cargo fmt --check"
cargo fmt --all -- --check
log "cargo clippy (the agent as hosts build it, and with the trainer)"
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo clippy --workspace --all-targets --all-features --locked -- -D warnings
log "cargo build (workspace, fake NVML library included)"
cargo build --workspace --locked
# The agent that GPU hosts run reads NVML and links no trainer (the feature `train`): both
# the agent's crate and the binary as hosts build it (default features).
for package in gpu-sentinel-agent gpu-sentinel; do
  log "$package's dependencies: nvml-wrapper, and no linfa or ndarray"
  agent_deps=$(cargo tree --locked --package "$package" --edges normal --prefix none)
  grep -q '^nvml-wrapper ' <<<"$agent_deps" || { echo "$package does not depend on nvml-wrapper" >&2; exit 1; }
  if grep -E '^(linfa|linfa-logistic|ndarray) ' <<<"$agent_deps" >&2; then
    echo "$package's normal dependencies include the trainer's numeric crates (above)" >&2
    exit 1
  fi
done
# The image ships the debug build just made rather than a release build: the Dockerfile,
# the base, the files and the check are the same, and a second, optimised compilation of the
# crate would cost CI more than the rest of the image step (BENCHMARKS.md).
log "scripts/build-image.sh --check"
scripts/build-image.sh --check --binary target/debug/gpu-sentinel
log "cargo test (every feature: the trainer's tests too)"
cargo test --workspace --all-features --locked
log "all tests passed"
