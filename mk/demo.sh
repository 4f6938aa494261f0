#!/usr/bin/env bash
# `make demo`: a real async GRPO run on this machine. A tiny model (0.85M
# parameters, byte-level vocabulary) is warmed up on two-digit addition with
# `grpo-train --sft --full`; then grpo-relay serves a local folder as the
# bucket, and one trainer, two rollout workers and an evaluation worker run as
# separate processes that coordinate only through the relay. Ends with
#   demo: held-out accuracy A% -> B%
# (greedy accuracy on 1,000 held-out sums before and after GRPO) and an SVG of
# the reward and accuracy curves. The warm-up stops once greedy exact match on
# 500 held-out train rows reaches PAIL_DEMO_SFT_TARGET (0.5): addition is
# learnt abruptly, so a step count would land anywhere between 10% and 90%.
# Knobs (environment): PAIL_DEMO_DIR (demo-run), PAIL_DEMO_SFT_TARGET,
# PAIL_DEMO_STEPS (GRPO steps, 300), PAIL_DEMO_LR (5e-4).
set -euo pipefail
cd "$(dirname "$0")/.."
source mk/demo-lib.sh
BIN=${BIN:-bin}
D=${PAIL_DEMO_DIR:-demo-run}
SFT_TARGET=${PAIL_DEMO_SFT_TARGET:-0.5}
STEPS=${PAIL_DEMO_STEPS:-300}
LR=${PAIL_DEMO_LR:-5e-4}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
start=$(date +%s)
say() { printf 'demo [%3ds]: %s\n' $(( $(date +%s) - start )) "$*"; }

rm -rf "$D"
mkdir -p "$D/bucket" "$D/logs"
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

say "1/4 a tiny llama-shaped model (C=128, 4 layers, vocabulary 257 bytes), random weights"
"$BIN/grpo-ctl" init-model --out "$D/model-random" --model-type llama --hidden 128 --layers 4 --heads 4 \
  --kv-heads 2 --ffn 384 --vocab 257 --max-positions 64 --tokenizer data/tokenizers/bytes --dtype f32 \
  --seed 1 >"$D/logs/init.log" 2>&1

say "2/4 supervised warm-up on 8,500 sums until 500 held-out ones reach $SFT_TARGET (grpo-train --sft --full)"
"$BIN/grpo-train" --sft data/addition/sft.jsonl --sft-valid data/addition/sft-valid.jsonl --valid-every 20 \
  --stop-accuracy "$SFT_TARGET" --full --model "$D/model-random" --out "$D/model-sft" --steps 3000 \
  --groups-per-step 64 --lr 2e-3 --warmup-steps 30 --log-every 100 --token-budget 4096 \
  --metrics "$D/logs/sft-metrics.jsonl" 2>&1 | grep --line-buffered -E '^sft step [0-9]+/|reached' \
  | sed -u 's/^/      /'

"$BIN/grpo-ctl" eval --model "$D/model-sft" --dataset data/addition/eval.jsonl --max-new-tokens 5 \
  --out "$D/eval-before.json" >/dev/null 2>&1
A=$(grep -o '"accuracy": *[0-9.]*' "$D/eval-before.json" | grep -o '[0-9.]*$')
say "   held-out greedy accuracy after the warm-up: $(awk -v a="$A" 'BEGIN { printf "%.1f%%", 100 * a }') (1,000 sums never trained on)"
say "3/4 relay on $D/bucket, trainer, two rollout workers, one eval worker"
demo_relay_start

as "$TK" "$TS" "$BIN/grpo-train" --model "$D/model-sft" --run "$URL" "${EP[@]}" --steps "$STEPS" \
  --groups-per-step 16 --group-size 8 --lora-rank 8 --lora-alpha 16 --lr "$LR" --warmup-steps 10 --max-staleness 2 \
  --token-budget 4096 --metrics "$D/logs/metrics.jsonl" --task "two-digit addition" >"$D/logs/trainer.log" 2>&1 &
TRAIN=$!
PIDS+=($TRAIN)
for w in worker-a worker-b; do
  as "$RK" "$RS" "$BIN/grpo-rollout" --model "$D/model-sft" --run "$URL" "${EP[@]}" --worker-id "$w" \
    --dataset data/addition/train.jsonl --group-size 8 --groups-per-shard 8 --batch-size 64 --max-new-tokens 5 \
    --reward exact_answer --max-ahead 2 --seed 1 >"$D/logs/$w.log" 2>&1 &
  PIDS+=($!)
done
as "$RK" "$RS" "$BIN/grpo-rollout" --eval --model "$D/model-sft" --run "$URL" "${EP[@]}" --worker-id eval \
  --eval-dataset data/addition/eval.jsonl --max-new-tokens 5 --batch-size 128 >"$D/logs/eval.log" 2>&1 &
EVAL=$!
PIDS+=($EVAL)

say "4/4 GRPO: $STEPS steps of 16 prompts x 8 samples (LoRA rank 8, lr $LR)"
demo_watch 3 6  # a terminal redrawn every 3 s, a log a block every 6 s
wait $TRAIN || { say "the trainer failed:"; tail -5 "$D/logs/trainer.log"; exit 1; }
final=$(grep -o 'adapter v[0-9]*' "$D/logs/trainer.log" | tail -1 | grep -o '[0-9]*$')
say "training done (adapter v$final); waiting for its evaluation"
for _ in $(seq 120); do [ -f "$D/bucket/demo/eval/v$final.json" ] && break; sleep 1; done
as "$OK" "$OS" "$BIN/grpo-ctl" put "$URL/control/stop" /dev/null "${EP[@]}" >/dev/null
for p in "${PIDS[@]:1}"; do wait "$p" 2>/dev/null || true; done

acc() { grep -o '"accuracy": *[0-9.]*' "$1" | grep -o '[0-9.]*$'; }
if [ -f "$D/bucket/demo/eval/v$final.json" ]; then
  B=$(acc "$D/bucket/demo/eval/v$final.json")
else  # the eval worker did not get to it: score the final adapter here
  "$BIN/grpo-ctl" eval --model "$D/model-sft" --adapter "$D/bucket/demo/adapters/v$final.h5" \
    --dataset data/addition/eval.jsonl --max-new-tokens 5 --out "$D/eval-final.json" >/dev/null 2>&1
  B=$(acc "$D/eval-final.json")
fi
as "$OK" "$OS" "$BIN/grpo-ctl" plot "$URL" "${EP[@]}" --title "pail demo: GRPO on two-digit addition" \
  --out "$D/curve.svg" 2>/dev/null || true
as "$OK" "$OS" "$BIN/grpo-ctl" status "$URL" "${EP[@]}" --steps "$STEPS" 2>/dev/null | sed 's/^/    /' || true
echo
echo "  bucket:   $D/bucket/demo  (served by grpo-relay at http://127.0.0.1:$port, now stopped)"
echo "  adapter:  $D/bucket/demo/adapters/v$final.h5"
echo "  metrics:  $D/bucket/demo/metrics/ and $D/logs/metrics.jsonl; evaluations in $D/bucket/demo/eval/"
echo "  curve:    $D/curve.svg"
echo "  logs:     $D/logs/"
echo "  time:     $(( $(date +%s) - start )) s"
awk -v a="$A" -v b="$B" 'BEGIN { printf "demo: held-out accuracy %.1f%% -> %.1f%%\n", 100 * a, 100 * b }'
