// Package e2e holds payrouter's end-to-end tests: they build cmd/payrouter and cmd/gatewaysim,
// run them as real processes on loopback ports and drive them over real sockets, asserting what
// a storefront and its operators would see during the incidents payrouter was built for
// (docs/architecture.md, Testing). The package has no code of its own; `go test -short` skips it.
package e2e
