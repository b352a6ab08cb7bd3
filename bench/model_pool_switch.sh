#!/usr/bin/env bash
# Model switch time of a pool of two (`serve -m smollm2-135m -m gemma3-270m --model-pool 1`), with spawn-overlap on
# and off: requests alternate between the models, so each one starts its model's engine; prints the client-side
# time of each such request (1 generated token) per model, medians of SWITCHES switches. Loopback only.
#   bench/model_pool_switch.sh [SWITCHES]
# Needs: scripts/fetch-models, cargo build --release -p hearth-cli.
set -euo pipefail
cd "$(dirname "$0")/.."
SWITCHES="${1:-6}"
PORT=18194
for overlap in on off; do
  ./target/release/hearth serve -m smollm2-135m -m gemma3-270m --model-pool 1 --model-pool-overlap $overlap \
    --device cpu --threads 2 --host 127.0.0.1 --port $PORT >/tmp/hearth-pool.log 2>&1 &
  SP=$!
  for _ in $(seq 1 600); do curl -sf http://127.0.0.1:$PORT/health >/dev/null 2>&1 && break; sleep 0.2; done
  python3 - "$PORT" "$SWITCHES" "$overlap" <<'PY'
import json, statistics, sys, time, urllib.request
port, n, overlap = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
def ask(model):
    body = json.dumps({"model": model, "prompt": "Hello", "max_tokens": 1}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body, {"Content-Type": "application/json"})
    t0 = time.monotonic()
    with urllib.request.urlopen(req, timeout=120) as r:
        assert r.status == 200
    return (time.monotonic() - t0) * 1e3
times = {"smollm2-135m": [], "gemma3-270m": []}
ask("smollm2-135m")
for i in range(n):
    m = "gemma3-270m" if i % 2 == 0 else "smollm2-135m"
    times[m].append(ask(m))
    time.sleep(0.5)  # let the evicted engine leave
print(json.dumps({"overlap": overlap, "switch_ms_median": {m: round(statistics.median(v), 1) for m, v in times.items()},
                  "switch_ms": {m: [round(x, 1) for x in v] for m, v in times.items()}}))
PY
  kill $SP; wait $SP 2>/dev/null || true
done
