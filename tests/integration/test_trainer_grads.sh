#!/usr/bin/env bash
# grpo-train's first step end to end against PyTorch: crafted shard + non-zero
# LoRA init -> --dump-grads, for every loss aggregation, both ratio types, with
# and without KL (validation/train/check_trainer_grads.py).
source "$(dirname "$0")/lib.sh"
check "trainer LoRA gradients match transformers + PEFT + TRL's formulas" \
  "$(venv)/bin/python" "$ROOT/validation/train/check_trainer_grads.py" "$BIN" "$WORK"
grep -E "^  (ok|FAIL)|trainer-grads:" "$WORK/last.out"
finish
