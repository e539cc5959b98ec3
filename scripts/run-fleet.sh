#!/usr/bin/env bash
# make run-fleet: PostgreSQL (money state, in a temp dir), redis-server (breakers), the three
# simulated gateways and two payrouter instances sharing both, on configs/payrouter-redis.yaml,
# in the foreground. Ctrl-C stops everything and deletes the database.
# Ports: PostgreSQL 5432 (PG_PORT), redis 6379 (REDIS_PORT), gateways 9101-9103, instance A
# 8080 (admin 9090), instance B 8081 (admin 9091).
set -euo pipefail
cd "$(dirname "$0")/.."

# The demo's secrets, passed explicitly: the configuration has no default for any secret. They
# are published (config.DemoSecrets), so payrouter accepts them only while it listens on loopback
# (`payrouter check` warns about each). Set any of these variables to use your own.
export PAYROUTER_API_KEY="${PAYROUTER_API_KEY:-sk_test_demo}"
export PAYROUTER_ADMIN_TOKEN="${PAYROUTER_ADMIN_TOKEN:-admin_test_demo}"
export PAYWELL_API_KEY="${PAYWELL_API_KEY:-pw_test_demo}"
export DING_API_KEY="${DING_API_KEY:-dg_test_demo}"
export TRANGLO_API_KEY="${TRANGLO_API_KEY:-tg_test_demo}"
redis_port="${REDIS_PORT:-6379}"
pg_port="${PG_PORT:-5432}"
export PAYROUTER_REDIS_URL="redis://127.0.0.1:$redis_port/0"
export PAYROUTER_DATABASE_URL="postgres://payrouter@127.0.0.1:$pg_port/payrouter?sslmode=disable"

command -v redis-server >/dev/null || {
  echo "make run-fleet needs redis-server: sudo apt-get install -y redis-server (it need not be running; this starts its own)" >&2
  exit 1
}
pgbin="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)"
if [[ -z $pgbin ]] && command -v pg_ctl >/dev/null; then pgbin="$(dirname "$(command -v pg_ctl)")"; fi
[[ -n $pgbin && -x $pgbin/initdb ]] || {
  echo "make run-fleet needs PostgreSQL: sudo apt-get install -y postgresql (it need not be running; this starts its own in a temp dir)" >&2
  exit 1
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
for p in "$pg_port" "$redis_port" 9101 9102 9103 8080 8081 9090 9091; do
  if port_open "$p"; then
    echo "port $p is already in use; stop what holds it (a PostgreSQL or Redis already running? set PG_PORT or REDIS_PORT)" >&2
    exit 1
  fi
done

# PostgreSQL refuses to run as root: as root, its commands run as the postgres user that
# Debian's package creates.
pgtmp="$(mktemp -d)"
as=()
if [[ $(id -u) == 0 ]]; then as=(runuser -u postgres --); chown postgres "$pgtmp"; fi
pgctl() { "${as[@]}" "$pgbin/pg_ctl" -D "$pgtmp/data" "$@"; }

pids=()
cleanup() {
  trap - EXIT INT TERM
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  pgctl -m fast -w stop >/dev/null 2>&1 || true
  rm -rf "$pgtmp"
}
trap cleanup EXIT INT TERM

"${as[@]}" "$pgbin/initdb" -D "$pgtmp/data" -A trust -U payrouter --no-sync >"$pgtmp/initdb.log" 2>&1 ||
  { cat "$pgtmp/initdb.log" >&2; exit 1; }
pgctl -l "$pgtmp/postgres.log" -w -t 20 -o "-p $pg_port -k $pgtmp -c listen_addresses=127.0.0.1" start >/dev/null ||
  { cat "$pgtmp/postgres.log" >&2; exit 1; }
"${as[@]}" "$pgbin/createdb" -h 127.0.0.1 -p "$pg_port" -U payrouter payrouter

# wait_port PORT WHAT: wait up to 10 s for PORT, failing when a started process has exited.
wait_port() {
  for _ in $(seq 1 100); do
    if port_open "$1"; then return 0; fi
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null || { echo "a process exited during start-up (see above)" >&2; exit 1; }; done
    sleep 0.1
  done
  echo "$2 did not listen on 127.0.0.1:$1 within 10 s" >&2
  exit 1
}

redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --daemonize no --loglevel warning &
pids+=("$!")
wait_port "$redis_port" redis-server
bin/gatewaysim -paywell 127.0.0.1:9101 -ding 127.0.0.1:9102 -tranglo 127.0.0.1:9103 &
pids+=("$!")
PAYROUTER_LISTEN=127.0.0.1:8080 PAYROUTER_ADMIN_LISTEN=127.0.0.1:9090 bin/payrouter serve -config configs/payrouter-redis.yaml &
pids+=("$!")
PAYROUTER_LISTEN=127.0.0.1:8081 PAYROUTER_ADMIN_LISTEN=127.0.0.1:9091 bin/payrouter serve -config configs/payrouter-redis.yaml &
pids+=("$!")
wait_port 8080 "payrouter A"
wait_port 8081 "payrouter B"

cat <<MSG

Two payrouter instances share their money state in PostgreSQL on port $pg_port (in $pgtmp, gone
at Ctrl-C) and their breakers in the Redis on port $redis_port:
  A: storefront http://127.0.0.1:8080, admin http://127.0.0.1:9090
  B: storefront http://127.0.0.1:8081, admin http://127.0.0.1:9091

See one instance's failures open the other's breaker (paste in another terminal):

  curl -sS -X PUT http://127.0.0.1:9101/_sim/behavior -d '{"mode": "unavailable"}'
  for i in 1 2 3 4 5; do
    curl -sS -o /dev/null -w '%{http_code} ' -X POST http://127.0.0.1:8080/charge \\
      -H 'Authorization: Bearer $PAYROUTER_API_KEY' -H 'Content-Type: application/json' \\
      -H "Idempotency-Key: fleet-\$i-\$RANDOM" \\
      -d '{"amount": 1999, "currency": "USD", "payment_method": {"type": "card", "token": "tok_visa"}}'
  done; echo
  curl -sS -H 'Authorization: Bearer $PAYROUTER_ADMIN_TOKEN' http://127.0.0.1:9091/admin/breakers

B shows paywell/charge "open" though it never called paywell. Ctrl-C stops everything.
MSG
wait -n "${pids[@]}"
