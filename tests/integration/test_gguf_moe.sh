#!/usr/bin/env bash
# grpo-ctl import-gguf on the mixtures of experts llama.cpp writes (validation/model/gguf_moe.py):
# tiny random qwen3_moe, qwen2_moe, olmoe, granitemoe, mixtral and gpt_oss checkpoints converted by
# llama.cpp's own convert_hf_to_gguf.py (the tree mk/llamacpp.sh pins: its cached build's, else
# extracted from the sdist; SKIP when PyPI is unreachable) at f32, f16 and q8_0 (gpt-oss also with
# its expert matrices MXFP4, dequantized at import), and Q4_0 (Q4_K_M
# for a C = Fe = 256 qwen3_moe: Q4_K experts, layer 1's down Q6_K) by llama-quantize when
# mk/llamacpp.sh's build is cached; imported, every tensor (each expert's rows)
# bit-equal to the checkpoint's (f32) or to gguf-py's dequantization of the file, log-probs within
# 1e-4 of transformers on the checkpoint or on those values (quantized experts computed on as their
# blocks); qwen3moe renormalised as llama.cpp runs it; a layer whose gate and up differ in type
# held as fp32; refusals one line each (gguf_moe.py run writes their files).
source "$(dirname "$0")/lib.sh"
PY=$(venv)/bin/python
CTL="$BIN/grpo-ctl"
V="$ROOT/validation/model/gguf_moe.py"
VER=0.3.36 FILE=llama_cpp_python-0.3.36.tar.gz SHA=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
cache=$(bash "$ROOT/mk/cache.sh")
src=
for d in "$cache"/llamacpp-"$VER"-*/src; do [ -f "$d/convert_hf_to_gguf.py" ] && [ -d "$d/conversion" ] && src=$d && break; done
if [ -z "$src" ]; then
  if ! sdist=$(bash "$ROOT/mk/pypi-fetch.sh" llama-cpp-python "$VER" "$FILE" "$SHA" 2>"$WORK/fetch.err"); then
    if grep -q 'offline?' "$WORK/fetch.err"; then echo "SKIP $FILE: PyPI unreachable ($(head -1 "$WORK/fetch.err"))"; finish; exit; fi
    bad "fetch $FILE: $(head -1 "$WORK/fetch.err")"; finish; exit 1
  fi
  v=llama_cpp_python-$VER/vendor/llama.cpp
  check "extract convert_hf_to_gguf.py, conversion/ and gguf-py/ from $FILE" \
    tar -xzf "$sdist" -C "$WORK" --strip-components=3 "$v/convert_hf_to_gguf.py" "$v/conversion" "$v/gguf-py"
  src=$WORK
fi
quant=()
if lc=$(bash "$ROOT/mk/llamacpp.sh" --cached 2>/dev/null); then quant=(--quantize "$lc/bin/llama-quantize")
else echo "SKIP Q4_0 / Q4_K_M files: no llama.cpp build cached (bash mk/llamacpp.sh builds llama-quantize, ~7 min)"; fi

"$PY" "$V" run "$WORK" --src "$src" --ctl "$CTL" "${quant[@]}" >"$WORK/run.log" 2>&1
while IFS= read -r line; do
  case "$line" in "PASS "*) ok "${line#PASS }" ;; "FAIL "*) bad "${line#FAIL }" ;; esac
done <"$WORK/run.log"
n=$(grep -c '^PASS\|^FAIL' "$WORK/run.log")
[ "$n" -ge 42 ] || { bad "gguf_moe.py run: $n results (42 without llama-quantize):"; grep -v "^INFO\|it/s\]" "$WORK/run.log" | tail -5 | sed 's/^/        /'; }
grep -q '"norm_topk_prob": true' "$WORK/qwen3moe-unnorm-f32/config.json" && grep -q '"norm_topk_prob": false' "$WORK/olmoe-f32/config.json" &&
  grep -q '"shared_expert_intermediate_size": 48' "$WORK/qwen2moe-f32/config.json" && grep -q '"num_local_experts": 4' "$WORK/mixtral-f32/config.json" &&
  grep -q '"embedding_multiplier": 12' "$WORK/granitemoe-f32/config.json" &&
  ok "config.json: qwen3moe renormalised, olmoe not; qwen2moe's shared expert 48 wide; a llama file with experts as mixtral; granitemoe's multipliers" ||
  bad "an imported config.json lacks norm_topk_prob, the shared expert's width, mixtral's experts or granitemoe's multipliers"

imp() { "$CTL" import-gguf "$WORK/$1.gguf" --out "$WORK/x-$1"; }
expect_fail "an expert tensor missing" 1 "no-up.gguf: no tensor 'blk.1.ffn_up_exps.weight' \(a qwen3_moe layer's experts" imp no-up
expect_fail "3 experts stacked for 4" 1 "three-experts.gguf: tensor 'blk.0.ffn_down_exps.weight' is \[32, 64, 3\], expected \[32, 64, 4\]" imp three-experts
expect_fail "no expert_count" 1 "no-count.gguf: qwen3moe.expert_count is missing" imp no-count
expect_fail "expert_used_count past expert_count" 1 "k5.gguf: qwen3moe.expert_used_count is 5; pail loads 1..4" imp k5
expect_fail "qwen2moe without its shared-expert gate" 1 "no-shexp.gguf: no tensor 'blk.0.ffn_gate_inp_shexp.weight'" imp no-shexp
expect_fail "granitemoe with a shared expert" 1 "granite-shared.gguf: granitemoe.expert_shared_feed_forward_length is 48: .*granitemoeshared is not supported" imp granite-shared
expect_fail "a Mixtral file with a Q bias" 1 "mixtral-bias.gguf: tensor 'blk.0.attn_q.bias' has no place in a mixtral model" imp mixtral-bias
expect_fail "gpt-oss without layer 1's sinks" 1 "gpt-oss-no-sinks.gguf: no tensor 'blk.1.attn_sinks.weight'" imp gpt-oss-no-sinks
expect_fail "gpt-oss without expert_feed_forward_length" 1 "gpt-oss-no-fe.gguf: gpt-oss.expert_feed_forward_length is missing" imp gpt-oss-no-fe
expect_fail "gpt-oss with an up bias of 3 experts" 1 "gpt-oss-up-bias.gguf: tensor 'blk.0.ffn_up_exps.bias' is \[32, 3\], expected \[32, 4\]" imp gpt-oss-up-bias
lt() { tr -d ' \n' <"$WORK/$1/config.json" | grep -o '"layer_types":\[[^]]*\]'; }
imp gpt-oss-pattern >/dev/null && imp gpt-oss-period0 >/dev/null && imp gpt-oss-norope >/dev/null &&
  [ "$(lt x-gpt-oss-pattern)" = '"layer_types":["full_attention","sliding_attention"]' ] &&
  [ "$(lt x-gpt-oss-period0)" = '"layer_types":["sliding_attention","sliding_attention"]' ] &&
  [ "$(lt gpt-oss-f32)" = '"layer_types":["sliding_attention","full_attention"]' ] &&
  grep -q '"rope_type": "yarn"' "$WORK/gpt-oss-f32/config.json" && ! grep -q yarn "$WORK/x-gpt-oss-norope/config.json" &&
  ok "gpt-oss sliding_window_pattern: [false, true] -> full, sliding; 0 -> all sliding; absent -> llama.cpp's 2 (sliding, full); no rope.scaling.type: no YaRN" ||
  bad "gpt-oss layer pattern / RoPE scaling: $(lt x-gpt-oss-pattern) $(lt x-gpt-oss-period0) $(lt gpt-oss-f32)"
"$CTL" import-gguf "$WORK/gpt-oss-mxfp4.gguf" --out "$WORK/x-mxfp4" >/dev/null 2>"$WORK/mxfp4.err" &&
  grep -q "MXFP4 tensors dequantized to bf16 at import" "$WORK/mxfp4.err" && grep -q '"torch_dtype": "bfloat16"' "$WORK/x-mxfp4/config.json" &&
  ok "gpt-oss MXFP4 experts without --dequantize: imported as bf16, said on stderr" ||
  bad "gpt-oss MXFP4 experts without --dequantize: $(head -1 "$WORK/mxfp4.err")"
expect_fail "Q3_K experts without --dequantize" 1 "q3k-experts.gguf: tensor 'blk.0.ffn_gate_exps.weight' is Q3_K, a type pail does not compute on.*--dequantize" imp q3k-experts
check "Q3_K experts with --dequantize" "$CTL" import-gguf "$WORK/q3k-experts.gguf" --out "$WORK/q3k" --dequantize
finish
