#!/usr/bin/env bash
# The decoder against Hugging Face transformers + PEFT: packed per-token
# log-probs, LoRA A/B gradients (with and without recomputation) and full
# fine-tuning gradients, for llama / qwen2 / qwen3 variants.
source "$(dirname "$0")/lib.sh"
BUILD=${BUILD:-build}
make -s -C "$ROOT" "$BUILD/tools/model_driver" >/dev/null || { bad "build model_driver"; finish; exit 1; }
check "decoder matches transformers + PEFT" env PAIL_CTL="$BIN/grpo-ctl" "$(venv)/bin/python" "$ROOT/validation/model/check_forward.py" \
  "$ROOT/$BUILD/tools/model_driver" "$WORK"
grep -E "^  (ok|FAIL)|model-forward:" "$WORK/last.out"
finish
