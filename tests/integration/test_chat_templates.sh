#!/usr/bin/env bash
# pail's chat-template interpreter against transformers' apply_chat_template on the 44 real
# chat templates of ../shared/reference/chat-templates (validation/tokenizer/chat_templates.py):
# one check per template, passing when every conversation renders byte for byte as
# transformers renders it, or is refused where transformers refuses. SKIP when the reference
# folder is absent (a clone of pail does not have it). PAIL_CHAT_TEMPLATES_JSON keeps the
# machine-readable report.
source "$(dirname "$0")/lib.sh"
TEST_NAME=chat_templates
PY=$(venv)/bin/python
REF="${PAIL_REFERENCE_DIR:-$ROOT/../shared/reference}"  # env: tests of the SKIP path
"$PY" "$ROOT/validation/tokenizer/chat_templates.py" --ctl "$BIN/grpo-ctl" --reference "$REF" --work "$WORK/chat" \
  --json "${PAIL_CHAT_TEMPLATES_JSON:-$WORK/chat-templates.json}" >"$WORK/chat.log" 2>&1
vrc=$?
while IFS= read -r line; do  # each template counts as one check here
  case "$line" in
    "PASS "*) ok "${line#PASS }" ;;
    "FAIL "*) bad "${line#FAIL }" ;;
    *) echo "    $line" ;;
  esac
done <"$WORK/chat.log"
[ "$vrc" -eq 0 ] || grep -q '^FAIL' "$WORK/chat.log" || bad "chat_templates.py exited $vrc"
finish
