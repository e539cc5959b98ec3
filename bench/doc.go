// Package bench measures payrouter from the outside, as a storefront sees it: real binaries,
// real loopback sockets, a closed-loop load generator (Load). It reports speed only as ratios
// against a baseline measured in the same run (docs/architecture.md, Testing): the machines it runs
// on are shared and noisy, so an absolute figure means little and a time limit would only flake.
//
// The measurements are the TestBench... tests; they are skipped unless PAYROUTER_BENCH=1, which
// `make bench` sets, so that `go test ./...` stays fast:
//
//	TestBenchFastFail             (a) every breaker forced open: payrouter's 503
//	                              gateways-unavailable against a bare echo server (bench/bare503)
//	                              answering the same bytes; with 1 and 16 workers of Load, and
//	                              with wrk at 20 connections when wrk is installed (skipped,
//	                              saying so, when not)
//	TestBenchHealthyPath          (b) POST /charge through payrouter to the simulated Paywell
//	                              against calling the simulator's POST /v1/charges directly
//	TestBenchDatabaseHealthyPath  (c) the same charges through two payrouters side by side, one
//	                              with its money state in memory, one with state.database_url on
//	                              a database of pgtest's throwaway PostgreSQL: the price of a
//	                              durable, shared home for money (req/s and latency ratios)
//	TestBenchDatabaseRoundTrips   (d) the database statements (each a round trip) a request costs
//	                              on the database store, by statement, with the WAL they write: a
//	                              charge on the healthy path, a replay of an answered key, a 402
//	                              decline, a full refund of a captured charge (each of its own,
//	                              made beforehand), and the worker's later work on each refund's
//	                              task; from PostgreSQL's own pg_stat_statements, less the idle
//	                              instance's background statements (the reconciler's and the
//	                              worker's polls), counted apart over the same time; and the
//	                              commits that wrote (transaction ids handed out) and the
//	                              server's WAL, per request
//	TestBenchBreakerAgreement     (e) two payrouters on one Redis (and one database): failing
//	                              charges through A until its paywell/charge breaker opens, then
//	                              the time until B's admin API shows it open (p50, p90, p99, max)
//	TestBenchHedge                (f) a route [paywell, ding] with paywell answering 2% of its
//	                              calls 1s late: no hedge against hedge {after: p95}, p50/p99 and
//	                              gateway calls per charge, for captured and authorize-only charges
//	TestBenchFastFailDatabase     (g) (a) on the database store: every breaker forced open, the 503
//	                              of a payrouter on state.database_url against one in memory
//	                              (req/s ratio), and the database statements per fast-failed
//	                              charge, by statement, counted as in (d) (issue 11's goal: none)
//	TestBenchDatabaseTuning       two payrouters on one database, the defaults against the URL
//	                              parameters of PAYROUTER_BENCH_DATABASE_PARAMS (pool_max_conns,
//	                              commit_delay): how docs/postgresql.md sizes them; run only
//	                              when that is set
//	TestBenchScale                (h) cost as the work grows (scale_test.go): charges/s with 1
//	                              against 100 and 10,000 routes, 3 against 100 gateways, memstore
//	                              empty against holding PAYROUTER_BENCH_MEMSTORE_CHARGES charges
//	                              (default 1,000,000), PostgreSQL empty against holding
//	                              PAYROUTER_BENCH_ROWS charges and as many events (default
//	                              10,000,000; filled with one generate_series INSERT per table,
//	                              fill_test.go), each against its smallest size; and the memory
//	                              one stored charge takes in each store
//	TestBenchFleet                (i) two instances against one (fleet_test.go): charges/s with
//	                              every worker on A against half on A and half on B, on one
//	                              PostgreSQL and one Redis; transactions, WAL bytes and Redis
//	                              commands per charge, and each instance's connections, the
//	                              figures docs/postgresql.md reads a fleet of twenty from
//
// (a), (b), (c) and (g) end with a "goal" line: the ratios their goals are stated in, beside the goals.
// The in-process figures with goals are printed by resilience's TestBenchGuardGoals (Guard.Do
// admitted and refused) and httpapi's TestBenchChargeGoals (one charge's allocations), which
// `make bench` runs too.
//
// Each baseline and its subject run alternately (A B B A A B ...) after a warm-up of both, so that
// drift on the machine hits both alike; the report shows each pair's ratio beside the pooled one,
// so a reader can see how much the noise moved them. (d), (e) and the counts of (g) count and time
// events rather than compare two servers, so they have no baseline.
//
// The database benchmarks share one PostgreSQL per test binary (pgstore/pgtest, started from
// TestMain only when one of them runs), each test with a database of its own; pgtest runs it
// durable (pgtest.Durable: fsync and synchronous_commit on, as docs/postgresql.md recommends), so
// a commit that wrote waits for its WAL to reach this machine's disk, as in production. To count
// statements the first of them to run loads pg_stat_statements into it (shared_preload_libraries,
// set with ALTER SYSTEM, then a restart), so that all of them measure the same server; without
// the extension installed they count transactions (pg_stat_database) instead, the same number
// for payrouter's single-statement calls, with no breakdown.
//
// The Redis measurements without HTTP (Redis holds only breakers, forced states and leases) are
// in resilience/fleetbench_test.go, which `make bench` also runs: TestBenchFleetAgreement (B's
// breaker opening after A's, in process) and TestBenchBreakerOnRedis (payrouter's Guard with a
// Fleet against gobreaker's DistributedCircuitBreaker on the same Redis, 16 callers of a 1 ms
// gateway).
package bench
