# The tollgate image: the `tollgate` binary on an otherwise empty root (its C libraries, CA
# certificates, a user without privileges), so it holds nothing to patch but tollgate itself.
#
#   docker build -t registry.example/tollgate:0.1.0 .     (or: buildah bud -t ... .)
#
# The root is put together by deploy/image/rootfs.sh, in the build stage here and in
# scripts/test.sh, which builds the final stage below with buildah from the binary it tested and
# starts that binary from the image's root (docs/deploy.md). Probes: GET /healthz (liveness) and
# GET /readyz (readiness) on the HTTP port; GET /healthcheck and the gRPC health service as
# envoyproxy/ratelimit answers them. There is no HEALTHCHECK: the image holds no shell or HTTP
# client to run one, and orchestrators probe the ports themselves.

ARG RUST_VERSION=1.95

FROM docker.io/library/rust:${RUST_VERSION}-slim-bookworm AS build
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p tollgate-cli \
    && sh deploy/image/rootfs.sh target/release/tollgate /rootfs

FROM scratch
COPY --from=build /rootfs /
# HOST and GRPC_HOST are envoyproxy/ratelimit's variables: with them the listeners take all
# interfaces (0.0.0.0:8080 and 0.0.0.0:8081) instead of tollgate's loopback defaults, whether
# the image runs `tollgate serve` or Envoy Gateway runs `/bin/ratelimit`; PORT, GRPC_PORT and
# tollgate's own flags still win.
ENV PATH=/usr/local/bin:/bin \
    HOST=0.0.0.0 \
    GRPC_HOST=0.0.0.0
USER 65532:65532
# 8080: the HTTP API, /metrics and the probes; 8081: the Envoy rate limit service (gRPC).
EXPOSE 8080 8081
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/tollgate"]
CMD ["serve"]
LABEL org.opencontainers.image.title="tollgate" \
      org.opencontainers.image.description="Per-key rate limiting over HTTP and Envoy's rate limit service"
