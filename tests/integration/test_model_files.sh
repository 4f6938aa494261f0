#!/usr/bin/env bash
# Hugging Face model files: validation/model/check_model_files.py (pail-written
# checkpoints load in transformers; transformers-written ones load in pail with
# identical values), the Qwen2.5-0.5B shape (bf16, ~1 GB, ~1 min; skip with
# PAIL_SKIP_BIG=1), real tokenizers copied by init-model, and grpo-ctl's errors
# on bad model folders. Prints "model-files: N passed, N failed".
source "$(dirname "$0")/lib.sh"
TEST_NAME=model-files
CTL="$BIN/grpo-ctl"
PY="$(venv)/bin/python"

big=--big
[ "${PAIL_SKIP_BIG:-0}" = 1 ] && big= && echo "  (PAIL_SKIP_BIG=1: the Qwen2.5-0.5B shape is skipped)"
"$PY" "$ROOT/validation/model/check_model_files.py" --grpo-ctl "$CTL" --work "$WORK/val" $big >"$WORK/val.log" 2>&1
sed 's/^/  /' "$WORK/val.log" | grep -E '^  (ok|FAIL)|Traceback|Error' | head -100
line=$(grep -E '^model-files: [0-9]+ passed, [0-9]+ failed' "$WORK/val.log")
if [ -n "$line" ]; then
  PASS=$((PASS + $(echo "$line" | awk '{print $2}'))); FAIL=$((FAIL + $(echo "$line" | awk '{print $4}')))
else
  bad "check_model_files.py did not finish"; tail -20 "$WORK/val.log" | sed 's/^/        /'
fi

# Real tokenizers (when the shared references are present): ids taken from tokenizer_config.json.
REF=${PAIL_TOKENIZER_REF:-/work/shared/reference/tokenizers}
if [ -f "$REF/llama3/tokenizer.json" ]; then
  check "init-model --tokenizer llama3" "$CTL" init-model --out "$WORK/l3" --shape tiny --vocab 128256 --tokenizer "$REF/llama3"
  check "llama3 tokenizer files copied" cmp "$REF/llama3/tokenizer.json" "$WORK/l3/tokenizer.json"
  check "bos/eos from the llama3 tokenizer" grep -q '"bos_token_id": 128000' "$WORK/l3/generation_config.json"
  check "eos from the llama3 tokenizer" grep -q '"eos_token_id": 128001' "$WORK/l3/config.json"
  expect_fail "vocab smaller than the tokenizer" 2 "ids up to 128255; --vocab 512 is too small" \
    "$CTL" init-model --out "$WORK/l3b" --shape tiny --tokenizer "$REF/llama3"
fi
if [ -f "$REF/qwen3/tokenizer.json" ]; then
  check "init-model --tokenizer qwen3" "$CTL" init-model --out "$WORK/q3" --shape tiny --model-type qwen3 \
    --vocab 151936 --tokenizer "$REF/qwen3"
  check "qwen3 tokenizer has no bos: null" grep -q '"bos_token_id": null' "$WORK/q3/config.json"
  check "qwen3 eos <|im_end|> = 151645" grep -q '"eos_token_id": 151645' "$WORK/q3/generation_config.json"
  check "model-info reads it" "$CTL" model-info --model "$WORK/q3"
fi

# Bad folders and files: one clear line naming the thing, exit 1 (2 for usage).
"$CTL" init-model --out "$WORK/m" --shape tiny --model-type qwen2 --dtype f32 >/dev/null 2>&1
check "model-info on a fresh tiny model" "$CTL" model-info --model "$WORK/m"
expect_fail "no folder" 1 "--model /no/such/dir: no such folder" "$CTL" model-info --model /no/such/dir
expect_fail "no --model" 2 "--model DIR is required" "$CTL" model-info
cp -r "$WORK/m" "$WORK/mt"; sed -i 's/"model_type": "qwen2"/"model_type": "gemma"/' "$WORK/mt/config.json"
expect_fail "unsupported model_type" 1 "model_type = 'gemma' is not supported \(pail runs llama, qwen2, qwen3, mistral" \
  "$CTL" model-info --model "$WORK/mt"
"$CTL" init-model --out "$WORK/mw" --shape tiny --model-type mistral --sliding-window 8 >/dev/null 2>&1
check "model-info names mistral's window" grep -q "^sliding_window: 8$" <("$CTL" model-info --model "$WORK/mw")
cp -r "$WORK/mw" "$WORK/mw0"; sed -i 's/"sliding_window": 8/"sliding_window": 0/' "$WORK/mw0/config.json"
expect_fail "mistral window 0" 1 "sliding_window = 0 is out of range" "$CTL" model-info --model "$WORK/mw0"
expect_fail "a window for llama" 2 "--sliding-window: only model types mistral, mixtral, phi3, cohere2, gemma2, gemma3_text and gpt_oss have one \(not llama\)" \
  "$CTL" init-model --out "$WORK/z" --shape tiny --sliding-window 8
# phi3: fused qkv_proj / gate_up_proj in the file, partial rotary and a window in config.json
check "init-model phi3" "$CTL" init-model --out "$WORK/p3" --shape tiny --model-type phi3 --partial-rotary-factor 0.75 \
  --sliding-window 8 --dtype f32
check "model-info names phi3's fused tensors" grep -q "^fused: self_attn.qkv_proj (q, k, v), mlp.gate_up_proj (gate, up)$" \
  <("$CTL" model-info --model "$WORK/p3")
check "model-info: 12 of 16 dims rotated" grep -q "^partial_rotary: 12 of 16 head dims rotated$" <("$CTL" model-info --model "$WORK/p3")
check "phi3's checkpoint holds qkv_proj" grep -q "model.layers.1.self_attn.qkv_proj.weight" <("$CTL" model-info --model "$WORK/p3" --sums)
expect_fail "a partial rotary factor for llama" 2 "--partial-rotary-factor: only model type phi3 has one \(not llama\)" \
  "$CTL" init-model --out "$WORK/z" --shape tiny --partial-rotary-factor 0.5
cp -r "$WORK/m" "$WORK/ms"; sed -i 's/"use_sliding_window": false/"use_sliding_window": true/' "$WORK/ms/config.json"
expect_fail "sliding window in use" 1 "use_sliding_window = true" "$CTL" model-info --model "$WORK/ms"
cp -r "$WORK/m" "$WORK/mx"; truncate -s -4 "$WORK/mx/model.safetensors"
expect_fail "truncated safetensors" 1 "mx/model.safetensors: tensor 'model.norm.weight': data_offsets end [0-9]+ is past the data section" \
  "$CTL" model-info --model "$WORK/mx"
cp -r "$WORK/m" "$WORK/mh"; printf '\xff\xff\xff\x7f' | dd of="$WORK/mh/model.safetensors" bs=1 seek=0 conv=notrunc status=none
expect_fail "header length past the end" 1 "header length [0-9]+ is larger than the file" \
  "$CTL" model-info --model "$WORK/mh"
cp -r "$WORK/m" "$WORK/ml"; sed -i 's/"num_hidden_layers": 2/"num_hidden_layers": 3/' "$WORK/ml/config.json"
expect_fail "config with more layers than the weights" 1 "tensor 'model.layers.2.input_layernorm.weight' is missing" \
  "$CTL" model-info --model "$WORK/ml"
cp -r "$WORK/m" "$WORK/mv"; sed -i 's/"vocab_size": 512/"vocab_size": 500/' "$WORK/mv/config.json"
expect_fail "vocab mismatch" 1 "mv/model.safetensors: tensor '(lm_head|model.embed_tokens).weight' has shape \[512, 64\], config.json implies \[500, 64\]" \
  "$CTL" model-info --model "$WORK/mv"
expect_fail "unknown shape" 2 "--shape 'huge'" "$CTL" init-model --out "$WORK/z" --shape huge
expect_fail "0.5B shape is qwen2" 2 "qwen2 only" "$CTL" init-model --out "$WORK/z" --shape qwen2.5-0.5b --model-type llama
expect_fail "sizes missing" 2 "sizes must be positive" "$CTL" init-model --out "$WORK/z" --hidden 64
expect_fail "bad dtype" 2 "--dtype 'f8'" "$CTL" init-model --out "$WORK/z" --shape tiny --dtype f8
# mixtures of experts: model-info's E, K, Fe and active parameters; refusals name the field
"$CTL" init-model --out "$WORK/q2m" --shape tiny --model-type qwen2_moe --dtype f32 >/dev/null 2>&1
check "model-info: qwen2_moe's experts" grep -q "^num_experts (E): 4$" <("$CTL" model-info --model "$WORK/q2m")
check "model-info: qwen2_moe's shared expert" grep -q "^shared_expert: intermediate_size 64 under a sigmoid gate$" \
  <("$CTL" model-info --model "$WORK/q2m")
check "model-info: active parameters" grep -qE "^parameters_active: [0-9]+ a token \(of [0-9]+: K of E experts\)$" \
  <("$CTL" model-info --model "$WORK/q2m")
cp -r "$WORK/q2m" "$WORK/q2d"; sed -i 's/"mlp_only_layers": \[\]/"mlp_only_layers": [1]/' "$WORK/q2d/config.json"
expect_fail "dense layers in an MoE model" 1 "mlp_only_layers is not empty" "$CTL" model-info --model "$WORK/q2d"
cp -r "$WORK/q2m" "$WORK/q2e"
"$PY" -c "import sys; from safetensors.torch import load_file, save_file; f = sys.argv[1]; t = load_file(f)
del t['model.layers.0.mlp.experts.3.gate_proj.weight']; save_file(t, f, metadata={'format': 'pt'})" \
  "$WORK/q2e/model.safetensors"
expect_fail "a missing expert" 1 "tensor 'model.layers.0.mlp.experts.3.gate_proj.weight' is missing" \
  "$CTL" model-info --model "$WORK/q2e"
check "init-model granite-3.1-1b-a400m's config" "$CTL" init-model --out "$WORK/g1" --shape granite-3.1-1b-a400m \
  --layers 1 --vocab 512
expect_fail "experts for a dense type" 2 "--experts, --experts-per-token, --expert-ffn, --norm-topk-prob: model type llama is not a mixture of experts" \
  "$CTL" init-model --out "$WORK/z" --shape tiny --experts 4
expect_fail "more experts a token than experts" 2 "num_experts_per_tok 5 is not in \[1, num_experts 4\]" \
  "$CTL" init-model --out "$WORK/z" --shape tiny --model-type mixtral --experts-per-token 5
# gpt_oss: model-info's sinks, YaRN and clamp; its published MXFP4 config refused by name
"$CTL" init-model --out "$WORK/oss" --shape tiny --model-type gpt_oss --dtype f32 >/dev/null 2>&1
check "model-info: gpt_oss's sinks" grep -q "^attention_sinks: a learned logit per head" <("$CTL" model-info --model "$WORK/oss")
check "model-info: gpt_oss's YaRN" grep -q "^rope_scaling: yarn factor=32 original_max=4096 beta_fast=32 beta_slow=1 truncate=false" \
  <("$CTL" model-info --model "$WORK/oss")
check "model-info: gpt_oss's layers" grep -q "^layer_types: sliding full$" <("$CTL" model-info --model "$WORK/oss")
cp -r "$WORK/oss" "$WORK/ossq"
sed -i 's/"model_type": "gpt_oss",/"model_type": "gpt_oss", "quantization_config": {"quant_method": "mxfp4"},/' "$WORK/ossq/config.json"
expect_fail "gpt_oss's MXFP4 experts" 1 "quantization_config \(quant_method 'mxfp4'\) is not supported" \
  "$CTL" model-info --model "$WORK/ossq"
check "init-model --help" "$CTL" init-model --help
finish
