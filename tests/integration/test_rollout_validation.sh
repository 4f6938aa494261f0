#!/usr/bin/env bash
# Rollout generation against Hugging Face transformers (+ PEFT): the stored
# behaviour log-probs equal transformers' log-probs of the sampled tokens
# (1e-4), with and without top-k / top-p and an adapter; greedy = argmax;
# the same seed gives the same completions across runs, threads and batch
# sizes; stop ids; shared-prompt prefill once per prompt. llama and qwen3.
source "$(dirname "$0")/lib.sh"
BUILD=${BUILD:-build}
make -s -C "$ROOT" "$BUILD/tools/rollout_driver" >/dev/null || { bad "build rollout_driver"; finish; exit 1; }
check "generation matches transformers" "$(venv)/bin/python" "$ROOT/validation/rollout/check_rollout.py" \
  "$ROOT/$BUILD/tools/rollout_driver" "$WORK"
grep -E "^[a-z0-9-]+:$|^  (ok|FAIL)|rollout:" "$WORK/last.out"
finish
