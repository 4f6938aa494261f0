#!/usr/bin/env bash
# Every chat path renders with the model's chat template as transformers does: the prompts
# grpo-ctl eval hands a cmd reward (the text the model was given) equal transformers'
# apply_chat_template for messages rows with tools, for --chat prompt rows and with
# --chat-template-kwargs; grpo-train --sft trains on messages rows; a template that does
# not parse stops each tool at startup naming FILE:LINE:COL; --generation-defaults.
source "$(dirname "$0")/lib.sh"
PY=$(venv)/bin/python
M="$WORK/model"
"$BIN/grpo-ctl" init-model --out "$M" --model-type llama --hidden 32 --layers 1 --heads 2 --kv-heads 1 --ffn 64 \
  --vocab 257 --tokenizer "$ROOT/data/tokenizers/bytes" --dtype f32 >/dev/null 2>&1 || { bad "init-model"; finish; exit 1; }
cp "$ROOT/validation/tokenizer/templates/qwen3.jinja" "$M/chat_template.jinja"  # tools, tool_calls, reasoning, enable_thinking
export OMP_NUM_THREADS=1
cat >"$WORK/rows.jsonl" <<'EOF'
{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2? é"}], "answer": "4"}
{"messages": [{"role": "user", "content": "weather?"}, {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}}]}, {"role": "tool", "content": "{\"t\": 21.5}"}], "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}], "answer": "x"}
{"prompt": "1+1=", "answer": "2"}
EOF
cat >"$WORK/dump.py" <<'EOF'
import json, sys
out = open(sys.argv[1], "a")
for line in sys.stdin:
    out.write(json.dumps(json.loads(line)["prompt"]) + "\n"); out.flush()
    print(0, flush=True)
EOF
# transformers' rendering of the same rows (the prompt row as one user message, as --chat does)
cat >"$WORK/want.py" <<'EOF'
import json, sys, transformers
tok = transformers.AutoTokenizer.from_pretrained(sys.argv[1])
kw = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
for line in open(sys.argv[2]):
    row = json.loads(line)
    msgs = row.get("messages") or [{"role": "user", "content": row["prompt"]}]
    print(json.dumps(tok.apply_chat_template(msgs, tools=row.get("tools"), add_generation_prompt=True, tokenize=False, **kw)))
EOF
eval_dump() {  # OUT [flags...]: the prompts eval gives the cmd reward, in dataset order
  local out=$1; shift
  rm -f "$out"
  "$BIN/grpo-ctl" eval --model "$M" --dataset "$WORK/rows.jsonl" --max-new-tokens 1 --batch-size 1 --chat \
    --reward cmd --reward-cmd "python3 '$WORK/dump.py' '$out'" "$@" >"$WORK/eval.out" 2>"$WORK/eval.err"
}
check "eval --chat renders messages rows (with tools) and prompt rows" eval_dump "$WORK/got.jsonl"
"$PY" "$WORK/want.py" "$M" "$WORK/rows.jsonl" >"$WORK/want.jsonl" 2>"$WORK/want.err" || bad "transformers: $(tail -1 "$WORK/want.err")"
if [ "$(wc -l <"$WORK/got.jsonl")" = 3 ] && cmp -s "$WORK/got.jsonl" "$WORK/want.jsonl"; then ok "...every prompt byte-identical to transformers' apply_chat_template"
else bad "...prompts differ from transformers:"; diff "$WORK/got.jsonl" "$WORK/want.jsonl" | head -6; fi
check "eval --chat-template-kwargs" eval_dump "$WORK/got-kw.jsonl" --chat-template-kwargs '{"enable_thinking": false}'
"$PY" "$WORK/want.py" "$M" "$WORK/rows.jsonl" '{"enable_thinking": false}' >"$WORK/want-kw.jsonl" 2>/dev/null
if cmp -s "$WORK/got-kw.jsonl" "$WORK/want-kw.jsonl" && grep -q 'think' "$WORK/got-kw.jsonl"; then ok "...enable_thinking=false as transformers renders it"
else bad "...kwargs prompts differ:"; diff "$WORK/got-kw.jsonl" "$WORK/want-kw.jsonl" | head -6; fi
printf '{%% for m in messages %%}{{ m.content }\n' >"$WORK/broken.jinja"
expect_fail_last "eval: a broken --chat-template stops it at startup" 1 'broken.jinja:1:' \
  "$BIN/grpo-ctl" eval --model "$M" --dataset "$WORK/rows.jsonl" --max-new-tokens 1 --chat --chat-template "$WORK/broken.jinja"

# SFT on messages rows: the prompt is the conversation up to the last assistant turn, rendered
# with the generation prompt; the completion the assistant's content.
for i in $(seq 24); do
  echo '{"messages": [{"role": "system", "content": "Add."}, {"role": "user", "content": "1+1="}, {"role": "assistant", "content": "2"}]}'
done >"$WORK/sft.jsonl"
check "sft on messages rows" "$BIN/grpo-train" --sft "$WORK/sft.jsonl" --model "$M" --out "$WORK/lora.h5" --steps 3 \
  --groups-per-step 8 --lora-rank 2 --metrics ""
cp "$WORK/broken.jinja" "$M/chat_template.jinja"
expect_fail_last "sft: the model's broken chat_template.jinja: its rows refused naming FILE:LINE:COL" 1 'chat_template.jinja:1:' \
  "$BIN/grpo-train" --sft "$WORK/sft.jsonl" --model "$M" --out "$WORK/lora2.h5" --steps 1 --metrics ""
rm "$M/chat_template.jinja"

# --generation-defaults: generation_config.json's sampling settings, flags given win
printf '{"eos_token_id": 0, "temperature": 0.6, "top_p": 0.95, "top_k": 20, "min_p": 0.05}' >"$M/generation_config.json"
"$BIN/grpo-rollout" --model "$M" --run "file://$WORK/run" --dataset "$WORK/rows.jsonl" --generation-defaults --top-k 5 \
  --wait-timeout 0.01 >"$WORK/gd.log" 2>&1
check "--generation-defaults takes temperature, top_p and min_p, not the top_k given" \
  grep -q 'generation_config.json: temperature=0.6 top_p=0.95 min_p=0.05$' "$WORK/gd.log"
"$BIN/grpo-ctl" eval --model "$M" --dataset "$WORK/rows.jsonl" --max-new-tokens 1 --chat --samples 2 \
  --generation-defaults --temperature 0.9 >"$WORK/gd-eval.out" 2>"$WORK/gd-eval.log"
check "eval --generation-defaults (pass@k): top_p and top_k taken, --temperature given wins" \
  grep -q 'generation_config.json: top_p=0.95 top_k=20 min_p=0.05$' "$WORK/gd-eval.log"
printf '{"temperature": "hot"}' >"$M/generation_config.json"
expect_fail_last "--generation-defaults: a bad value names the file" 1 'generation_config.json: temperature is not a number' \
  "$BIN/grpo-rollout" --model "$M" --run "file://$WORK/run" --dataset "$WORK/rows.jsonl" --generation-defaults
# A temperature between 0 (greedy) and 0.01 is refused wherever it comes from: at 1e-39 (a float
# denormal) 1 / T overflowed and every step its shards fed was skipped as non-finite.
printf '{"temperature": 1e-39}' >"$M/generation_config.json"
expect_fail_last "--generation-defaults: temperature 1e-39 refused naming the file" 1 \
  'generation_config.json: temperature 1e-39 is neither 0 \(greedy\) nor at least 0.01' \
  "$BIN/grpo-rollout" --model "$M" --run "file://$WORK/run" --dataset "$WORK/rows.jsonl" --generation-defaults
rm "$M/generation_config.json"
expect_fail "--temperature 1e-39 refused" 2 '--temperature 1e-39: give 0 \(greedy\) or at least 0.01' \
  "$BIN/grpo-rollout" --model "$M" --run "file://$WORK/run" --dataset "$WORK/rows.jsonl" --temperature 1e-39
expect_fail "a training worker at --temperature 0 refused (the trainer rejects greedy shards)" 2 \
  'temperature 0 \(greedy\) is for --eval workers: the trainer rejects a greedy shard' \
  "$BIN/grpo-rollout" --model "$M" --run "file://$WORK/run" --dataset "$WORK/rows.jsonl" --temperature 0
expect_fail "grpo-ctl eval --temperature 0.001 refused" 2 '--temperature 0.001: give 0 \(greedy\) or at least 0.01' \
  "$BIN/grpo-ctl" eval --model "$M" --dataset "$WORK/rows.jsonl" --samples 2 --temperature 0.001
finish
