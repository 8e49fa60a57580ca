#!/usr/bin/env bash
# Starts the dev server on a spare port with its request log captured, runs
# the load mix against it, stops it, and prints the two tables: latency per
# endpoint, and DynamoDB calls per request per route (from the log).
# Extra arguments go to the load program (e.g. -rate 200 -duration 30s).
set -euo pipefail
cd "$(dirname "$0")/../.."

addr=127.0.0.1:18080
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Built first, so the pid below is the server itself and stopping it is exact.
go build -o "$work/devserver" ./scripts/devserver
"$work/devserver" -addr "$addr" -sweep 1h >"$work/banner.txt" 2>"$work/devserver.log" &
pid=$!
stop() { kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true; }
trap 'stop; rm -rf "$work"' EXIT

for _ in $(seq 1 600); do
  if curl -fsS -o /dev/null "http://$addr/v1/openapi.json" 2>/dev/null; then break; fi
  if ! kill -0 "$pid" 2>/dev/null; then cat "$work/devserver.log" >&2; exit 1; fi
  sleep 0.5
done

go run ./scripts/load -url "http://$addr" -log "$work/devserver.log" "$@"
stop
