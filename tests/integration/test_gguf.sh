#!/usr/bin/env bash
# grpo-ctl import-gguf against gguf-py and transformers (validation/model/gguf_files.py):
# every tensor type pail reads dequantized bit-equal to gguf.quants.dequantize (K-quants
# as random blocks with finite scales); small random llama / qwen2 / qwen3 files written
# by gguf-py's GGUFWriter, imported, their tokenizer ids equal to the tokenizer transformers
# builds from the file and their log-probs within 1e-4 of from_pretrained(gguf_file=) in
# f32; the import byte-deterministic; refusals one line each.
source "$(dirname "$0")/lib.sh"
TEST_NAME=gguf
PY=$(venv)/bin/python
CTL="$BIN/grpo-ctl"
V="$ROOT/validation/model/gguf_files.py"
BUILD=${BUILD:-build}
make -s -C "$ROOT" "$BUILD/tools/gguf_dequant" >/dev/null || { bad "build gguf_dequant"; finish; exit 1; }

check "gguf-py writes a file of every type" "$PY" "$V" types "$WORK/types.gguf"
mkdir -p "$WORK/deq"
check "pail dequantizes it" "$ROOT/$BUILD/tools/gguf_dequant" "$WORK/types.gguf" "$WORK/deq"
if "$PY" "$V" check-dequant "$WORK/types.gguf" "$WORK/deq" >"$WORK/deq.log" 2>&1; then
  ok "13 types bit-equal to gguf.quants.dequantize"
else bad "dequantization differs:"; sed 's/^/        /' "$WORK/deq.log"; fi

"$PY" -c "import sys; sys.path.insert(0, '$ROOT/validation/model'); import gguf_files, json
for s in gguf_files.STRINGS: print(json.dumps(s))" >"$WORK/strings.jsonl"
for spec in llama:Q4_1 llama:Q8_0 qwen2:Q4_0 qwen2:Q5_1 qwen3:Q5_0 qwen3:F16; do
  arch=${spec%:*} qt=${spec#*:} f="$WORK/$arch-$qt.gguf" d="$WORK/$arch-$qt"
  check "$arch $qt: gguf-py writes it" "$PY" "$V" model "$f" --arch "$arch" --qtype "$qt"
  check "$arch $qt: import-gguf --dtype f32" "$CTL" import-gguf "$f" --out "$d" --dtype f32
  "$CTL" tokenize --tokenizer "$d/tokenizer.json" --jsonl "$WORK/strings.jsonl" >"$WORK/ids-$arch-$qt.jsonl"
  if "$PY" "$V" check-import "$f" "$d" --ctl "$CTL" --pail-ids "$WORK/ids-$arch-$qt.jsonl" \
       --ids-out "$WORK/lp-$arch-$qt.jsonl" >"$WORK/ci.log" 2>&1; then
    ok "$arch $qt: tokenizer ids equal, $(grep '^logprobs' "$WORK/ci.log")"
  else bad "$arch $qt against transformers:"; grep -v "it/s\]" "$WORK/ci.log" | tail -8 | sed 's/^/        /'; fi
done

# same file -> same bytes
"$CTL" import-gguf "$WORK/llama-Q4_1.gguf" --out "$WORK/a" >/dev/null && "$CTL" import-gguf "$WORK/llama-Q4_1.gguf" --out "$WORK/b" >/dev/null
if [ -n "$(ls "$WORK/a")" ] && diff -r "$WORK/a" "$WORK/b" >/dev/null; then ok "two bf16 imports are byte-identical ($(ls "$WORK/a" | tr '\n' ' '))"
else bad "two imports of one file differ"; fi

# refusals
head -c 100 "$WORK/llama-Q4_1.gguf" >"$WORK/cut.gguf"
expect_fail "a truncated file" 1 "cut.gguf: .*(runs past the end|more than the file holds)" "$CTL" import-gguf "$WORK/cut.gguf" --out "$WORK/x"
"$PY" - "$WORK" <<'PY'
import sys, numpy as np, gguf
w = gguf.GGUFWriter(sys.argv[1] + "/spm.gguf", "llama")
w.add_tokenizer_model("llama"); w.add_token_list(["<unk>", "a"])
w.add_tensor("token_embd.weight", np.zeros((2, 4), np.float32))
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
w = gguf.GGUFWriter(sys.argv[1] + "/gemma.gguf", "gemma")
w.add_tensor("token_embd.weight", np.zeros((2, 4), np.float32))
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
PY
expect_fail "a SentencePiece tokenizer" 1 "tokenizer.ggml.model is 'llama'.*only 'gpt2'" "$CTL" import-gguf "$WORK/spm.gguf" --out "$WORK/x"
expect_fail "another architecture" 1 "architecture 'gemma'" "$CTL" import-gguf "$WORK/gemma.gguf" --out "$WORK/x"
# rope.freq_base = inf was dropped from config.json (JSON has no inf) and the model loaded with
# 10000; a chat template with a NUL was written out, and every later load refused it.
for base in inf nan 0; do
  check "gguf-py writes rope.freq_base=$base" "$PY" "$V" model "$WORK/rope-$base.gguf" --arch qwen2 --qtype F16 --rope-base "$base"
  expect_fail "rope.freq_base = $base" 1 "rope-$base.gguf: qwen2.rope.freq_base is $base; need a finite number > 0" \
    "$CTL" import-gguf "$WORK/rope-$base.gguf" --out "$WORK/rope-$base"
done
check "gguf-py writes a chat template with a NUL" "$PY" "$V" model "$WORK/nul.gguf" --arch qwen2 --qtype F16 --chat-template 'a\0b'
expect_fail "a chat template holding a NUL" 1 "nul.gguf: tokenizer.chat_template holds a NUL byte at offset 1 of 3" \
  "$CTL" import-gguf "$WORK/nul.gguf" --out "$WORK/nul"
[ ! -e "$WORK/nul/chat_template.jinja" ] && ok "no template written" || bad "nul/chat_template.jinja was written"
expect_fail "--dtype f16" 2 "use bf16 or f32" "$CTL" import-gguf "$WORK/spm.gguf" --out "$WORK/x" --dtype f16
expect_fail "no --out" 2 "--out DIR is required" "$CTL" import-gguf "$WORK/spm.gguf"
finish
