#!/usr/bin/env bash
# Writes deploy/.env for deploy/compose.yaml: a random secret for each variable it needs (32
# random bytes, hex), readable by its owner only. An existing deploy/.env is kept: delete it to
# start over (the PostgreSQL volume keeps the first password; `compose down -v` drops it).
set -euo pipefail
cd "$(dirname "$0")"
if [[ -e .env ]]; then
  echo "deploy/.env exists; kept as it is" >&2
  exit 0
fi
umask 077
{
  echo "# deploy/compose.yaml's secrets, written by deploy/compose-secrets.sh. Never commit this file."
  for v in PAYROUTER_API_KEY PAYROUTER_ADMIN_TOKEN POSTGRES_PASSWORD PAYWELL_API_KEY DING_API_KEY TRANGLO_API_KEY GRAFANA_ADMIN_PASSWORD; do
    echo "$v=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')"
  done
} >.env
echo "wrote deploy/.env (mode 0600): the storefront's key is PAYROUTER_API_KEY, the admin token PAYROUTER_ADMIN_TOKEN, Grafana's admin password GRAFANA_ADMIN_PASSWORD"
