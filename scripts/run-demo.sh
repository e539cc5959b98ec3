#!/usr/bin/env bash
# make run: the simulated gateways and payrouter on the demo configuration, in the foreground.
# Ctrl-C stops both. Ports: gateways 9101-9103 and the simulated Stripe 9104 (in no route of the
# demo until its gateway is uncommented in configs/payrouter.yaml), storefront 8080, admin 9090.
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
export STRIPE_SECRET_KEY="${STRIPE_SECRET_KEY:-sk_test_stripe_demo}"

pids=()
cleanup() {
  trap - EXIT INT TERM
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM

bin/gatewaysim -paywell 127.0.0.1:9101 -ding 127.0.0.1:9102 -tranglo 127.0.0.1:9103 -stripe 127.0.0.1:9104 &
pids+=("$!")
bin/payrouter serve -config configs/payrouter.yaml &
pids+=("$!")

# Wait for the storefront port with bash alone: the machine may have nothing but Go.
up=no
for _ in $(seq 1 100); do
  if (exec 3<>/dev/tcp/127.0.0.1/8080) 2>/dev/null; then up=yes; break; fi
  for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null || { echo "a process exited during start-up (see above)" >&2; exit 1; }; done
  sleep 0.1
done
[[ $up == yes ]] || { echo "payrouter did not listen on 127.0.0.1:8080 within 10 s" >&2; exit 1; }

cat <<MSG

payrouter is up: storefront http://127.0.0.1:8080, admin http://127.0.0.1:9090.
Charge a card (paste this in another terminal):

  curl -sS -X POST http://127.0.0.1:8080/charge \\
    -H 'Authorization: Bearer $PAYROUTER_API_KEY' -H 'Content-Type: application/json' \\
    -H "Idempotency-Key: demo-\$RANDOM" \\
    -d '{"amount": 1999, "currency": "USD", "payment_method": {"type": "card", "token": "tok_visa"}}'

Watch the breakers:  curl -sS -H 'Authorization: Bearer $PAYROUTER_ADMIN_TOKEN' http://127.0.0.1:9090/admin/breakers
Break paywell:       curl -sS -X PUT http://127.0.0.1:9101/_sim/behavior -d '{"mode": "unavailable"}'
Ctrl-C stops everything.
MSG
wait -n "${pids[@]}"
