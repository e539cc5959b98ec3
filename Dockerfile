# payrouter's container image: the static payrouter binary, the CA bundle it verifies the
# gateways' certificates with, and the shipped configurations. Nothing else: no shell, no
# package manager, no libc. It runs as uid 65532, a user that owns none of its files.
#
# Build it with `make image` (docs/deploy.md): it builds the binaries on the host first
# (CGO_ENABLED=0, -trimpath, stamped with the commit) into bin/image/, with the host's CA bundle,
# then runs this file with buildah (IMAGE_BUILDER=podman or docker work too). The image starts
# FROM scratch, so building it pulls nothing from any registry.
#
# Two images: `--target gatewaysim`, the simulated gateways (deploy/compose.yaml's stand-ins for
# real ones), then payrouter's, the default target.

FROM scratch AS gatewaysim
COPY bin/image/gatewaysim /usr/local/bin/gatewaysim
USER 65532:65532
EXPOSE 9101 9102 9103
ENTRYPOINT ["/usr/local/bin/gatewaysim"]
CMD ["-paywell", ":9101", "-ding", ":9102", "-tranglo", ":9103"]

FROM scratch AS payrouter
ARG VERSION=""
ARG COMMIT=""
LABEL org.opencontainers.image.title="payrouter" \
      org.opencontainers.image.description="routes a storefront's payments across several gateways" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${COMMIT}"
# Go reads the CA bundle from this path on Linux (crypto/x509).
COPY bin/image/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY configs/payrouter.yaml configs/payrouter-redis.yaml /etc/payrouter/
COPY bin/image/payrouter /usr/local/bin/payrouter
# In a container the network namespace is the boundary, so both listeners take every interface
# of it; the shipped configurations read these (${PAYROUTER_LISTEN:-127.0.0.1:8080}). Off
# loopback, serve refuses the demo's published secrets and short ones: pass real ones.
ENV PAYROUTER_LISTEN=":8080" \
    PAYROUTER_ADMIN_LISTEN=":9090"
# The storefront API; the admin API and /metrics (publish it only where ops reach it).
EXPOSE 8080 9090
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/payrouter"]
CMD ["serve", "-config", "/etc/payrouter/payrouter.yaml"]
