#!/usr/bin/env bash
# The alerting rules: `promtool check rules` (syntax, PromQL, templates), then
# `promtool test rules` (the unit tests of configs/prometheus/alerts_test.yml).
# Exits non-zero when either fails, 1 with a clear message when promtool is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v promtool >/dev/null 2>&1; then
  echo "check-alerts: promtool not found; install it with: apt-get install prometheus (Debian's package ships promtool)" >&2
  exit 1
fi

promtool check rules configs/prometheus/alerts.yml
promtool test rules configs/prometheus/alerts_test.yml
