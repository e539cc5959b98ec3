#!/usr/bin/env bash
# make image: payrouter's container image and the simulators', from the Dockerfile.
#
# The binaries are built here, on the host, with the go on PATH (static: CGO_ENABLED=0;
# -trimpath; LDFLAGS from the Makefile stamp the version and commit), into bin/image/ beside the
# host's CA bundle; the Dockerfile only copies them onto an empty image (FROM scratch), so the
# build pulls nothing from a registry.
#
# Environment (the Makefile sets the first ones):
#   GO             the go command (default go)
#   LDFLAGS        -ldflags of the build (the Makefile's: the version and commit stamps)
#   VERSION        the version stamped (may be empty)
#   COMMIT         the commit stamped
#   MODIFIED       "true" when the tree has changes not committed
#   IMAGE          the image's name (default localhost/payrouter); the simulators' is IMAGE-gatewaysim
#   IMAGE_TAG      its tag (default: VERSION, else the commit's first 12 digits, "-modified" added
#                  when the tree has changes not committed); "latest" is tagged too
#   IMAGE_BUILDER  the command that runs the Dockerfile (default buildah; podman and docker
#                  take the same arguments). It may carry options: "buildah --storage-driver vfs"
#   GOARCH         the architecture to build for (default: the host's)
#   CA_BUNDLE      the CA bundle copied in (default /etc/ssl/certs/ca-certificates.crt)
set -euo pipefail
cd "$(dirname "$0")/.."

GO="${GO:-go}"
IMAGE="${IMAGE:-localhost/payrouter}"
CA_BUNDLE="${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}"
read -r -a builder <<<"${IMAGE_BUILDER:-buildah}"
GOARCH="${GOARCH:-$("$GO" env GOARCH)}"
COMMIT="${COMMIT:-}"
VERSION="${VERSION:-}"
if [[ -z ${IMAGE_TAG:-} ]]; then
  IMAGE_TAG="${VERSION:-${COMMIT:0:12}}"
  IMAGE_TAG="${IMAGE_TAG:-dev}"
  if [[ ${MODIFIED:-} == true && -z $VERSION ]]; then IMAGE_TAG+="-modified"; fi
fi

if ! command -v "${builder[0]}" >/dev/null 2>&1; then
  echo "make image: ${builder[0]} not found; install it with: apt-get install buildah (or set IMAGE_BUILDER=podman or docker)" >&2
  exit 1
fi
if [[ ! -s $CA_BUNDLE ]]; then
  echo "make image: no CA bundle at $CA_BUNDLE (payrouter verifies the gateways' certificates with it); install it with: apt-get install ca-certificates, or set CA_BUNDLE=FILE" >&2
  exit 1
fi

rm -rf bin/image
mkdir -p bin/image
for cmd in payrouter gatewaysim; do
  CGO_ENABLED=0 GOOS=linux GOARCH="$GOARCH" "$GO" build -trimpath -ldflags "${LDFLAGS:-}" -o "bin/image/$cmd" "./cmd/$cmd"
done
cp "$CA_BUNDLE" bin/image/ca-certificates.crt
# Owned by whoever builds (root in the image: COPY makes them root's), and nobody may write
# them: the image's user, 65532, can run the binaries and read the rest, and change none of it.
chmod 0555 bin/image/payrouter bin/image/gatewaysim
chmod 0444 bin/image/ca-certificates.crt

# The image's labels say what `payrouter version` says: asked of the binary when it runs here
# (the host's architecture), else taken from the stamps.
label_version="$VERSION" label_commit="$COMMIT"
if info="$(bin/image/payrouter version -json 2>/dev/null)"; then
  label_version="$(sed -n 's/.*"version":"\([^"]*\)".*/\1/p' <<<"$info")"
  label_commit="$(sed -n 's/.*"commit":"\([^"]*\)".*/\1/p' <<<"$info")"
fi

"${builder[@]}" build --platform "linux/$GOARCH" --target gatewaysim -t "$IMAGE-gatewaysim:$IMAGE_TAG" -t "$IMAGE-gatewaysim:latest" -f Dockerfile .
"${builder[@]}" build --platform "linux/$GOARCH" --target payrouter --build-arg "VERSION=$label_version" --build-arg "COMMIT=$label_commit" \
  -t "$IMAGE:$IMAGE_TAG" -t "$IMAGE:latest" -f Dockerfile .
echo "built $IMAGE:$IMAGE_TAG and $IMAGE-gatewaysim:$IMAGE_TAG (both also :latest)"
