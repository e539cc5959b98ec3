#!/usr/bin/env bash
# make vulncheck: govulncheck over every package of the module, with the toolchain the Makefile
# sets (the standard library's version is the go command's), against a copy of the Go
# vulnerability database built from the golang.org/x/vulndb module. It fails when a known
# vulnerability is reachable from payrouter's code (a called symbol of an affected version of a
# module, or of the standard library); one only imported or required is listed and passes.
#
# Nothing but the Go module proxy is reached: the database comes as a module (its data/osv holds
# one OSV file per vulnerability) and vulndb's own cmd/indexdb lays it out as the v1 database that
# `govulncheck -db file://DIR` reads (index/db.json, index/modules.json, index/vulns.json,
# ID/GO-YYYY-NNNN.json). Both versions are pinned below: to take newer vulnerabilities in, set
# VULNDB_VERSION to the pseudo-version that `go list -m golang.org/x/vulndb@latest` names (the
# module has no tagged versions). The built database and govulncheck are kept under
# VULNCHECK_CACHE, one directory a version, so a second run only scans.
set -euo pipefail
cd "$(dirname "$0")/.."
go="${GO:-go}"

GOVULNCHECK_VERSION=v1.9.0                          # golang.org/x/vuln/cmd/govulncheck
VULNDB_VERSION=v0.0.0-20261105234957-e22db6528018   # golang.org/x/vulndb: its data/osv

cache="${VULNCHECK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/payrouter/vulncheck}"
db="$cache/vulndb-$VULNDB_VERSION"
tools="$cache/govulncheck-$GOVULNCHECK_VERSION"
mkdir -p "$cache"

# The tools are built outside this module (pkg@version ignores go.mod), so neither x/vuln nor
# x/vulndb, with its many dependencies, becomes one of payrouter's. GOFLAGS is cleared for them:
# a -mod flag in it would be refused for pkg@version.
if [[ ! -x $tools/govulncheck ]]; then
  echo "vulncheck: go install golang.org/x/vuln/cmd/govulncheck@$GOVULNCHECK_VERSION"
  GOFLAGS= GOBIN="$tools" "$go" install "golang.org/x/vuln/cmd/govulncheck@$GOVULNCHECK_VERSION"
fi

if [[ ! -f $db/index/modules.json ]]; then
  echo "vulncheck: building the vulnerability database from golang.org/x/vulndb@$VULNDB_VERSION (once per version)"
  # go mod download in an empty directory: outside any module, it touches no go.mod or go.sum.
  src=$(cd "$cache" && GOFLAGS= "$go" mod download -json "golang.org/x/vulndb@$VULNDB_VERSION" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  if [[ -z $src || ! -d $src/data/osv ]]; then
    echo "vulncheck: golang.org/x/vulndb@$VULNDB_VERSION has no data/osv (module directory: '${src}')" >&2
    exit 1
  fi
  # Built beside its final place and moved there whole: an interrupted build leaves no half a
  # database that a later run would take for a whole one.
  rm -rf "$db.tmp"
  GOFLAGS= "$go" run "golang.org/x/vulndb/cmd/indexdb@$VULNDB_VERSION" -vulns "$src/data/osv" -out "$db.tmp"
  n=$(find "$db.tmp/ID" -name 'GO-*.json' | wc -l)
  if [[ ! -f $db.tmp/index/modules.json || $n -eq 0 ]]; then
    echo "vulncheck: cmd/indexdb wrote no database in $db.tmp" >&2
    exit 1
  fi
  mv "$db.tmp" "$db"
  echo "vulncheck: $n vulnerabilities in $db"
fi
# A bumped version leaves the older copies behind: they are of no further use.
find "$cache" -mindepth 1 -maxdepth 1 \( -name 'vulndb-*' ! -path "$db" -o -name 'govulncheck-*' ! -path "$tools" \) -exec rm -rf {} +

echo "vulncheck: govulncheck $GOVULNCHECK_VERSION with $("$go" env GOVERSION), database golang.org/x/vulndb@$VULNDB_VERSION"
exec "$tools/govulncheck" -db "file://$db" ./...
