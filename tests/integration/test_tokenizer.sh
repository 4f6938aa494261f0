#!/usr/bin/env bash
# pail's tokenizer against the Hugging Face tokenizers library and transformers'
# apply_chat_template (validation/tokenizer/validate.py): on the published Qwen3 and
# Llama 3 files when ../shared/reference is present, and always on tokenizers built
# locally with the library that reproduce each family's pipeline; plus CLI errors.
source "$(dirname "$0")/lib.sh"
TEST_NAME=tokenizer
PY=$(venv)/bin/python
CTL="$BIN/grpo-ctl"
REF="${PAIL_REFERENCE_DIR:-$ROOT/../shared/reference}/tokenizers"  # env: tests of the SKIP path
dirs=()
if [ -f "$REF/qwen3/tokenizer.json" ] && [ -f "$REF/llama3/tokenizer.json" ]; then
  dirs+=(--dir "qwen3-ref=$REF/qwen3" --dir "llama3-ref=$REF/llama3")
else
  echo "SKIP published Qwen3/Llama 3 tokenizer files: $REF absent (validating the built ones only)"
fi
if built=$(bash "$ROOT/validation/tokenizer/built.sh"); then
  ok "built Qwen/Llama 3 style tokenizers ($built)"
  dirs+=(--dir "qwen-built=$built/qwen" --dir "qwen-chatml-built=$built/qwen-chatml" --dir "llama3-built=$built/llama3")
else
  bad "build the Qwen/Llama 3 style tokenizers"
fi
"$PY" "$ROOT/validation/tokenizer/validate.py" --ctl "$CTL" --work "$WORK/val" "${dirs[@]}" >"$WORK/val.log" 2>&1
vrc=$?
while IFS= read -r line; do  # each oracle check counts as one check here
  case "$line" in
    "PASS "*) ok "${line#PASS }" ;;
    "FAIL "*) bad "${line#FAIL }" ;;
    tokenizer-validate:*) ;;
    *) echo "    $line" ;;
  esac
done <"$WORK/val.log"
[ "$vrc" -eq 0 ] || grep -q '^FAIL' "$WORK/val.log" || bad "validate.py exited $vrc"

# Bad input: one clear line, exit 1 (runtime) or 2 (usage).
q="$built/qwen/tokenizer.json"
printf '{"model": {"type": "BPE", "vocab": {"a": 0' >"$WORK/trunc.json"
expect_fail "truncated tokenizer.json" 1 'trunc.json: not valid JSON' "$CTL" tokenize --tokenizer "$WORK/trunc.json" --text x
printf '{"model": {"type": "Unigram", "vocab": []}}' >"$WORK/uni.json"
expect_fail "Unigram model refused" 1 "model type 'Unigram' is not supported" "$CTL" tokenize --tokenizer "$WORK/uni.json" --text x
expect_fail "missing file" 1 'nope.json' "$CTL" tokenize --tokenizer "$WORK/nope.json" --text x
expect_fail "no input flag" 2 'exactly one of' "$CTL" tokenize --tokenizer "$q"
printf '"ok"\n[1,2]\n' >"$WORK/bad.jsonl"
expect_fail "jsonl line that is not a string" 1 'bad.jsonl:2' "$CTL" tokenize --tokenizer "$q" --jsonl "$WORK/bad.jsonl"
expect_fail "id outside the vocabulary" 1 'id 99999999 at position 1 is not in the vocabulary' "$CTL" detokenize --tokenizer "$q" --ids '[1,99999999]'
printf '{"chat_template": "{{ messages }}"}' >"$WORK/tokenizer_config.json"
cp "$q" "$WORK/tokenizer.json"
printf '[{"role":"user","content":"hi"}]\n' >"$WORK/chat.jsonl"
expect_fail "unknown chat template" 1 'not one pail renders.*--prompt-format' "$CTL" tokenize --tokenizer "$WORK/tokenizer.json" --chat-jsonl "$WORK/chat.jsonl"
check "--prompt-format renders the unknown template's chats" "$CTL" tokenize --tokenizer "$WORK/tokenizer.json" --chat-jsonl "$WORK/chat.jsonl" --prompt-format 'Q: {prompt}
A:' --print-text
if [ "$(cat "$WORK/last.out")" = '"Q: hi\nA:"' ]; then ok "--prompt-format text"; else bad "--prompt-format text: $(cat "$WORK/last.out")"; fi
check "round trip on the command line" bash -c "ids=\$('$CTL' tokenize --tokenizer '$q' --text 'héllo <|im_end|> 42'); [ \"\$('$CTL' detokenize --tokenizer '$q' --ids \"\$ids\")\" = 'héllo <|im_end|> 42' ]"
finish
