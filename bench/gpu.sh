#!/usr/bin/env bash
# The GPU benches (the GPU machine's part of mk/gpu-bundle.sh; by hand: bash
# bench/gpu.sh BIN OUT [SECONDS]): the tools themselves on a bench-shape model
# (C512 L8 H8 Hkv2 F1408, vocab 257, bf16 weights, random), --device cuda
# against --device cpu on the same machine with the same flags:
#   - LoRA SFT steps (rank 16, every projection, 64 rows a step): completion
#     tokens a second of a step (the median over the steps after the first,
#     from the metrics' completion_tokens and cumulative seconds);
#   - generation: grpo-ctl eval, 32 prompts x 4 samples x 48 new tokens,
#     sampled at temperature 1, batch 64: wall seconds;
#   - the same through transformers + PEFT (bench/gpu_torch.py) where
#     python3 imports torch, transformers and peft, else SKIP with the reason.
# cuda needs PAIL_UNVERIFIED_CUDA=1 until the release is verified (the
# bundle sets it). Everything under OUT; a figures summary on stdout; exit 1
# when a run failed.
set -uo pipefail
BIN=${1:?usage: bench/gpu.sh BIN OUT [SECONDS]}; OUT=${2:?usage: bench/gpu.sh BIN OUT [SECONDS]}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LIMIT=${3:-40}  # seconds for the four runs together at most (each gets a third: they end well before)
W=$(mktemp -d /tmp/pail-gpubench.XXXXXX)
trap 'rm -rf "$W"' EXIT
mkdir -p "$OUT"
M="$W/model"
"$BIN/grpo-ctl" init-model --out "$M" --shape bench --vocab 257 --tokenizer "$ROOT/data/tokenizers/bytes" \
  --dtype bf16 >"$OUT/bench-init.log" 2>&1 || { echo "bench: init-model failed"; cat "$OUT/bench-init.log"; exit 1; }
head -400 "$ROOT/data/addition/sft.jsonl" >"$W/sft.jsonl"
head -32 "$ROOT/data/addition/train.jsonl" >"$W/eval.jsonl"

median_tps() {  # metrics.jsonl: the median completion tokens / step seconds over the steps after the first
  sed -n 's/.*"completion_tokens": *\([0-9]*\).*"seconds": *\([0-9.]*\).*/\1 \2/p' "$1" |
    awk 'NR > 1 && $2 > prev {print $1 / ($2 - prev)} {prev = $2}' | sort -g |
    awk '{a[NR] = $1} END {if (NR) printf "%.0f\n", a[int((NR + 1) / 2)]; else print "n/a"}'
}
now() { date +%s.%N; }

declare -A TPS SEC
status=0
for d in cuda cpu; do
  # the CPU side with every core (run.sh caps the tools' threads for the loop)
  if [ $d = cpu ]; then export OMP_NUM_THREADS=$(nproc --all); fi
  steps=12; [ $d = cpu ] && steps=4
  timeout $((LIMIT / 3)) "$BIN/grpo-train" --sft "$W/sft.jsonl" --model "$M" --out "$W/sft-$d.h5" --steps $steps \
    --groups-per-step 64 --lr 1e-4 --lora-rank 16 --log-every 1 --metrics "$OUT/bench-sft-$d.jsonl" --device $d \
    >"$OUT/bench-sft-$d.log" 2>&1
  rc=$?
  if [ $rc = 0 ]; then TPS[$d]=$(median_tps "$OUT/bench-sft-$d.jsonl"); else TPS[$d]="failed (exit $rc)" status=1; fi
  t0=$(now)
  timeout $((LIMIT / 3)) "$BIN/grpo-ctl" eval --model "$M" --dataset "$W/eval.jsonl" --reward format \
    --format-regex '[0-9]' --samples 4 --temperature 1 --max-new-tokens 48 --batch-size 64 --device $d \
    >"$OUT/bench-eval-$d.json" 2>"$OUT/bench-eval-$d.log"
  rc=$?
  if [ $rc = 0 ]; then SEC[$d]=$(echo "$(now) $t0" | awk '{printf "%.2f", $1 - $2}'); else SEC[$d]="failed (exit $rc)" status=1; fi
done
echo "bench (bench shape, vocab 257, bf16 weights; cpu on $(nproc --all) threads):"
echo "  LoRA SFT completion tokens/s: cuda ${TPS[cuda]}, cpu ${TPS[cpu]}"
echo "  eval 32 prompts x 4 samples x <=48 tokens, seconds: cuda ${SEC[cuda]}, cpu ${SEC[cpu]}"

if why=$(python3 -c "import torch, transformers, peft; assert torch.cuda.is_available(), 'torch sees no GPU'" 2>&1); then
  timeout 15 python3 "$ROOT/bench/gpu_torch.py" "$M" "$W/sft.jsonl" >"$OUT/bench-torch.log" 2>&1 &&
    tail -3 "$OUT/bench-torch.log" | sed 's/^/  /' ||
    { echo "  transformers + PEFT: failed"; tail -5 "$OUT/bench-torch.log"; status=1; }
else
  echo "  SKIP: transformers + PEFT comparison: $(tail -1 <<<"${why:-python3 missing}")"
fi
exit $status
