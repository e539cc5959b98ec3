// Package bench measures payrouter from the outside, as a storefront sees it: real binaries,
// real loopback sockets, a closed-loop load generator (Load). It reports speed only as ratios
// against a baseline measured in the same run (DESIGN.md, Testing): the machines it runs on are
// shared and noisy, so an absolute figure means little and a time limit would only flake.
//
// The measurements are the TestBench... tests; they are skipped unless PAYROUTER_BENCH=1, which
// `make bench` sets, so that `go test ./...` stays fast:
//
//	TestBenchFastFail     every breaker forced open: payrouter's 503 gateways-unavailable against
//	                      a bare echo server (bench/bare503) answering the same bytes
//	TestBenchHealthyPath  POST /charge through payrouter to the simulated Paywell against calling
//	                      the simulator's POST /v1/charges directly
//
// Each baseline and its subject run alternately (A B B A A B ...) after a warm-up of both, so that
// drift on the machine hits both alike; the report shows each pair's ratio beside the pooled one,
// so a reader can see how much the noise moved them.
package bench
