#!/usr/bin/env bash
# make test: every check of the repository, in the order that takes least time on a small
# machine, with the time of each step at the end.
#
# The checks that mostly wait on the network or do little (go vet, govulncheck, the alert rules'
# promtool tests, the API spec's lint and clients, which fetch from the module proxy and npm)
# run beside the Go tests, each with its output kept and shown when it ends; the Go tests (unit,
# stores, e2e, with -race) run alone in the foreground otherwise, since the e2e tests measure
# real processes. The packaging checks, the fuzz targets and the contract suite follow them, one
# after the other: each uses every core. Any failure fails the run, after every step has ended.
set -uo pipefail
cd "$(dirname "$0")/.."
make="${MAKE:-make}"
go="${GO:-go}"

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
declare -a names=() times=() results=()
failed=0

record() { # record NAME SECONDS STATUS
  names+=("$1"); times+=("$2"); results+=("$3")
  [[ $3 == ok ]] || failed=1
}

step() { # step NAME COMMAND...: run in the foreground
  local name=$1 start=$SECONDS; shift
  echo "== make test: $name"
  if "$@"; then record "$name" $((SECONDS - start)) ok; else record "$name" $((SECONDS - start)) FAILED; fi
}

# The side steps: started now, each in the background with its output in a file.
declare -A pids=() began=()
side() { # side NAME COMMAND...
  local name=$1; shift
  began[$name]=$SECONDS
  ( "$@" >"$logs/$name.log" 2>&1; echo $? >"$logs/$name.rc"; echo $SECONDS >"$logs/$name.end" ) &
  pids[$name]=$!
}
side_wait() {
  local name
  for name in vet vulncheck alerts api-clients; do
    wait "${pids[$name]}"
    echo "== make test: $name (ran beside the Go tests)"
    cat "$logs/$name.log"
    local rc end
    rc=$(cat "$logs/$name.rc"); end=$(cat "$logs/$name.end")
    if [[ $rc == 0 ]]; then record "$name" $((end - began[$name])) ok; else record "$name" $((end - began[$name])) FAILED; fi
  done
}

side vet "$go" vet ./...
side vulncheck "$make" --no-print-directory vulncheck
side alerts bash scripts/check-alerts.sh
side api-clients bash scripts/check-api-clients.sh
step "go test -race ./..." env PAYROUTER_CONTRACT_SUITE="$CONTRACT_SUITE_DIR" "$go" test -race -count=1 -timeout 20m ./...
side_wait
step "package" "$make" --no-print-directory package
step "fuzz-short" "$make" --no-print-directory fuzz-short
step "contract" "$make" --no-print-directory contract

echo "== make test: the steps"
for i in "${!names[@]}"; do
  printf '  %-22s %5ss  %s\n' "${names[$i]}" "${times[$i]}" "${results[$i]}"
done
echo "  total                  $((SECONDS))s"
exit "$failed"
