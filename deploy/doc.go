// Package deploy holds payrouter's deployment files and their checks: the container image
// (../Dockerfile, built by `make image`), deploy/compose.yaml and the Helm chart in
// deploy/helm/payrouter. docs/deploy.md says how to use them.
//
// The tests read what a user would run. TestCompose checks compose.yaml on every `go test`.
// TestImage and TestChart need what `make package` prepares (scripts/check-package.sh): an image
// built in a buildah store of its own (PAYROUTER_IMAGE, PAYROUTER_IMAGE_STORE) and a helm binary
// (PAYROUTER_HELM); without them they say so and skip.
package deploy
