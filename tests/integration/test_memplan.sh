#!/usr/bin/env bash
# The memory plan: grpo-ctl plan prints it from a config alone and refuses a
# plan over --max-memory naming the sizes and the flag to change; the printed
# plan is within 10% of the measured peak RSS of a LoRA step and of decode
# (tests/tools/memplan_driver.c, on the bench shape; bench/memplan.sh does the
# same on a 7B-width checkpoint). --token-budget auto (grpo-train's default):
# a group of --max-seq-tokens, at most 4096 (or one sequence past it), halved to fit, then --recompute;
# on SmolLM2-135M's config it plans 4.8 GiB where the old 16384 planned 18.
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
check "a rollout plan over the limit gives the KV pool what the rest leaves" bash -c "'$BIN/grpo-ctl' plan --shape qwen2.5-0.5b \
  --role rollout --batch-size 512 --max-new-tokens 4096 --max-memory 8G | grep -q 'blocks of 64 tokens, f16 (what the limit leaves; the full pool: 41553'"
expect_fail "a rollout plan whose rest is over the limit names its flags" 1 "lower --batch-size, --max-new-tokens, --max-prompt-tokens or --prefill-tokens" \
  "$BIN/grpo-ctl" plan --shape qwen2.5-0.5b --role rollout --batch-size 512 --max-new-tokens 4096 --max-memory 1G
expect_fail "a --kv-memory pool too small for one sequence names the flags" 1 \
  "KV pool of 13 blocks \(--kv-memory\) cannot hold one sequence of 1024 prompt \+ 4096 new tokens: it needs 80 blocks .*raise --kv-memory or lower --max-new-tokens" \
  "$BIN/grpo-ctl" plan --shape qwen2.5-0.5b --role rollout --max-new-tokens 4096 --kv-memory 10M
expect_fail "a bad --max-memory" 2 "'24Q' is not a memory size" "$BIN/grpo-ctl" "${P[@]}" --max-memory 24Q
expect_fail "neither --model nor --shape" 2 "give --model DIR or --shape NAME" "$BIN/grpo-ctl" plan
M="$WORK/bench"
"$BIN/grpo-ctl" init-model --out "$M" --shape bench --dtype f32 >/dev/null 2>&1 || bad "init-model"
check "plan --model reads the folder's config" "$BIN/grpo-ctl" plan --model "$M" --token-budget 1024
for mode in "train --token-budget 1024" "decode --batch-size 16 --prompt 128 --ctx 256" \
            "decode --batch-size 16 --prompt 128 --ctx 256 --kv-dtype bf16"; do
  read -r -a a <<<"$mode"
  "$ROOT/$BUILD/tools/memplan_driver" --model "$M" --mode "${a[@]}" >"$WORK/mp.out" 2>&1
  ratio=$(awk '/plan\/peak/ {print $NF}' "$WORK/mp.out")
  check "${a[0]}${a[7]:+ ${a[7]} ${a[8]}}: the printed plan is within 10% of the peak RSS (plan/peak $ratio)" \
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
expect_fail_last "grpo-train refuses a plan over --max-memory (auto: even the smallest, with --recompute)" 1 \
  "memory plan needs .* MiB on cpu .* but --max-memory is 1.0 MiB .*: lower --token-budget or --lora-rank" \
  "$BIN/grpo-train" --model "$T" --run "file://$WORK/run2" --steps 0 --metrics "" --max-memory 1M
check "...before writing anything to the run" test -z "$(find "$WORK/run2" -type f 2>/dev/null)"
expect_fail_last "an explicit --token-budget over --max-memory: refused as it was" 1 \
  "memory plan needs .* but --max-memory is 20.0 MiB .*: add --recompute, or lower --token-budget" \
  "$BIN/grpo-train" --model "$T" --run "file://$WORK/run2" --steps 0 --metrics "" --max-memory 20M --token-budget 4096

echo "--token-budget auto (the default)"
# SmolLM2-135M's config.json: the old fixed 16384 tokens planned 18 GiB of activations
S="$WORK/smol"
mkdir -p "$S"
cat >"$S/config.json" <<'JSON'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 576, "intermediate_size": 1536,
 "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3, "vocab_size": 49152,
 "max_position_embeddings": 8192, "rms_norm_eps": 1e-05, "rope_theta": 100000, "tie_word_embeddings": true,
 "torch_dtype": "bfloat16", "bos_token_id": 0, "eos_token_id": 0}
JSON
gib() { awk '/^  total/ {v=$2; if ($3 == "MiB") v /= 1024; print v}' "$1"; }
"$BIN/grpo-ctl" plan --model "$S" --token-budget 16384 >"$WORK/smol-16k.out" 2>&1
"$BIN/grpo-ctl" plan --model "$S" --max-memory 24G >"$WORK/smol-auto.out" 2>&1
old=$(gib "$WORK/smol-16k.out"); new=$(gib "$WORK/smol-auto.out")
check "135M: the default plan is well below the old default's (auto $new GiB, --token-budget 16384 $old GiB)" \
  awk -v o="${old:-0}" -v n="${new:-99}" 'BEGIN { exit !(o > 18 && n < 5) }'
check "...a group of 8 x 1280 tokens, at most 4096, said in one line" \
  grep -q "^--token-budget auto: 4096 tokens: a group of 8 x --max-seq-tokens 1280 = 10240, at most 4096; the plan's 4.83 GiB fits 24.00 GiB" "$WORK/smol-auto.out"
check "...a second trainer on a 24 GB machine fits where the old default did not" \
  "$BIN/grpo-ctl" plan --model "$S" --max-memory 12G
expect_fail "...the old default on the same machine is refused" 1 "needs 18.33 GiB on cpu but --max-memory is 12.00 GiB" \
  "$BIN/grpo-ctl" plan --model "$S" --max-memory 12G --token-budget 16384
check "less memory: halved, saying why" bash -c "'$BIN/grpo-ctl' plan --model '$S' --max-memory 3G |
  grep -q '^--token-budget auto: 2048 tokens: .*; 4096 tokens would need 4.83 GiB; the plan.s 2.58 GiB fits 3.00 GiB'"
check "less still: --recompute turned on" bash -c "'$BIN/grpo-ctl' plan --model '$S' --max-memory 1200M |
  grep -q '^--token-budget auto: 4096 tokens with --recompute turned on: .*4096 tokens without it would need 4.83 GiB'"
"$BIN/grpo-ctl" plan --model "$S" --max-seq-tokens 8192 --max-memory 6G >"$WORK/smol-8k.out" 2>&1
check "a long sequence (--max-seq-tokens 8192, past the cap): one sequence, --recompute turned on, said in one line" \
  grep -q "^--token-budget auto: 8192 tokens with --recompute turned on: one sequence of --max-seq-tokens 8192 (past the cap of 4096: a micro-batch holds the longest); 8192 tokens without it would need 9.33 GiB; the plan's 1.57 GiB fits 6.00 GiB" "$WORK/smol-8k.out"
check "...and the plan shows it" grep -q "activations .*8192 tokens, layer inputs only (--recompute)" "$WORK/smol-8k.out"
"$BIN/grpo-train" --model "$T" --run "file://$WORK/run3" --steps 0 --metrics "" --group-size 4 --max-seq-tokens 200 \
  >"$WORK/auto.out" 2>&1
check "grpo-train: G 4 x --max-seq-tokens 200 = 800 tokens, said before the plan, which has them" bash -c "
  grep -q 'info: --token-budget auto: 800 tokens: a group of 4 x --max-seq-tokens 200 = 800' '$WORK/auto.out' &&
  grep -q 'activations .* 800 tokens, every layer saved' '$WORK/auto.out' &&
  grep -q '\"token-budget\": 800' '$WORK/run3/run.json'"
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
