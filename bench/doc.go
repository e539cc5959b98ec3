// Package bench measures payrouter from the outside, as a storefront sees it: real binaries,
// real loopback sockets, a closed-loop load generator (Load). It reports speed only as ratios
// against a baseline measured in the same run (DESIGN.md, Testing): the machines it runs on are
// shared and noisy, so an absolute figure means little and a time limit would only flake.
//
// The measurements are the TestBench... tests; they are skipped unless PAYROUTER_BENCH=1, which
// `make bench` sets, so that `go test ./...` stays fast:
//
//	TestBenchFastFail          (a) every breaker forced open: payrouter's 503 gateways-unavailable
//	                           against a bare echo server (bench/bare503) answering the same bytes
//	TestBenchHealthyPath       (b) POST /charge through payrouter to the simulated Paywell against
//	                           calling the simulator's POST /v1/charges directly
//	TestBenchRedisHealthyPath  (c) the same charges through two payrouters side by side, one with
//	                           its state in memory, one with state.redis_url on a redis-server the
//	                           test starts: the price of sharing state (target: at least 0.9x the
//	                           requests per second; printed, never asserted)
//	TestBenchRedisCommands     (d) the Redis commands a charge costs, by command, from the server's
//	                           INFO commandstats, less the idle instance's background commands
//	                           (health ping, the fleet's refresh), counted apart with no traffic
//	TestBenchBreakerAgreement  (e) two payrouters on one Redis: failing charges through A until its
//	                           paywell/charge breaker opens, then the time until B's admin API
//	                           shows it open (p50, p90, p99, max over the rounds)
//	TestBenchHedge             (f) a route [paywell, ding] with paywell answering 2% of its calls
//	                           1s late: no hedge against hedge {after: p95}, p50/p99 and gateway
//	                           calls per charge, for captured and for authorize-only charges
//
// Each baseline and its subject run alternately (A B B A A B ...) after a warm-up of both, so that
// drift on the machine hits both alike; the report shows each pair's ratio beside the pooled one,
// so a reader can see how much the noise moved them. (d) and (e) count and time events rather
// than compare two servers, so they have no baseline.
//
// The same Redis measurements without HTTP are in resilience/fleetbench_test.go, which `make
// bench` also runs: TestBenchFleetAgreement (B's breaker opening after A's, in process) and
// TestBenchBreakerOnRedis (payrouter's Guard with a Fleet against gobreaker's
// DistributedCircuitBreaker on the same Redis, 16 callers of a 1 ms gateway).
package bench
