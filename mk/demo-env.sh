#!/usr/bin/env bash
# `make demo-env`: GRPO on multi-turn, tool-using episodes (doc/environments.md).
# The task (data/calc): multiply a three-digit number by a two-digit one, which a
# tiny model cannot do in its head; an environment program (data/calc/env.py)
# offers a tool mul(a, b), answers the model's calls with the product and rewards
# the right final answer. A tiny byte-level model is warmed up on the tool format
# with `grpo-train --sft --full` (each problem's two assistant turns: the call,
# then the answer after the tool's result) until PAIL_DEMO_SFT_TARGET of held-out
# turns are exact; then one trainer and two `grpo-rollout --env` workers run on a
# file:// bucket, on problems the warm-up never saw. Ends with
#   demo-env: held-out accuracy A% -> B% (greedy, 1,000 problems); training reward R0 -> R1 ...
# (A and B through the same program, grpo-ctl eval --env) and an SVG of the reward curve.
# `make demo-agent` (DEMO_AGENT=1) runs the same with an agent as the environment: the
# workers serve the OpenAI API (grpo-rollout --serve) and validation/agent/calc_agent.py,
# written against the openai client, plays the episodes (64 agents per worker). Knobs (environment): PAIL_DEMO_DIR (demo-env-run),
# PAIL_DEMO_SFT_TARGET (0.3), PAIL_DEMO_STEPS (60), PAIL_DEMO_LR (1e-3), PAIL_DEMO_SFT_MODEL (a
# warmed-up model folder of an earlier run: skips the warm-up).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin}
AGENT=${DEMO_AGENT:-}
NAME=demo-env; [ -z "$AGENT" ] || NAME=demo-agent
D=${PAIL_DEMO_DIR:-$NAME-run}
SFT_TARGET=${PAIL_DEMO_SFT_TARGET:-0.3}
STEPS=${PAIL_DEMO_STEPS:-60}
LR=${PAIL_DEMO_LR:-1e-3}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
start=$(date +%s)
say() { printf '%s [%4ds]: %s\n' "$NAME" $(( $(date +%s) - start )) "$*"; }
rm -rf "$D"
mkdir -p "$D/logs"
D=$(cd "$D" && pwd)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

say "1/4 the calculator task (data/calc/make.py) and a tiny llama-shaped model (C=128, 4 layers, bytes)"
python3 data/calc/make.py "$D/data"
head -200 "$D/data/sft-valid.jsonl" >"$D/data/sft-valid-200.jsonl"
"$BIN/grpo-ctl" init-model --out "$D/model-random" --model-type llama --hidden 128 --layers 4 --heads 4 \
  --kv-heads 2 --ffn 384 --vocab 257 --max-positions 512 --tokenizer data/tokenizers/bytes --dtype f32 \
  --seed 1 >"$D/logs/init.log" 2>&1
cp data/calc/chat_template.jinja "$D/model-random/"

if [ -n "${PAIL_DEMO_SFT_MODEL:-}" ]; then
  say "2/4 the warmed-up model $PAIL_DEMO_SFT_MODEL (PAIL_DEMO_SFT_MODEL)"
  cp -r "$PAIL_DEMO_SFT_MODEL" "$D/model-sft"
else
say "2/4 supervised warm-up on the tool format until $SFT_TARGET of 200 held-out turns are exact (grpo-train --sft --full)"
"$BIN/grpo-train" --sft "$D/data/sft.jsonl" --sft-valid "$D/data/sft-valid-200.jsonl" --valid-every 50 \
  --stop-accuracy "$SFT_TARGET" --full --model "$D/model-random" --out "$D/model-sft" --steps 4000 \
  --groups-per-step 64 --lr 2e-3 --warmup-steps 30 --log-every 100 --token-budget 8192 \
  --metrics "$D/logs/sft-metrics.jsonl" 2>&1 | grep --line-buffered -E '^sft step [0-9]+/|reached' \
  | sed -u 's/^/      /'
fi

LIMITS=(--max-new-tokens 96 --max-turns 3 --max-episode-tokens 224)
ENVFLAGS=(--env "python3 data/calc/env.py" "${LIMITS[@]}")
# env.py's reward is 1 for a right answer, else 0: correct means reward >= 1.
EVALFLAGS=("${ENVFLAGS[@]}" --success-threshold 1)
heldout() {  # OUT [--adapter FILE]: greedy accuracy on the 1,000 held-out problems
  local out=$1; shift
  "$BIN/grpo-ctl" eval --model "$D/model-sft" --dataset "$D/data/eval.jsonl" "${EVALFLAGS[@]}" --batch-size 64 \
    --out "$out" "$@" >/dev/null 2>"$out.log"
  python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["accuracy"])' "$out"
}
A=$(heldout "$D/eval-before.json")
say "   held-out greedy accuracy after the warm-up: $(awk -v a="$A" 'BEGIN { printf "%.1f%%", 100 * a }') (1,000 problems never trained on)"

if [ -n "$AGENT" ]; then
  say "3/4 one trainer and two rollout workers serving the OpenAI API, 64 agents each (file://$D/bucket)"
else
  say "3/4 one trainer and two rollout workers with the environment program (file://$D/bucket)"
fi
RUN="file://$D/bucket"
"$BIN/grpo-train" --model "$D/model-sft" --run "$RUN" --steps "$STEPS" --groups-per-step 16 --group-size 8 \
  --lora-rank 8 --lora-alpha 16 --lr "$LR" --warmup-steps 5 --max-staleness 2 --token-budget 8192 \
  --metrics "$D/logs/metrics.jsonl" --task "multiplication with a calculator tool" >"$D/logs/trainer.log" 2>&1 &
TRAIN=$!
PIDS+=($TRAIN)
AGENTS=()
for w in worker-a worker-b; do
  if [ -n "$AGENT" ]; then
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    WFLAGS=(--serve "127.0.0.1:$port" "${LIMITS[@]}")
  else
    WFLAGS=("${ENVFLAGS[@]}")
  fi
  "$BIN/grpo-rollout" --model "$D/model-sft" --run "$RUN" --worker-id "$w" --dataset "$D/data/train.jsonl" \
    --group-size 8 --groups-per-shard 8 --batch-size 64 "${WFLAGS[@]}" --max-ahead 2 --seed 1 \
    >"$D/logs/$w.log" 2>&1 &
  PIDS+=($!)
  if [ -n "$AGENT" ]; then
    "$(bash mk/venv.sh)/bin/python" validation/agent/calc_agent.py --base "http://127.0.0.1:$port/v1" \
      --model model-sft --agents 64 --stop-file "$D/agents-stop" >"$D/logs/agents-$w.log" 2>&1 &
    AGENTS+=($!)
    PIDS+=($!)
  fi
done

say "4/4 GRPO: $STEPS steps of 16 problems x 8 episodes (LoRA rank 8, lr $LR)"
last=0
while kill -0 $TRAIN 2>/dev/null; do
  sleep 5
  n=$(wc -l <"$D/logs/metrics.jsonl" 2>/dev/null || echo 0)
  if [ "$n" -gt "$last" ]; then
    tail -n +$((last + 1)) "$D/logs/metrics.jsonl" | python3 -c '
import json, sys
for l in sys.stdin:
    m = json.loads(l)
    print("      step %3d  reward %.3f  correct %.3f  tool calls %.2f  turns %.2f  %.1f s" % (m["step"],
          m["reward"] or 0, m.get("rewards/correct/mean") or 0, m.get("rewards/tool_calls/mean") or 0,
          m["completions/mean_turns"], m["step_seconds"]))' || true
    last=$n
  fi
done
wait $TRAIN || { say "the trainer failed:"; tail -5 "$D/logs/trainer.log"; exit 1; }
"$BIN/grpo-ctl" put "$RUN/control/stop" /dev/null >/dev/null
touch "$D/agents-stop"
for p in "${PIDS[@]:1}"; do wait "$p" 2>/dev/null || true; done
[ -z "$AGENT" ] || cat "$D"/logs/agents-*.log | grep '^calc_agent:' | sed 's/^/  /' 
final=$(ls "$D/bucket/adapters/" | grep -o 'v[0-9]*' | sort | tail -1)
B=$(heldout "$D/eval-after.json" --adapter "$D/bucket/adapters/$final.h5")
"$BIN/grpo-ctl" plot "$RUN" --title "pail $NAME: GRPO with a calculator tool" --out "$D/curve.svg" 2>/dev/null || true
echo
echo "  bucket:   $D/bucket"
echo "  metrics:  $D/logs/metrics.jsonl"
echo "  curve:    $D/curve.svg"
echo "  logs:     $D/logs/"
echo "  time:     $(( $(date +%s) - start )) s"
python3 - "$D/logs/metrics.jsonl" "$A" "$B" "$NAME" <<'PYEOF'
import json, sys
m = [json.loads(l) for l in open(sys.argv[1])]
f, l = m[:10], m[-10:]
avg = lambda rows, k: sum(r.get(k) or 0 for r in rows) / len(rows)
print(sys.argv[4] + ": held-out accuracy %.1f%% -> %.1f%% (greedy, 1,000 problems); training reward %.3f -> %.3f "
      "(first and last 10 steps), %.2f turns an episode" % (100 * float(sys.argv[2]), 100 * float(sys.argv[3]),
      avg(f, "reward"), avg(l, "reward"), avg(m, "completions/mean_turns")))
PYEOF
