#!/usr/bin/env bash
# The decoder against Hugging Face transformers + PEFT: packed per-token
# log-probs, LoRA A/B gradients (with and without recomputation) and full
# fine-tuning gradients, for llama / qwen2 / qwen3 / mistral / exaone / granite /
# olmo2 / smollm3 / phi3 / cohere / cohere2 / gemma3_text / gemma2 variants; for mistral (a
# sliding window), exaone, granite (its four multipliers), olmo2 (post-norms), smollm3 (a layer
# without RoPE), phi3 (fused projections and LoRA modules, partial rotary, longrope, a window),
# cohere (parallel block, LayerNorms, paired RoPE), cohere2 (windowed and full layers), gemma3_text
# and gemma2 (sandwich norms, sliding and global layers, softcaps; gemma3 on two RoPE bases) also
# bf16 on the exact path and generation (prefill + KV-cache decode) against
# transformers' generate.
source "$(dirname "$0")/lib.sh"
BUILD=${BUILD:-build}
make -s -C "$ROOT" "$BUILD/tools/model_driver" "$BUILD/tools/rollout_driver" >/dev/null ||
  { bad "build model_driver, rollout_driver"; finish; exit 1; }
check "decoder matches transformers + PEFT" env PAIL_CTL="$BIN/grpo-ctl" "$(venv)/bin/python" "$ROOT/validation/model/check_forward.py" \
  "$ROOT/$BUILD/tools/model_driver" "$WORK" "$ROOT/$BUILD/tools/rollout_driver"
grep -E "^  (ok|FAIL)|model-forward:" "$WORK/last.out"
finish
