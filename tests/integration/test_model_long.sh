#!/usr/bin/env bash
# The trainer's forward and backward at long packed sequences (issue 47): a
# tiny Qwen2 with a LoRA adapter at 2048, 4096 and 8192 tokens, with and
# without --recompute, against transformers + PEFT: log-probs (<= 1e-4) and
# LoRA A/B gradients (<= 1e-4 relative), the bounds of test_model_forward.sh
# (validation/model/check_long.py).
source "$(dirname "$0")/lib.sh"
BUILD=${BUILD:-build}
make -s -C "$ROOT" "$BUILD/tools/model_driver" >/dev/null || { bad "build model_driver"; finish; exit 1; }
check "long sequences (2k, 4k, 8k tokens) match transformers + PEFT" "$(venv)/bin/python" \
  "$ROOT/validation/model/check_long.py" "$ROOT/$BUILD/tools/model_driver" "$WORK"
grep -E "^  (ok|FAIL)|model-long:" "$WORK/last.out"
finish
