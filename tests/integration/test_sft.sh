#!/usr/bin/env bash
# Supervised warm-up end to end: --full writes a checkpoint folder that loads
# and evaluates; LoRA writes an adapter that --init-adapter starts a run from;
# the loss goes down; --sft-valid stops at its target; rows without a
# completion are counted and named by line before the weights load.
source "$(dirname "$0")/lib.sh"
PY=$(venv)/bin/python
M="$WORK/model"
"$BIN/grpo-ctl" init-model --out "$M" --model-type llama --hidden 64 --layers 2 --heads 4 --kv-heads 2 --ffn 128 \
  --vocab 257 --tokenizer "$ROOT/data/tokenizers/bytes" --dtype f32 >/dev/null 2>&1 || { bad "init-model"; finish; exit 1; }
head -400 "$ROOT/data/addition/sft.jsonl" >"$WORK/sft.jsonl"
head -40 "$ROOT/data/addition/sft-valid.jsonl" >"$WORK/valid.jsonl"
export OMP_NUM_THREADS=1
check "sft --full" "$BIN/grpo-train" --sft "$WORK/sft.jsonl" --full --model "$M" --out "$WORK/full" --steps 60 \
  --groups-per-step 16 --lr 3e-3 --log-every 20 --metrics "$WORK/full.jsonl"
check "the checkpoint folder loads (model-info checks every tensor)" "$BIN/grpo-ctl" model-info --model "$WORK/full"
check "...with the tokenizer files" test -f "$WORK/full/tokenizer.json" -a -f "$WORK/full/tokenizer_config.json"
# eval rows: the validation rows with their completion as the reference answer (exact_answer needs "answer")
"$PY" -c 'import json, sys
for l in open(sys.argv[1]): r = json.loads(l); print(json.dumps({"prompt": r["prompt"], "answer": r["completion"]}))' \
  "$WORK/valid.jsonl" >"$WORK/valid-eval.jsonl"
check "...and evaluates" "$BIN/grpo-ctl" eval --model "$WORK/full" --dataset "$WORK/valid-eval.jsonl" --max-new-tokens 4
first=$(head -1 "$WORK/full.jsonl" | grep -o '"loss": [0-9.]*' | grep -o '[0-9.]*$')
last=$(tail -1 "$WORK/full.jsonl" | grep -o '"loss": [0-9.]*' | grep -o '[0-9.]*$')
check "the loss went down ($first -> $last)" awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a * 0.8) }'
check "transformers loads the trained checkpoint" "$PY" -c "
import sys, transformers
m = transformers.AutoModelForCausalLM.from_pretrained(sys.argv[1])
print(sum(p.numel() for p in m.parameters()))" "$WORK/full"
check "sft LoRA" "$BIN/grpo-train" --sft "$WORK/sft.jsonl" --model "$M" --out "$WORK/lora.h5" --steps 20 \
  --groups-per-step 16 --lr 3e-3 --lora-rank 4 --metrics ""
check "--init-adapter starts a run from it" "$BIN/grpo-train" --model "$M" --run "file://$WORK/run" \
  --init-adapter "$WORK/lora.h5" --lora-rank 4 --steps 0 --metrics ""
check "...v0 is the SFT adapter" "$PY" "$ROOT/validation/train/compare_adapters.py" "$WORK/lora.h5" \
  "$WORK/run/adapters/v00000000.h5"
for i in $(seq 16); do echo '{"prompt": "1+1=", "completion": "2"}'; done >"$WORK/one.jsonl"
"$BIN/grpo-train" --sft "$WORK/one.jsonl" --sft-valid "$WORK/one.jsonl" --valid-every 5 --stop-accuracy 1 \
  --full --model "$M" --out "$WORK/early/" --steps 2000 --groups-per-step 8 --lr 3e-3 >"$WORK/early.log" 2>&1
check "--stop-accuracy stops once the validation set is learnt" grep -q "reached the target 100.0% at step" "$WORK/early.log"
check "...long before --steps" bash -c "! grep -q 'sft step 2000' '$WORK/early.log'"
check "without --metrics the metrics go beside --out" grep -q '"valid_accuracy": 1' "$WORK/early.metrics.jsonl"
expect_fail_last "--sft without --out" 2 "--out" "$BIN/grpo-train" --sft "$WORK/sft.jsonl" --model "$M"
printf '{"prompt": "1+1="}\n' >"$WORK/bad.jsonl"
expect_fail_last "a row without a completion" 1 "bad.jsonl: 1 of 1 rows are not .*: line 1$" "$BIN/grpo-train" --sft "$WORK/bad.jsonl" --model "$M" --out "$WORK/x"
# rows 3 and 6 (a blank line 4 counted) lack a completion; all are named before the memory plan and the weights
{ head -2 "$WORK/sft.jsonl"; printf '{"prompt": "2+2="}\n\n'; sed -n 3p "$WORK/sft.jsonl"
  printf '{"messages": [{"role": "user", "content": "2+2="}]}\n'; sed -n 4p "$WORK/sft.jsonl"; } >"$WORK/bad2.jsonl"
expect_fail_last "rows without a completion: counted and named by line, at start" 1 \
  "^grpo-train: --sft .*bad2.jsonl: 2 of 6 rows are not \{\"prompt\": str, \"completion\": str\} or \{\"messages\": \[..., assistant\]\}: lines 3, 6$" \
  "$BIN/grpo-train" --sft "$WORK/bad2.jsonl" --model "$M" --out "$WORK/x"
cp "$WORK/last.err" "$WORK/bad2.err"
check "...before the memory plan and the weights" bash -c '! grep -q "memory plan" "$0"' "$WORK/bad2.err"
expect_fail_last "--sft-valid: the same" 1 "^grpo-train: --sft-valid .*bad2.jsonl: 2 of 6 rows .*lines 3, 6$" \
  "$BIN/grpo-train" --sft "$WORK/sft.jsonl" --sft-valid "$WORK/bad2.jsonl" --model "$M" --out "$WORK/x"
finish
