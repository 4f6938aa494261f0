#!/usr/bin/env bash
# grpo-rollout --env's multi-turn rows against Hugging Face transformers + PEFT
# (validation/rollout/check_episodes.py): a random tiny Qwen2 checkpoint with a
# Qwen-style tokenizer and the qwen3 template, a random LoRA adapter published as
# v0, an environment program answering with tool messages, at T = 1 and 0.7. The
# behaviour log-probs of the model's tokens (1e-4), the environment's tokens
# (log-prob 0, exactly the template's text for its messages), the turns and texts
# the program saw, and a 2-step grpo-train --replay on the shards. One line per check.
source "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=1
"$(venv)/bin/python" "$ROOT/validation/rollout/check_episodes.py" "$BIN" "$WORK" >"$WORK/check.out" 2>"$WORK/check.err"
rc=$?
while IFS= read -r line; do
  case "$line" in
    "  ok   "*) ok "${line#  ok   }" ;;
    "  FAIL "*) bad "${line#  FAIL }" ;;
    env-episodes:*) ;;
    *) echo "$line" ;;
  esac
done <"$WORK/check.out"
if ! grep -q '^env-episodes: ' "$WORK/check.out"; then
  bad "check_episodes.py stopped early (exit $rc):"; tail -5 "$WORK/check.err" | sed 's/^/        /'
elif [ "$rc" -ne 0 ] && [ "$FAIL" -eq 0 ]; then
  bad "check_episodes.py exited $rc"
fi
finish
