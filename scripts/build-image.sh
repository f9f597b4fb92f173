#!/usr/bin/env bash
# Builds the container image from the Dockerfile with buildah, on a machine without a
# Docker engine or a reachable registry, and with --check proves it from the inside.
#
#   scripts/build-image.sh [--check | --check-only] [--binary FILE] [--tag NAME] [--archive FILE]
#
#   (no option)    compile the agent (release) on this host and build the image
#   --binary FILE  ship this gpu-sentinel instead of compiling a release build (CI passes
#                  the debug build its tests just made: the image and its check are the
#                  same, without a second compilation of the crate)
#   --check        build, then check the image (below)
#   --check-only   check the image built before, without building
#   --tag NAME     the image's name (default localhost/gpu-sentinel:latest)
#   --archive FILE also write the image as a docker-archive tarball (`docker load -i FILE`)
#
# The binary is compiled here and taken by the Dockerfile's prebuilt stage
# (--target prebuilt), because the Rust image cannot be pulled without a
# registry; this host must be Debian bookworm, the runtime image's release, which the check
# proves by running the binary inside the image. The base, debian:bookworm-slim, is taken
# from buildah's storage, else pulled, else made by mmdebstrap from Debian's archive as the
# official slim image is made (minbase, merged /usr, no documentation, locales or device
# nodes) and cached as a tarball, so only the first run on a machine pays for it.
#
# The check runs inside the image, as the image's own ENTRYPOINT, CMD and HEALTHCHECK say:
# the files' owners and modes, every shared library the binary needs (NVML is not among
# them: it is loaded at run time from the host driver, which the NVIDIA Container Toolkit
# mounts), `--version`, `check-config` on the image's configuration, and the CMD with
# --simulate under the capabilities the README's `docker run` grants (only CAP_SYSLOG),
# with the HEALTHCHECK passing while it runs and failing once nothing listens. buildah's
# chroot isolation shares the host's network, so that part runs in a private network
# namespace: a port in use on the host cannot fail it, nor another agent answer for it.
#
# Every failure stops the script with a message and a non-zero status.
#
# Environment: GPU_SENTINEL_IMAGE_CACHE (default target/image-cache): the base tarball and
# buildah's storage (vfs driver); GPU_SENTINEL_DEBIAN_MIRROR (default
# http://deb.debian.org/debian) and GPU_SENTINEL_DEBIAN_SECURITY (default
# http://deb.debian.org/debian-security): where mmdebstrap downloads from.
set -Eeuo pipefail
cd "$(dirname "$0")/.."

log() { printf '\n== %s\n' "$*" >&2; }
die() {
  printf '\nbuild-image: FAILED: %s\n' "$*" >&2
  exit 1
}
# A command failing where no check names the failure still says what failed, and where.
trap 'die "line $LINENO: \`$BASH_COMMAND\` exited with status $?"' ERR

mode=build
tag=localhost/gpu-sentinel:latest
archive=""
from_binary=""
while [ $# -gt 0 ]; do
  case "$1" in
    --check) mode=check ;;
    --check-only) mode=check-only ;;
    --binary)
      [ $# -ge 2 ] || die "--binary needs a file"
      from_binary=$2
      shift
      ;;
    --tag)
      [ $# -ge 2 ] || die "--tag needs a name"
      tag=$2
      shift
      ;;
    --archive)
      [ $# -ge 2 ] || die "--archive needs a file name"
      archive=$2
      shift
      ;;
    --run-check-in-netns)
      # Internal: check_image re-runs the script here inside a private network namespace.
      [ $# -ge 2 ] || die "--run-check-in-netns needs a container"
      mode=netns
      ctr=$2
      shift
      ;;
    -h | --help)
      sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
      exit 0
      ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
  shift
done

for tool in buildah jq readelf capsh pgrep; do
  command -v "$tool" >/dev/null || die "$tool is not installed (scripts/test.sh lists the packages)"
done

cache=${GPU_SENTINEL_IMAGE_CACHE:-target/image-cache}
mkdir -p "$cache"
cache=$(cd "$cache" && pwd)
# The binary the prebuilt stage copies; .dockerignore lets this one file of target/ in.
binary=target/image/gpu-sentinel
base_ref=docker.io/library/debian:bookworm-slim

# buildah with this script's storage: vfs needs no overlay support from the kernel or FUSE,
# and chroot isolation needs no OCI runtime (runc, crun) and no user namespaces.
export BUILDAH_ISOLATION=chroot
buildah=(buildah --root "$cache/storage" --runroot "$cache/run" --storage-driver vfs)
bh() { "${buildah[@]}" "$@"; }

# --- the base image ----------------------------------------------------------------------

# mmdebstrap's recipe for a debian:bookworm-slim look-alike. Its hash names the cached
# tarball and labels the imported image, so changing the recipe rebuilds both.
mirror=${GPU_SENTINEL_DEBIAN_MIRROR:-http://deb.debian.org/debian}
security=${GPU_SENTINEL_DEBIAN_SECURITY:-http://deb.debian.org/debian-security}
recipe=(
  --variant=minbase --format=tar --skip=output/dev
  --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr
  # What debuerreotype leaves out of the official slim images.
  --dpkgopt='path-exclude=/usr/share/doc/*'
  --dpkgopt='path-include=/usr/share/doc/*/copyright'
  --dpkgopt='path-exclude=/usr/share/man/*'
  --dpkgopt='path-exclude=/usr/share/info/*'
  --dpkgopt='path-exclude=/usr/share/locale/*'
  --dpkgopt='path-exclude=/usr/share/lintian/*'
  bookworm
)
sources=(
  "deb $mirror bookworm main"
  "deb $mirror bookworm-updates main"
  "deb $security bookworm-security main"
)
recipe_id=$(printf '%s\n' "${recipe[@]}" "${sources[@]}" | sha256sum | cut -c1-16)

image_label() { # IMAGE LABEL: the label's value, empty when unset
  bh inspect --type image "$1" | jq -r --arg l "$2" '.OCIv1.config.Labels[$l] // ""'
}

ensure_base() {
  if bh inspect --type image "$base_ref" >/dev/null 2>&1; then
    local made_by
    made_by=$(image_label "$base_ref" org.gpu-sentinel.base-recipe)
    if [ -z "$made_by" ] || [ "$made_by" = "$recipe_id" ]; then
      log "base: $base_ref from the storage ($([ -n "$made_by" ] && echo "mmdebstrap recipe $made_by" || echo pulled))"
      return
    fi
    log "base: $base_ref was made by another recipe ($made_by); remaking it"
  elif bh pull --quiet --retry 0 "$base_ref" >"$cache/pull.log" 2>&1; then
    log "base: pulled $base_ref"
    return
  else
    log "base: $base_ref cannot be pulled ($(tail -n 1 "$cache/pull.log")); making it with mmdebstrap"
  fi

  command -v mmdebstrap >/dev/null || die "mmdebstrap is not installed and $base_ref cannot be pulled"
  local tarball="$cache/debian-bookworm-slim-$recipe_id.tar"
  if [ ! -s "$tarball" ]; then
    log "mmdebstrap ${recipe[*]} (into $tarball)"
    # Written aside and renamed, so an interrupted run leaves no half tarball to reuse.
    mmdebstrap "${recipe[@]}" "$tarball.partial" "${sources[@]}" >"$cache/mmdebstrap.log" 2>&1 || {
      tail -n 30 "$cache/mmdebstrap.log" >&2
      die "mmdebstrap could not make the bookworm base (is $mirror reachable? log: $cache/mmdebstrap.log)"
    }
    mv "$tarball.partial" "$tarball"
  fi
  log "importing $tarball as $base_ref"
  local ctr
  ctr=$(bh from scratch)
  bh add "$ctr" "$tarball" / >/dev/null
  # What the official image's configuration says.
  bh config --cmd '["bash"]' \
    --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --label "org.gpu-sentinel.base-recipe=$recipe_id" "$ctr"
  bh commit --quiet --rm "$ctr" "$base_ref" >/dev/null
  rm -f "$cache"/debian-bookworm-slim-*.tar.partial
}

# --- the build ----------------------------------------------------------------------------

build_image() {
  if [ -z "$from_binary" ]; then
    log "cargo build --release --locked --package gpu-sentinel"
    cargo build --release --locked --package gpu-sentinel
    from_binary=target/release/gpu-sentinel
  fi
  [ -x "$from_binary" ] || die "$from_binary is not an executable"
  mkdir -p "$(dirname "$binary")"
  # Stripped as the Dockerfile's build stage strips its own.
  strip -o "$binary.tmp" "$from_binary"
  chmod 0755 "$binary.tmp"
  mv "$binary.tmp" "$binary"

  ensure_base

  log "buildah build --target prebuilt -t $tag"
  # --format docker: the OCI image format has no HEALTHCHECK (buildah would drop it). No
  # --layers: with the vfs driver every cached layer is a whole copy of the file system, and
  # keeping one per instruction costs more than rebuilding the few COPY lines.
  bh build --quiet --format docker --pull=never --target prebuilt \
    -t "$tag" -f Dockerfile . >/dev/null ||
    die "buildah build failed"
  # The runtime stage's image and the one this tag named before would pile up at each run.
  bh rmi --prune >/dev/null
  log "built $tag: $(bh images --format '{{.Size}}' "$tag")"
}

# --- the check ----------------------------------------------------------------------------

# The image's configuration (Docker format), read once.
image_config() { bh inspect --type image "$tag" | jq .Docker.config; }

# Runs a command in the check's container and prints its standard output, passed through a
# file in the container rather than buildah's relay, which on a loaded machine has been seen
# to lose a short command's output (an empty `--version` with status 0).
captured() {
  local root status=0
  root=$(bh mount "$ctr")
  bh run "$ctr" -- /bin/sh -c '"$@" >/tmp/build-image.out' sh "$@" || status=$?
  cat "$root/tmp/build-image.out" 2>/dev/null || true
  rm -f "$root/tmp/build-image.out"
  return $status
}

# A JSON array from the image's configuration into the named bash array.
json_array() { # NAME JQ-PATH
  local -n into=$1
  # shellcheck disable=SC2034 # into is a nameref: this fills the caller's array
  mapfile -d '' -t into < <(image_config | jq -j "($2 // []) | .[] | (., \"\\u0000\")")
}

check_image() {
  bh inspect --type image "$tag" >/dev/null 2>&1 || die "no image $tag to check (build it first)"
  [ -x "$binary" ] || die "no $binary: the check compares the image against the binary it was built from"

  local entrypoint cmd probe
  json_array entrypoint .Entrypoint
  json_array cmd .Cmd
  json_array probe .Healthcheck.Test
  [ ${#entrypoint[@]} -gt 0 ] || die "the image has no ENTRYPOINT"
  [ ${#cmd[@]} -gt 0 ] || die "the image has no CMD"
  case "${probe[0]:-}" in
    CMD) probe=("${probe[@]:1}") ;;
    CMD-SHELL) probe=(/bin/sh -c "${probe[1]}") ;;
    *) die "the image has no HEALTHCHECK (built in OCI format?): ${probe[*]:-none}" ;;
  esac
  local user
  user=$(image_config | jq -r '.User // ""')
  log "image $tag: user '${user:-root}', entrypoint ${entrypoint[*]}, cmd ${cmd[*]}"

  ctr=$(bh from --pull=never --quiet "$tag") || die "cannot make a container of $tag"
  trap 'bh rm "$ctr" >/dev/null 2>&1 || true' EXIT
  local root
  root=$(bh mount "$ctr")

  log "files: owners and modes"
  local files
  files=$(cd "$root" && stat -c '%a %u:%g /%n' usr/local/bin/gpu-sentinel etc/gpu-sentinel/config.toml \
    usr/share/doc/gpu-sentinel/LICENSE) || die "a file is missing from the image"
  printf '%s\n' "$files"
  grep -qx '755 0:0 /usr/local/bin/gpu-sentinel' <<<"$files" || die "the binary is not root's 0755"
  grep -qx '644 0:0 /etc/gpu-sentinel/config.toml' <<<"$files" || die "the configuration is not root's 0644"
  cmp -s "$root/usr/local/bin/gpu-sentinel" "$binary" ||
    die "the image's binary is not $binary (a stale layer?)"

  log "shared libraries (readelf -d: NEEDED; ldd inside the image)"
  local needed
  needed=$(readelf --dynamic --wide "$binary" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  printf 'NEEDED: %s\n' "${needed//$'\n'/ }"
  if grep -qi nvidia <<<"$needed"; then
    die "the binary links an NVIDIA library; NVML must be loaded at run time"
  fi
  local resolved
  resolved=$(captured ldd /usr/local/bin/gpu-sentinel) || die "ldd in the image failed: $resolved"
  printf '%s\n' "$resolved"
  grep -q 'libc\.so\.6 => ' <<<"$resolved" || die "ldd in the image resolved no libc"
  ! grep -q 'not found' <<<"$resolved" || die "a library the binary needs is missing from the image"

  log "gpu-sentinel --version"
  local version expected
  version=$(captured "${entrypoint[@]}" --version) || die "--version failed in the image"
  expected=$("$binary" --version) || die "$binary --version failed on the host"
  printf '%s\n' "$version"
  [ "$version" = "$expected" ] || die "the image says '$version', the binary here '$expected'"

  local config
  config=$(printf '%s\n' "${cmd[@]}" | grep -A1 -x -- '--config' | tail -n 1)
  [ -n "$config" ] || die "the CMD names no --config"
  log "gpu-sentinel check-config $config"
  bh run "$ctr" -- "${entrypoint[@]}" check-config "$config" ||
    die "check-config refuses the image's $config"

  # The rest needs its own network namespace: re-run this part of the script in one.
  if [ "${GPU_SENTINEL_IMAGE_NETNS:-}" != private ]; then
    command -v unshare >/dev/null || die "unshare (util-linux) is needed for the run check"
    command -v ip >/dev/null ||
      die "ip (iproute2) is needed for the run check"
    GPU_SENTINEL_IMAGE_NETNS=private GPU_SENTINEL_IMAGE_CACHE="$cache" \
      unshare --net -- "$0" --tag "$tag" --run-check-in-netns "$ctr" ||
      die "the run check failed"
  else
    run_check
  fi
}

# CMD --simulate in the image with only CAP_SYSLOG; the HEALTHCHECK command passes while it
# runs and fails once it is gone. Runs inside the private network namespace.
run_check() {
  ip link set lo up
  local entrypoint cmd probe
  json_array entrypoint .Entrypoint
  json_array cmd .Cmd
  json_array probe .Healthcheck.Test
  case "${probe[0]}" in
    CMD) probe=("${probe[@]:1}") ;;
    CMD-SHELL) probe=(/bin/sh -c "${probe[1]}") ;;
  esac
  local timeout_s
  # Docker's default timeout where the HEALTHCHECK sets none: 30 s.
  timeout_s=$(image_config | jq '(.Healthcheck.Timeout // 30000000000) / 1000000000 | ceil')
  # The probe as Docker runs it: in the container, killed after the HEALTHCHECK's timeout.
  healthy() { timeout "$timeout_s" "${buildah[@]}" run "$ctr" -- "${probe[@]}" >/dev/null 2>&1; }

  if healthy; then die "the HEALTHCHECK passes before the agent runs: something else answers"; fi

  # `docker run --cap-drop ALL --cap-add SYSLOG`, as the README runs the image. buildah's
  # --cap-drop ALL would win over any --cap-add, so every other capability a container gets
  # by default is dropped by name.
  local defaults drops=()
  defaults=$(captured grep CapBnd /proc/self/status | awk '{print $2}')
  [ -n "$defaults" ] || die "cannot read a container's default capabilities"
  for cap in $(capsh --decode="$defaults" | cut -d= -f2 | tr ',' ' '); do
    [ "$cap" = cap_syslog ] || drops+=(--cap-drop "${cap^^}")
  done

  log "${entrypoint[*]} ${cmd[*]} --simulate (capabilities: SYSLOG only)"
  local agent_log="$cache/agent.log"
  bh run "${drops[@]}" --cap-add CAP_SYSLOG "$ctr" -- "${entrypoint[@]}" "${cmd[@]}" --simulate \
    >"$agent_log" 2>&1 &
  local runner=$!
  # The agent itself, under buildah's runtime processes: buildah run answers SIGTERM by
  # killing it, so SIGTERM goes to the agent directly, as docker stop's reaches PID 1.
  local pid="" waited=0
  agent_gone() { ! kill -0 "$runner" 2>/dev/null; }
  stop_agent() {
    [ -z "$pid" ] || kill -TERM "$pid" 2>/dev/null || true
    timeout 30 tail --pid="$runner" -f /dev/null || kill -KILL "$pid" 2>/dev/null || true
  }
  trap 'stop_agent' EXIT
  until [ -n "$pid" ]; do
    pid=$(pgrep -x gpu-sentinel --ns $$ --nslist net || true)
    agent_gone && { cat "$agent_log" >&2; die "the agent exited at once"; }
    [ $waited -lt 30 ] || die "no gpu-sentinel process 30 s after buildah run"
    sleep 1
    waited=$((waited + 1))
  done
  local caps
  caps=$(awk '/^CapEff/ {print $2}' "/proc/$pid/status")
  [ "$(capsh --decode="$caps")" = "0x$caps=cap_syslog" ] ||
    die "the agent runs with capabilities $(capsh --decode="$caps"), not CAP_SYSLOG alone"

  local started=$SECONDS
  until healthy; do
    agent_gone && { cat "$agent_log" >&2; die "the agent exited before its HEALTHCHECK passed"; }
    [ $((SECONDS - started)) -lt 60 ] || {
      cat "$agent_log" >&2
      die "the HEALTHCHECK did not pass within 60 s"
    }
    sleep 1
  done
  log "HEALTHCHECK passed $((SECONDS - started)) s after the agent started: ${probe[*]}"

  # SIGTERM, as docker stop sends: the agent must end on its own, cleanly.
  kill -TERM "$pid"
  timeout 30 tail --pid="$runner" -f /dev/null || die "the agent did not stop within 30 s of SIGTERM"
  local status=0
  wait "$runner" || status=$?
  trap - EXIT
  [ $status -eq 0 ] || { cat "$agent_log" >&2; die "the agent exited with status $status after SIGTERM"; }
  if healthy; then die "the HEALTHCHECK passes with nothing listening"; fi
  log "HEALTHCHECK fails with nothing listening"
  cat "$agent_log" >&2
  if grep -E ' (ERROR|WARN) ' "$agent_log" >/dev/null; then
    die "the agent logged warnings or errors (above)"
  fi
}

case "$mode" in
  build) build_image ;;
  check)
    build_image
    check_image
    ;;
  check-only) check_image ;;
  netns)
    run_check
    exit 0
    ;;
esac
[ -z "$archive" ] || {
  log "writing $archive"
  bh push --quiet "$tag" "docker-archive:$archive:$tag" || die "could not write $archive"
}
log "image $tag: ok"
