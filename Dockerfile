# gpu-sentinel container image.
#
# Build:  docker build -t gpu-sentinel .     (BuildKit: it builds only the stages needed)
#         scripts/build-image.sh --check     (buildah, with no Docker engine or registry)
# Run:    docker run --rm --gpus all --pid=host --cap-drop ALL --cap-add SYSLOG --read-only \
#           -v gpu-sentinel-state:/var/lib/gpu-sentinel -p 10400:10400 gpu-sentinel
#
# The runtime image carries no NVIDIA library: the NVIDIA Container Toolkit mounts the
# host driver's libnvidia-ml.so.1 when the container asks for the "utility" capability
# (the ENV below, or --gpus). --pid=host lets process owners resolve through /proc and
# ghost processes be told; reading /dev/kmsg for XIDs needs CAP_SYSLOG (--cap-add SYSLOG)
# or `kmsg = "off"`. Kubernetes: deploy/kubernetes. tests/deploy.rs checks this file
# against the binary and the configuration defaults.

# Where the agent binary comes from, by target:
#   the default (the last stage): compiled from this tree in the Rust image, which is what a
#     plain `docker build .` with a registry at hand does;
#   --target prebuilt: target/image/gpu-sentinel, compiled and stripped on a Debian bookworm
#     host by scripts/build-image.sh, for machines that reach no registry and so cannot pull
#     the Rust image (the script makes the Debian base with mmdebstrap there).
# Both stages add the binary to one runtime stage, so the image users run is described once,
# whichever way its binary was made. A target rather than a build argument in FROM: buildah
# (1.28) decides which stages to build before it reads an ARG's default. BuildKit (Docker's
# builder since 23.0) and buildah build only the stages the target needs, so a prebuilt
# build never pulls the Rust image and a default build never looks for target/image.

# Build and runtime stages are the same Debian release (bookworm), so the binary needs no
# newer glibc than the runtime has; it links only libc6's and libgcc-s1's libraries, which
# every Debian image ships (NVML is loaded at run time, never linked). A prebuilt binary
# must come from bookworm too; scripts/build-image.sh --check runs it inside the image,
# which fails on any glibc symbol version the image lacks.
FROM rust:1-bookworm AS build
WORKDIR /src
# A Docker build has no .git: pass the revision for gpu_sentinel_build_info.
ARG GPU_SENTINEL_REVISION=unknown
ENV GPU_SENTINEL_REVISION=${GPU_SENTINEL_REVISION}
COPY . .
RUN cargo build --release --locked --package gpu-sentinel \
 && strip target/release/gpu-sentinel

FROM debian:bookworm-slim AS runtime
# Modes set here, not inherited from the checkout's umask: the configuration (and the
# binary, below) are root's and read-only to everyone else.
COPY --chmod=0644 config.toml /etc/gpu-sentinel/config.toml
COPY --chmod=0644 LICENSE /usr/share/doc/gpu-sentinel/LICENSE
ENV NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=utility
# The state directory (engine windows, alert state, outbox) belongs on a volume.
VOLUME /var/lib/gpu-sentinel
EXPOSE 10400
# Root, on purpose, with every capability but SYSLOG meant to be dropped (the Run line
# above). The default configuration follows /dev/kmsg, which needs CAP_SYSLOG where dmesg
# is restricted, and a container hands capabilities only to root (a non-root USER gets no
# ambient capabilities); root also owns the state volume Docker creates. Other users'
# /proc entries the agent reads are world-readable and need no capability.
USER root
# /healthz: 200 while collections keep coming, 503 when none came for three intervals.
# The slim image has no curl or wget; bash's /dev/tcp speaks the one request.
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
  CMD ["/bin/bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/10400 && printf 'GET /healthz HTTP/1.1\\r\\nHost: localhost\\r\\nConnection: close\\r\\n\\r\\n' >&3 && read -r -t 4 _ status _ <&3 && [ \"$status\" = 200 ]"]
ENTRYPOINT ["/usr/local/bin/gpu-sentinel"]
CMD ["run", "--config", "/etc/gpu-sentinel/config.toml"]

# `--target prebuilt`: the binary compiled on the host (scripts/build-image.sh).
FROM runtime AS prebuilt
COPY --chmod=0755 target/image/gpu-sentinel /usr/local/bin/gpu-sentinel

# The default: the binary compiled in the build stage.
FROM runtime
COPY --from=build --chmod=0755 /src/target/release/gpu-sentinel /usr/local/bin/gpu-sentinel
