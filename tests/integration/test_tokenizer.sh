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
  # The Digits pre-tokenizer before ByteLevel (StarCoder-derived tokenizers such as Granite's;
  # Cohere's, with an NFC normalizer), each digit alone or runs of digits, on the llama3 vocabulary
  if "$PY" - "$built/llama3" "$WORK" <<'PYEOF'
import json, os, shutil, sys
src, work = sys.argv[1], sys.argv[2]
for name, individual, nfc in (("digits-individual-nfc", True, True), ("digits-runs", False, False)):
    d = os.path.join(work, name)
    shutil.copytree(src, d)
    j = json.load(open(os.path.join(d, "tokenizer.json")))
    j["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": individual},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]}
    if nfc:
        j["normalizer"] = {"type": "NFC"}
    json.dump(j, open(os.path.join(d, "tokenizer.json"), "w"))
PYEOF
  then dirs+=(--dir "digits-individual-nfc=$WORK/digits-individual-nfc" --dir "digits-runs=$WORK/digits-runs")
  else bad "write the Digits variants"; fi
else
  bad "build the Qwen/Llama 3 style tokenizers"
fi
SUMMARY_PREFIX=tokenizer-validate: run_oracle "$WORK/val.log" "$PY" "$ROOT/validation/tokenizer/validate.py" --ctl "$CTL" --work "$WORK/val" "${dirs[@]}"

# Bad input: one clear line, exit 1 (runtime) or 2 (usage).
q="$built/qwen/tokenizer.json"
printf '{"model": {"type": "BPE", "vocab": {"a": 0' >"$WORK/trunc.json"
expect_fail "truncated tokenizer.json" 1 'trunc.json: not valid JSON' "$CTL" tokenize --tokenizer "$WORK/trunc.json" --text x
printf '{"model": {"type": "WordPiece", "vocab": {}}}' >"$WORK/wp.json"
expect_fail "WordPiece model refused" 1 "model type 'WordPiece' is not supported" "$CTL" tokenize --tokenizer "$WORK/wp.json" --text x
expect_fail "missing file" 1 'nope.json' "$CTL" tokenize --tokenizer "$WORK/nope.json" --text x
expect_fail "no input flag" 2 'exactly one of' "$CTL" tokenize --tokenizer "$q"
printf '"ok"\n[1,2]\n' >"$WORK/bad.jsonl"
expect_fail "jsonl line that is not a string" 1 'bad.jsonl:2' "$CTL" tokenize --tokenizer "$q" --jsonl "$WORK/bad.jsonl"
expect_fail "id outside the vocabulary" 1 'id 99999999 at position 1 is not in the vocabulary' "$CTL" detokenize --tokenizer "$q" --ids '[1,99999999]'
# Chat templates from the CLI: any template renders (here Python's str() of the messages), in
# transformers' order of sources; errors name the file, line and column.
printf '{"chat_template": "{{ messages }}", "bos_token": "<|endoftext|>"}' >"$WORK/tokenizer_config.json"
cp "$q" "$WORK/tokenizer.json"
printf '[{"role":"user","content":"hi"}]\n{"messages": [{"role":"user","content":"x"}], "tools": [{"type": "function"}]}\n' >"$WORK/chat.jsonl"
check "tokenizer_config.json's chat_template renders" "$CTL" tokenize --tokenizer "$WORK/tokenizer.json" --chat-jsonl "$WORK/chat.jsonl" --print-text
if [ "$(head -1 "$WORK/last.out")" = '"[{'"'"'role'"'"': '"'"'user'"'"', '"'"'content'"'"': '"'"'hi'"'"'}]"' ]; then ok "str() of the messages"; else bad "str() of the messages: $(cat "$WORK/last.out")"; fi
printf '{{ bos_token }}{{ messages[0].content }}{%% if tools %%}+{{ tools | length }} tool{%% endif %%}' >"$WORK/chat_template.jinja"
check "chat_template.jinja wins over tokenizer_config.json" "$CTL" tokenize --tokenizer "$WORK/tokenizer.json" --chat-jsonl "$WORK/chat.jsonl" --print-text
if [ "$(cat "$WORK/last.out" | tr '\n' ' ')" = '"<|endoftext|>hi" "<|endoftext|>x+1 tool" ' ]; then ok "chat_template.jinja text, tools from the row"; else bad "chat_template.jinja: $(cat "$WORK/last.out")"; fi
printf '{{ greeting }} {{ strftime_now("%%Y-%%m-%%d %%H:%%M") }}' >"$WORK/other.jinja"
check "--chat-template FILE, --chat-template-kwargs and --chat-time" env TZ=UTC "$CTL" tokenize --tokenizer "$WORK/tokenizer.json" --chat-jsonl "$WORK/chat.jsonl" --print-text \
  --chat-template "$WORK/other.jinja" --chat-template-kwargs '{"greeting": "hé"}' --chat-time 2026-03-07T12:34:56
if [ "$(head -1 "$WORK/last.out")" = '"hé 2026-03-07 12:34"' ]; then ok "kwargs and the fixed clock"; else bad "kwargs/clock: $(cat "$WORK/last.out")"; fi
printf '{%% if false %%}x{%% endif %%}' >"$WORK/empty.jinja"
check "an empty rendering prints \"\"" "$CTL" tokenize --tokenizer-config "$WORK/tokenizer_config.json" --chat-jsonl "$WORK/chat.jsonl" --chat-template "$WORK/empty.jinja" --print-text
if [ "$(cat "$WORK/last.out" | tr '\n' ' ')" = '"" "" ' ]; then ok "empty renderings"; else bad "empty renderings: $(cat "$WORK/last.out")"; fi
# A template past the work budget (a 1000 x 999 loop of 'b' in a 16 MB string ran past 60 s) fails
# in seconds with one line naming its template line.
printf '{%% set s = "a" * 16000000 %%}\n{%% for i in range(1000) %%}{%% for j in range(999) %%}{%% if "b" in s %%}x{%% endif %%}{%% endfor %%}{%% endfor %%}' >"$WORK/slow.jinja"
t0=$(date +%s)
expect_fail "a template past the work budget" 1 'slow.jinja:2: work budget of 268435456 bytes exceeded' timeout 30 "$CTL" tokenize --tokenizer-config "$WORK/tokenizer_config.json" --chat-jsonl "$WORK/chat.jsonl" --chat-template "$WORK/slow.jinja" --print-text
[ $(($(date +%s) - t0)) -le 10 ] && ok "refused within 10 s" || bad "the work budget took $(($(date +%s) - t0)) s"
printf '{%% for m in messages %%}\n{{ m.content }\n' >"$WORK/broken.jinja"
expect_fail "a template that does not parse" 1 'broken.jinja:2:' "$CTL" tokenize --tokenizer "$WORK/tokenizer.json" --chat-jsonl "$WORK/chat.jsonl" --chat-template "$WORK/broken.jinja"
printf '{%% if messages[0].content == "x" %%}{{ raise_exception("no x here") }}{%% endif %%}ok' >"$WORK/raise.jinja"
expect_fail "raise_exception stops the run" 1 'chat.jsonl:2: no x here' "$CTL" tokenize --tokenizer "$WORK/tokenizer.json" --chat-jsonl "$WORK/chat.jsonl" --chat-template "$WORK/raise.jinja" --print-text
check "--keep-going: the failed row is a JSON error line" "$CTL" tokenize --tokenizer-config "$WORK/tokenizer_config.json" --chat-jsonl "$WORK/chat.jsonl" --chat-template "$WORK/raise.jinja" --print-text --keep-going
if [ "$(cat "$WORK/last.out" | tr '\n' ' ')" = '"ok" {"error": "no x here"} ' ]; then ok "--keep-going lines"; else bad "--keep-going: $(cat "$WORK/last.out")"; fi
expect_fail "bad --chat-template-kwargs" 1 'chat-template-kwargs: not a JSON object' "$CTL" tokenize --tokenizer "$WORK/tokenizer.json" --chat-jsonl "$WORK/chat.jsonl" --chat-template-kwargs '[1'
expect_fail "bad --chat-time" 2 'chat-time' "$CTL" tokenize --tokenizer "$WORK/tokenizer.json" --chat-jsonl "$WORK/chat.jsonl" --chat-time yesterday
expect_fail "unknown template name" 1 'no chat template named "rag"' "$CTL" tokenize --tokenizer "$WORK/tokenizer.json" --chat-jsonl "$WORK/chat.jsonl" --chat-template-name rag
rm "$WORK/chat_template.jinja"
printf '{}' >"$WORK/tokenizer_config.json"
expect_fail "no chat template anywhere" 1 'no chat template.*--prompt-format' "$CTL" tokenize --tokenizer "$WORK/tokenizer.json" --chat-jsonl "$WORK/chat.jsonl"
printf '[{"role":"user","content":"hi"}]\n' >"$WORK/chat1.jsonl"
check "--prompt-format renders without a template" "$CTL" tokenize --tokenizer "$WORK/tokenizer.json" --chat-jsonl "$WORK/chat1.jsonl" --prompt-format 'Q: {prompt}
A:' --print-text
if [ "$(cat "$WORK/last.out")" = '"Q: hi\nA:"' ]; then ok "--prompt-format text"; else bad "--prompt-format text: $(cat "$WORK/last.out")"; fi
check "round trip on the command line" bash -c "ids=\$('$CTL' tokenize --tokenizer '$q' --text 'héllo <|im_end|> 42'); [ \"\$('$CTL' detokenize --tokenizer '$q' --ids \"\$ids\")\" = 'héllo <|im_end|> 42' ]"
finish
