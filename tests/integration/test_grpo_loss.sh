#!/usr/bin/env bash
# GRPO advantages, loss variants and gradients (src/grpo) against a PyTorch
# autograd reference and TRL's own GRPOTrainer._compute_loss.
source "$(dirname "$0")/lib.sh"
BUILD=${BUILD:-build}
make -s -C "$ROOT" "$BUILD/tools/grpo_loss_driver" >/dev/null || { bad "build grpo_loss_driver"; finish; exit 1; }
check "loss and gradients match PyTorch and TRL" "$(venv)/bin/python" "$ROOT/validation/grpo/check_loss.py" \
  "$ROOT/$BUILD/tools/grpo_loss_driver"
tail -2 "$WORK/last.out"
finish
