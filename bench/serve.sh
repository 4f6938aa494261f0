#!/usr/bin/env bash
# `make bench` endpoint figures (grpo-rollout --serve, doc/environments.md): the
# same episodes generated twice by one worker at the bench shape (C512 L8, byte
# vocabulary, random weights): once through an environment program (--env), once
# through the OpenAI-compatible endpoint with 64 concurrent agents
# (validation/agent/calc_agent.py: the openai client, one chat request per turn,
# then the reward). Same rows, seeds and sampling, so the same tokens; prints
# both generated tokens/s (from the worker's shard lines) and the ratio: what
# the HTTP front end costs; then again with lean clients (bench/serve_lean.py,
# http.client), which measure the endpoint rather than the Python SDK. Knobs: BENCH_SHARDS (4 shards of 64 episodes),
# BENCH_TOKENS (64 new tokens a turn), OMP_NUM_THREADS (2).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
SHARDS=${BENCH_SHARDS:-4}
TOK=${BENCH_TOKENS:-64}
source tests/integration/lib.sh
PY=$(venv)/bin/python
M="$WORK/model"
"$BIN/grpo-ctl" init-model --out "$M" --shape bench --vocab 257 --tokenizer data/tokenizers/bytes --dtype f32 \
  --max-positions 512 --seed 1 >/dev/null
cp data/calc/chat_template.jinja "$M/"
"$PY" -c 'import json
for i in range(1024): print(json.dumps({"prompt": "%d*%d" % (100 + i % 900, 10 + i % 90), "answer": "0"}))' \
  >"$WORK/rows.jsonl"
cat >"$WORK/one_turn.py" <<'PYEOF'
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m["type"] == "start":
        print(json.dumps({"id": m["id"], "messages": [{"role": "user", "content": m["row"]["prompt"]}]}), flush=True)
    elif m["type"] in ("step", "end"):
        print(json.dumps({"id": m["id"], "reward": 0.0}), flush=True)
PYEOF
# One adapter version to generate with (the trainer publishes v0, then goes).
"$BIN/grpo-train" --model "$M" --run "file://$WORK/run" --group-size 4 --groups-per-step 16 --steps 1000 \
  --lora-rank 8 --rollout-timeout 600 --metrics "" >"$WORK/train.log" 2>&1 &
T=$!
for _ in $(seq 1 200); do [ -f "$WORK/run/adapters/v00000000.h5" ] && break; sleep 0.1; done
kill $T; wait $T 2>/dev/null || true
W=(--model "$M" --run "file://$WORK/run" --dataset "$WORK/rows.jsonl" --group-size 4 --groups-per-shard 16
  --batch-size 64 --max-new-tokens "$TOK" --max-turns 1 --max-episode-tokens $((TOK + 8)) --max-ahead 0 --seed 5
  --max-shards "$SHARDS")
rate() {  # LOG: generated tokens/s over the shards (each line's tok/s weighted by... its tokens: mean of the lines)
  grep -o 'reward [0-9.]*, [0-9]* tok/s' "$1" | awk '{ s += $3; n++ } END { if (n) printf "%.0f", s / n; else print 0 }'
}
/usr/bin/time -o "$WORK/env.cpu" -f "%U %S %e" "$BIN/grpo-rollout" "${W[@]}" --worker-id env \
  --env "python3 $WORK/one_turn.py" >"$WORK/env.log" 2>&1
PORT=$(free_port)
/usr/bin/time -o "$WORK/serve.cpu" -f "%U %S %e" "$BIN/grpo-rollout" "${W[@]}" --worker-id srv \
  --serve "127.0.0.1:$PORT" >"$WORK/serve.log" 2>&1 &
S=$!
for _ in $(seq 1 300); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 0.1; done
/usr/bin/time -f "  the agents used %U s user + %S s system CPU in %e s" "$PY" validation/agent/calc_agent.py --base "http://127.0.0.1:$PORT/v1" --model model --agents 64 \
  --episodes $((SHARDS * 64)) --give-up 5 | tee "$WORK/agents.out"
wait $S || { echo "serve: the worker failed:"; tail -3 "$WORK/serve.log"; exit 1; }
# The same with lean clients (http.client, no SDK): the endpoint's own capacity.
LPORT=$(free_port)
/usr/bin/time -o "$WORK/lean.cpu" -f "%U %S %e" "$BIN/grpo-rollout" "${W[@]}" --worker-id lean \
  --serve "127.0.0.1:$LPORT" >"$WORK/lean.log" 2>&1 &
L=$!
for _ in $(seq 1 300); do curl -sf "http://127.0.0.1:$LPORT/health" >/dev/null && break; sleep 0.1; done
/usr/bin/time -f "  the lean clients used %U s user + %S s system CPU in %e s" \
  "$PY" bench/serve_lean.py "http://127.0.0.1:$LPORT/v1" model 64 $((SHARDS * 64))
wait $L || { echo "serve: the worker failed:"; tail -3 "$WORK/lean.log"; exit 1; }
E=$(rate "$WORK/env.log")
V=$(rate "$WORK/serve.log")
Q=$(rate "$WORK/lean.log")
echo "serve: $SHARDS shards of 64 one-turn episodes, $TOK new tokens a turn, bench shape, $OMP_NUM_THREADS threads"
echo "  environment program (--env):        $E generated tok/s"
echo "  endpoint, 64 openai-client agents: $V generated tok/s"
echo "  endpoint, 64 lean clients:         $Q generated tok/s"
awk -v e="$E" -v v="$V" -v q="$Q" 'BEGIN { if (e > 0) printf "  endpoint / program:                 %.2fx (openai agents), %.2fx (lean clients)\n", v / e, q / e }'
# The worker's own CPU for the same tokens: what serving costs it, apart from
# the agents' share of the cores (their line above).
read -r eu es ee <"$WORK/env.cpu"
read -r su ss se <"$WORK/serve.cpu"
read -r lu ls le <"$WORK/lean.cpu"
awk -v a="$eu" -v b="$es" -v c="$su" -v d="$ss" -v f="$lu" -v g="$ls" 'BEGIN { printf "  worker CPU for the same episodes:   %.1f s (program), %.1f s (endpoint, openai agents), %.1f s (lean): %.2fx, %.2fx\n", a + b, c + d, f + g, (c + d) / (a + b), (f + g) / (a + b) }'
