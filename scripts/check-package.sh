#!/usr/bin/env bash
# make package: what ops deploy, built and checked as they would use it.
#
#  1. the container images, built as `make image` builds them (scripts/build-image.sh), into a
#     buildah store of their own in a temporary directory (vfs: it works inside containers and
#     virtual machines), removed afterwards;
#  2. helm, from the Go module proxy (helm.sh/helm/v3 at HELM_VERSION), built once into bin/tools/;
#     `helm lint --strict` of the chart;
#  3. the Go tests of deploy/ on them: TestImage (the image's configuration and files, and its
#     binary run inside it: version, check of every shipped configuration and compose.yaml's,
#     serve answering its health check), TestChart (helm template, what it renders, and that run
#     on a real PostgreSQL and Redis), TestCompose.
#
# Needs buildah (apt-get install buildah), run as root or with a user namespace buildah can use.
set -euo pipefail
cd "$(dirname "$0")/.."

GO="${GO:-go}"
HELM_VERSION="${HELM_VERSION:-v3.22.0}"
start=$SECONDS

if ! command -v buildah >/dev/null 2>&1; then
  echo "make package: buildah not found; install it with: apt-get install buildah" >&2
  exit 1
fi

tmp="$(mktemp -d)"
store=(--root "$tmp/storage" --runroot "$tmp/run" --storage-driver vfs)
cleanup() {
  buildah "${store[@]}" rm --all >/dev/null 2>&1 || true
  buildah "${store[@]}" rmi --all --force >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT

echo "== the images (scripts/build-image.sh, into a store of their own)"
IMAGE=localhost/payrouter-check IMAGE_TAG=check IMAGE_BUILDER="buildah ${store[*]}" bash scripts/build-image.sh
built=$SECONDS

helm="bin/tools/helm-$HELM_VERSION"
if [[ ! -x $helm ]]; then
  echo "== helm $HELM_VERSION (go install helm.sh/helm/v3/cmd/helm@$HELM_VERSION, once, into bin/tools/)"
  mkdir -p "$tmp/gobin" bin/tools
  GOBIN="$tmp/gobin" "$GO" install -ldflags "-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
  mv "$tmp/gobin/helm" "$helm"
fi
# Checked against the oldest Kubernetes the chart supports (its kubeVersion): helm built from
# source, without the release's linker flags, would otherwise assume 1.20.
echo "== helm lint --strict deploy/helm/payrouter"
"$helm" lint --strict --kube-version 1.30.0 deploy/helm/payrouter

echo "== go test ./deploy/ (TestImage, TestChart, TestCompose)"
PAYROUTER_IMAGE=localhost/payrouter-check:check \
PAYROUTER_GATEWAYSIM_IMAGE=localhost/payrouter-check-gatewaysim:check \
PAYROUTER_IMAGE_STORE="$tmp" \
PAYROUTER_EXPECT_COMMIT="${COMMIT:-}" \
PAYROUTER_EXPECT_VERSION="${VERSION:-}" \
PAYROUTER_HELM="$PWD/$helm" \
  "$GO" test -count=1 -v -run '^(TestImage|TestChart|TestCompose)$' ./deploy/
echo "make package: done in $((SECONDS - start)) s (the images: $((built - start)) s)"
