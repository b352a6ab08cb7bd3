#!/usr/bin/env bash
# Respawn time of `hearth serve --isolate`: kill the engine process with SIGKILL N times (waiting for each new one),
# then print GET /engine (restart_ms_p50 / _p95: from the child's death to its successor's readiness) and the time
# from each kill until a completion request succeeds again. Loopback only.
#   bench/isolate_restart.sh [MODEL_ALIAS] [N]
# HEARTH_ARGS adds serve flags (default `--isolate-backoff-max 0`: the respawn alone, without the crash-loop wait);
# HEARTH_BIN picks the binary (default target/release/hearth), DEVICE the device (default cpu, with 2 threads).
# Needs: scripts/fetch-models, cargo build --release -p hearth-cli (or a CUDA build: bench/gpu/device_isolate.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL="${1:-smollm2-135m}"
N="${2:-10}"
PORT=18193
# shellcheck disable=SC2086
"${HEARTH_BIN:-./target/release/hearth}" serve -m "$MODEL" --device "${DEVICE:-cpu}" --threads 2 --host 127.0.0.1 \
  --port $PORT --isolate \
  ${HEARTH_ARGS:---isolate-backoff-max 0} >/tmp/hearth-isolate.log 2>&1 &
SP=$!
trap 'kill $SP 2>/dev/null || true' EXIT
for _ in $(seq 1 1500); do curl -sf http://127.0.0.1:$PORT/health >/dev/null 2>&1 && break; sleep 0.2; done
python3 - "$PORT" "$N" <<'PY'
import json, os, signal, statistics, sys, time, urllib.request
port, n = int(sys.argv[1]), int(sys.argv[2])
base = f"http://127.0.0.1:{port}"
def get(path):
    with urllib.request.urlopen(base + path, timeout=30) as r:
        return json.load(r)
def answered():
    body = json.dumps({"prompt": "Hello", "max_tokens": 1}).encode()
    req = urllib.request.Request(base + "/v1/completions", body, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status == 200
    except Exception:
        return False
# One answer before the kills: the first forward pass of a GPU build pays one-time costs (the driver compiling
# kernels into its cache) that are not a restart's.
t0 = time.monotonic()
assert answered(), "the server did not answer before the kills"
warm_ms = (time.monotonic() - t0) * 1e3
back = []
for i in range(n):
    e = get("/engine")
    pid, restarts = e["pid"], e["restarts"]
    t0 = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    while not answered():
        time.sleep(0.005)
    back.append((time.monotonic() - t0) * 1e3)
    while get("/engine")["restarts"] != restarts + 1:
        time.sleep(0.01)
e = get("/engine")
q = lambda xs, p: sorted(xs)[round((len(xs) - 1) * p)]
print(json.dumps({"kills": n, "first_answer_ms": round(warm_ms, 1), "engine": {k: e.get(k) for k in ("restarts", "restart_ms_p50", "restart_ms_p95")},
                  "kill_to_answer_ms": {"p50": round(q(back, 0.5), 1), "p95": round(q(back, 0.95), 1),
                                        "max": round(max(back), 1)}}))
PY
