#!/usr/bin/env bash
# Mixtures of experts against Hugging Face transformers + PEFT (validation/model/check_moe.py):
# qwen3_moe (norm_topk_prob), qwen2_moe (shared expert under its gate), olmoe (whole-projection
# q/k norms), granitemoe (multipliers, fused expert tensors), mixtral (a window), gpt_oss (sinks,
# biases, the clamped SwiGLU, YaRN, sliding and full layers, transposed interleaved experts): packed per-token
# log-probs, full fine-tuning gradients (router and experts included), LoRA on attention, the
# experts and the shared expert (PEFT's target_parameters) with and without recomputation, the
# PEFT round trip and the merged checkpoint through grpo-ctl, and generation through the paged
# KV cache against transformers' generate.
source "$(dirname "$0")/lib.sh"
BUILD=${BUILD:-build}
make -s -C "$ROOT" "$BUILD/tools/model_driver" "$BUILD/tools/rollout_driver" >/dev/null ||
  { bad "build model_driver, rollout_driver"; finish; exit 1; }
check "mixtures of experts match transformers + PEFT" env PAIL_CTL="$BIN/grpo-ctl" "$(venv)/bin/python" \
  "$ROOT/validation/model/check_moe.py" "$ROOT/$BUILD/tools/model_driver" "$ROOT/$BUILD/tools/rollout_driver" "$WORK"
grep -E "^  (ok|FAIL)|model-moe:" "$WORK/last.out"
finish
