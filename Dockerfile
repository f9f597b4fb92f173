# gpu-sentinel container image.
#
# Build:  docker build -t gpu-sentinel .
# Run:    docker run --rm --gpus all --pid=host -p 10400:10400 gpu-sentinel
#
# The runtime image carries no NVIDIA library: the NVIDIA Container Toolkit mounts the
# host driver's libnvidia-ml.so.1 when the container asks for the "utility" capability
# (the ENV below, or --gpus). --pid=host lets process owners resolve through /proc;
# reading /dev/kmsg for XIDs needs CAP_SYSLOG (--cap-add SYSLOG) or `kmsg = "off"`.

FROM rust:1-bookworm AS build
WORKDIR /src
# A Docker build has no .git: pass the revision for gpu_sentinel_build_info.
ARG GPU_SENTINEL_REVISION=unknown
ENV GPU_SENTINEL_REVISION=${GPU_SENTINEL_REVISION}
COPY . .
RUN cargo build --release --locked --package gpu-sentinel \
 && strip target/release/gpu-sentinel

FROM debian:bookworm-slim
COPY --from=build /src/target/release/gpu-sentinel /usr/local/bin/gpu-sentinel
COPY config.toml /etc/gpu-sentinel/config.toml
ENV NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=utility
# The state directory (engine windows, alert state, outbox) belongs on a volume.
VOLUME /var/lib/gpu-sentinel
EXPOSE 10400
ENTRYPOINT ["/usr/local/bin/gpu-sentinel"]
CMD ["run", "--config", "/etc/gpu-sentinel/config.toml"]
