#!/usr/bin/env bash
# Load test of `specula serve` on loopback with Locust (PyPI): for 1, 2, 4 and
# 8 concurrent clients, with and without speculation, a closed loop of
# streamed chat completions over the bench prompts (bench/prompts.jsonl,
# -p another set).  Prints a markdown table (requests/s, aggregate tok/s,
# p50/p95 TTFT and ITL, acceptance) and leaves Locust's CSVs under
# build/loadtest/.
#
#   scripts/loadtest.sh [-m MODEL] [-d SECONDS] [-n MAX_TOKENS] [-c "1 2 4 8"] [-s "none ngram"] [-b BINARY]
#                       [-x "EXTRA SERVER OPTIONS"]
#
# Needs a release build (make BUILD=release; -b tests another binary, e.g.
# an older commit's for an A/B) and installs locust into .venv.
set -euo pipefail
cd "$(dirname "$0")/.."
model=smollm2-135m; dur=60; maxtok=64; clients="1 2 4 8"; methods="none ngram"
prompts=bench/prompts.jsonl
bin=build/release/specula
extra=""
while getopts "m:d:n:c:s:p:b:x:" o; do
    case $o in
        m) model=$OPTARG ;; d) dur=$OPTARG ;; n) maxtok=$OPTARG ;; c) clients=$OPTARG ;;
        s) methods=$OPTARG ;; p) prompts=$OPTARG ;; b) bin=$OPTARG ;; x) extra=$OPTARG ;;
        *) echo "usage: $0 [-m MODEL] [-d SECONDS] [-n MAX_TOKENS] [-c CLIENTS] [-s METHODS] [-p PROMPTS] [-b BINARY] [-x SERVER_OPTIONS]" >&2; exit 2 ;;
    esac
done
# the server offers none, ngram, suffix and its --spec method: a method
# beyond those (eagle, self, ...) becomes that --spec.  Only one can: a
# second would be refused on every request (a table of errors), so it is
# refused here instead.
spec=ngram; spec_set=""
for m in $methods; do
    case "$m" in
        none|ngram|suffix) ;;
        *) if [ -n "$spec_set" ] && [ "$m" != "$spec" ]; then
               echo "loadtest: one server offers one method beyond none, ngram and suffix: run '$spec' and '$m' separately" >&2
               exit 2
           fi
           spec=$m; spec_set=1 ;;
    esac
done
[ -x "$bin" ] || { echo "loadtest: $bin missing; run make BUILD=release" >&2; exit 1; }
[ -f "$prompts" ] || { echo "loadtest: prompts file $prompts not found (-p FILE)" >&2; exit 1; }
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -c "import locust" 2>/dev/null || {
    echo "loadtest: installing locust into .venv" >&2
    .venv/bin/pip install -q --disable-pip-version-check "locust>=2.20"
}
out=build/loadtest/$model
rm -rf "$out"; mkdir -p "$out"
maxc=0; for c in $clients; do [ "$c" -gt "$maxc" ] && maxc=$c; done

# one server for every run: as many slots as the most clients, so no one queues
# shellcheck disable=SC2086  # $extra: options, split on purpose
"$bin" serve -m "$model" --port 0 --parallel "$maxc" --spec "$spec" $extra > "$out/server.log" 2>&1 &
srv=$!
trap 'kill $srv 2>/dev/null; wait $srv 2>/dev/null || true' EXIT
port=""
for _ in $(seq 600); do
    port=$(grep -oE 'listening on http://127\.0\.0\.1:[0-9]+' "$out/server.log" | grep -oE '[0-9]+$' || true)
    [ -n "$port" ] && break
    kill -0 $srv 2>/dev/null || { cat "$out/server.log" >&2; exit 1; }
    sleep 0.1
done
[ -n "$port" ] || { echo "loadtest: server did not start" >&2; exit 1; }
url=http://127.0.0.1:$port
# warm-up: page in the weights, measure the verify-cost curve the adaptive
# controller uses (first speculative request)
for m in none ngram; do
    curl -sf "$url/v1/chat/completions" -H 'Content-Type: application/json' \
        -d "{\"messages\":[{\"role\":\"user\",\"content\":\"Say hello.\"}],\"max_tokens\":16,\"speculative\":{\"method\":\"$m\"}}" >/dev/null
done

for m in $methods; do
    for c in $clients; do
        echo "loadtest: $model, $c client(s), speculation $m, ${dur}s" >&2
        SPECULA_LOAD_METHOD=$m SPECULA_LOAD_MAX_TOKENS=$maxtok SPECULA_LOAD_MODEL=$model \
        SPECULA_LOAD_PROMPTS=$prompts SPECULA_LOAD_OUT=$out/$m-$c.json \
            .venv/bin/locust -f bench/load/locustfile.py --headless --host "$url" -u "$c" -r "$c" \
                -t "${dur}s" --stop-timeout 120 --csv "$out/$m-$c" --only-summary \
                > "$out/$m-$c.log" 2>&1 || true
    done
done
.venv/bin/python - "$out" "$model" "$dur" "$maxtok" "$clients" "$methods" <<'PY'
import csv, json, os, sys
out, model, dur, maxtok, clients, methods = sys.argv[1:]
print(f"model {model}, {dur} s per run, max_tokens {maxtok}, temperature 0, streamed chat\n")
print("| speculation | clients | requests | req/s | tok/s | TTFT p50 (ms) | TTFT p95 (ms) | ITL p50 (ms) | ITL p95 (ms) | acceptance | errors |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for m in methods.split():
    for c in clients.split():
        t = json.load(open(f"{out}/{m}-{c}.json"))
        rows = {r["Name"]: r for r in csv.DictReader(open(f"{out}/{m}-{c}_stats.csv"))}
        span = (t["last_response"] or 0) - (t["first_request"] or 0)
        rps = t["requests"] / span if span > 0 else 0
        tps = t["completion_tokens"] / span if span > 0 else 0
        acc = f"{100 * t['accepted'] / t['drafted']:.0f}%" if t["drafted"] else "-"
        q = lambda n, p: rows[n][p] if n in rows else "-"
        print(f"| {m} | {c} | {t['requests']} | {rps:.2f} | {tps:.1f} | {q('TTFT','50%')} | {q('TTFT','95%')} | "
              f"{q('ITL','50%')} | {q('ITL','95%')} | {acc} | {t['errors']} |")
PY
