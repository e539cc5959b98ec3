#!/usr/bin/env bash
# make test: every check of the repository, with what each took.
#
#   1. the static checks, side by side: go vet, govulncheck (make vulncheck), the alert rules'
#      promtool tests (make alerts) and the API spec's lint and generated clients (make
#      api-clients). They share nothing, and most of their time is spent waiting on the Go module
#      proxy and the npm registry or compiling tools, so they run at once; each one's output is
#      kept in a file and printed whole, in order, when they are done.
#   2. every Go test with -race (unit, conformance, the stores on a real PostgreSQL and Redis,
#      e2e, the dashboard check): alone, because many e2e tests measure a real process's behaviour
#      in time (a probe's margin, a cooldown) and a busy machine would only make them wait.
#   3. the packaging checks (make package) and every fuzz target for FUZZTIME (make fuzz-short),
#      side by side: building images is mostly disk, fuzzing mostly CPU.
#   4. the contract suite (make contract), alone, for the same reason as 2.
#
# Any failing step fails the run, after the steps of its stage are done; the failures are named
# at the end. Called by the Makefile with GO, MAKE and PAYROUTER_CONTRACT_SUITE set.
set -uo pipefail
cd "$(dirname "$0")/.."
go="${GO:-go}"
make="${MAKE:-make}"

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
failed=()
start=$SECONDS

took() { printf 'make test: %-12s %s in %ds\n' "$1" "$2" "$3"; }

# together NAME CMD... [-- NAME CMD...]...: runs each command in the background with its output
# in a file, waits for all, prints each output in order, and records the ones that failed.
together() {
  local names=() pids=() name cmd=()
  while (($#)); do
    name=$1; shift; cmd=()
    while (($#)) && [[ $1 != -- ]]; do cmd+=("$1"); shift; done
    (($#)) && shift
    names+=("$name")
    ( t=$SECONDS; "${cmd[@]}"; rc=$?; echo $((SECONDS - t)) >"$logs/$name.took"; exit $rc ) >"$logs/$name" 2>&1 &
    pids+=("$!")
  done
  local i rcs=()
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}"; rcs[i]=$?
  done
  for i in "${!names[@]}"; do
    name=${names[$i]}
    echo "=== $name"
    cat "$logs/$name"
    if ((rcs[i] == 0)); then took "$name" ok "$(cat "$logs/$name.took")"; else took "$name" FAILED "$(cat "$logs/$name.took")"; failed+=("$name"); fi
  done
}

# alone NAME CMD...: one step, its output as it comes.
alone() {
  local name=$1 t0=$SECONDS rc; shift
  echo "=== $name"
  "$@"; rc=$?
  if ((rc == 0)); then took "$name" ok $((SECONDS - t0)); else took "$name" FAILED $((SECONDS - t0)); failed+=("$name"); fi
}

together vet "$go" vet ./... -- vulncheck "$make" --no-print-directory vulncheck \
  -- alerts bash scripts/check-alerts.sh -- api-clients bash scripts/check-api-clients.sh
alone go-test "$go" test -race -count=1 -timeout 20m ./...
together package "$make" --no-print-directory package -- fuzz-short "$make" --no-print-directory fuzz-short
alone contract "$make" --no-print-directory contract

if ((${#failed[@]})); then
  echo "make test: FAILED (${failed[*]}) after $((SECONDS - start))s"
  exit 1
fi
echo "make test: ok in $((SECONDS - start))s"
