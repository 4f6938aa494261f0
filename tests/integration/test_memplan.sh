#!/usr/bin/env bash
# The memory plan: grpo-ctl plan prints it from a config alone and refuses a
# plan over --max-memory naming the sizes and the flag to change; the printed
# plan is within 10% of the measured peak RSS of a LoRA step and of decode
# (tests/tools/memplan_driver.c, on the bench shape; bench/memplan.sh does the
# same on a 7B-width checkpoint).
source "$(dirname "$0")/lib.sh"
BUILD=${BUILD:-build}
make -s -C "$ROOT" "$BUILD/tools/memplan_driver" >/dev/null || { bad "build memplan_driver"; finish; exit 1; }
P=(plan --shape qwen2.5-7b --dtype bf16 --token-budget 4096)
check "the 28-layer 7B shape in bf16 with --recompute fits 24 GB" "$BIN/grpo-ctl" "${P[@]}" --recompute --max-memory 24G
cp "$WORK/last.out" "$WORK/plan.out"
total=$(awk '/total/ {print $2}' "$WORK/plan.out")
check "...the plan names every part (total $total GiB)" bash -c "grep -q 'weights .*7615616512 parameters, bf16' '$WORK/plan.out' &&
  grep -q 'LoRA + AdamW' '$WORK/plan.out' && grep -q 'activations .*4096 tokens, layer inputs only' '$WORK/plan.out'"
expect_fail "without --recompute it is refused, saying what to change" 1 \
  "needs 52.* GiB on cpu but --max-memory is 24.00 GiB \(weights 14.19 GiB.*\): add --recompute" \
  "$BIN/grpo-ctl" "${P[@]}" --max-memory 24G
expect_fail "a rollout plan over the limit names its flags" 1 "lower --batch-size, --max-new-tokens, --max-prompt-tokens or --prefill-tokens" \
  "$BIN/grpo-ctl" plan --shape qwen2.5-0.5b --role rollout --batch-size 512 --max-new-tokens 4096 --max-memory 8G
expect_fail "a bad --max-memory" 2 "'24Q' is not a memory size" "$BIN/grpo-ctl" "${P[@]}" --max-memory 24Q
expect_fail "neither --model nor --shape" 2 "give --model DIR or --shape NAME" "$BIN/grpo-ctl" plan
M="$WORK/bench"
"$BIN/grpo-ctl" init-model --out "$M" --shape bench --dtype f32 >/dev/null 2>&1 || bad "init-model"
check "plan --model reads the folder's config" "$BIN/grpo-ctl" plan --model "$M" --token-budget 1024
for mode in "train --token-budget 1024" "decode --batch-size 16 --prompt 128 --ctx 256"; do
  read -r -a a <<<"$mode"
  "$ROOT/$BUILD/tools/memplan_driver" --model "$M" --mode "${a[@]}" >"$WORK/mp.out" 2>&1
  ratio=$(awk '/plan\/peak/ {print $NF}' "$WORK/mp.out")
  check "${a[0]}: the printed plan is within 10% of the peak RSS (plan/peak $ratio)" \
    awk -v r="${ratio:-0}" 'BEGIN { exit !(r >= 0.9 && r <= 1.1) }'
done
T="$WORK/tiny"
"$BIN/grpo-ctl" init-model --out "$T" --shape tiny --vocab 257 --tokenizer "$ROOT/data/tokenizers/bytes" \
  --dtype f32 >/dev/null 2>&1 || bad "init-model tiny"
"$BIN/grpo-train" --model "$T" --run "file://$WORK/run" --steps 0 --metrics "" >"$WORK/train.out" 2>&1
plan_at=$(grep -n 'memory plan on cpu' "$WORK/train.out" | head -1 | cut -d: -f1)
model_at=$(grep -n 'info: model .* parameters' "$WORK/train.out" | head -1 | cut -d: -f1)
check "grpo-train prints its plan before loading the model (line ${plan_at:-none}, the model at ${model_at:-none})" \
  test "${plan_at:-9999}" -lt "${model_at:-0}"
expect_fail_last "grpo-train refuses a plan over --max-memory" 1 \
  "memory plan needs .* MiB on cpu .* but --max-memory is 1.0 MiB .*: add --recompute, or lower --token-budget" \
  "$BIN/grpo-train" --model "$T" --run "file://$WORK/run2" --steps 0 --metrics "" --max-memory 1M
check "...before writing anything to the run" test ! -e "$WORK/run2"
head -4 "$ROOT/data/addition/train.jsonl" >"$WORK/d.jsonl"
expect_fail_last "grpo-rollout refuses one too, naming its flags" 1 "lower --batch-size, --max-new-tokens, --max-prompt-tokens or --prefill-tokens" \
  "$BIN/grpo-rollout" --model "$T" --run "file://$WORK/run" --dataset "$WORK/d.jsonl" --max-memory 2M
printf '{"prompt": "1+1=", "completion": "2"}\n{"prompt": "2+2=", "completion": "4"}\n' >"$WORK/sft.jsonl"
expect_fail_last "grpo-train --sft --full refuses a plan over --max-memory (grads and moments of every weight)" 1 \
  "memory plan needs .* but --max-memory is 1.0 MiB" "$BIN/grpo-train" --sft "$WORK/sft.jsonl" --model "$T" --full \
  --out "$WORK/full" --steps 1 --max-memory 1M
check "...and writes nothing" test ! -e "$WORK/full"
expect_fail "a bad --max-memory on grpo-rollout" 2 "--max-memory: '12parsecs' is not a memory size" \
  "$BIN/grpo-rollout" --model "$T" --run "file://$WORK/run" --dataset "$WORK/d.jsonl" --max-memory 12parsecs
finish
