#!/usr/bin/env bash
# make fuzz-short: every fuzz target of the module, each run alone (go test takes one -fuzz
# target at a time) for FUZZTIME (default 10s). A failing input is written by go test to the
# package's testdata/fuzz/FuzzX/: commit it, so that every later `go test` runs it as a seed.
#
# Any failure fails this script. (Go 1.26's fuzzing coordinator could fail a duration-bound run
# with a bare "context deadline exceeded" when the -fuzztime deadline fired, having found nothing;
# Go 1.27, the toolchain the Makefile sets, no longer does, so no such run is excused here.)
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime="${FUZZTIME:-10s}"
go="${GO:-go}"

status=0
while read -r file; do
  dir=$(dirname "$file")
  for target in $(grep -o '^func Fuzz[A-Za-z0-9_]*' "$file" | sed 's/^func //'); do
    echo "fuzz $dir $target ($fuzztime)"
    "$go" test -run '^$' -fuzz "^$target\$" -fuzztime "$fuzztime" "./$dir" || status=1
  done
done < <(grep -rl --include='*_test.go' '^func Fuzz' . | sort)
exit "$status"
