#!/usr/bin/env bash
# --model by one rule in every tool (src/model/model_path.c): a folder as it is;
# a Hugging Face id from the local Hugging Face cache (HF_HOME, HF_HUB_CACHE,
# models--ORG--NAME/snapshots/<refs/main>); a model not there says how to
# download it; a .gguf file points to grpo-ctl import-gguf. Seconds, no network.
source "$(dirname "$0")/lib.sh"
M="$WORK/model"
"$BIN/grpo-ctl" init-model --out "$M" --shape tiny --vocab 257 --tokenizer "$ROOT/data/tokenizers/bytes" \
  --dtype f32 >/dev/null 2>&1 || { bad "init-model"; finish; exit 1; }
head -4 "$ROOT/data/addition/train.jsonl" >"$WORK/ev.jsonl"
# The cache as huggingface_hub lays it out: blobs linked from a snapshot, refs/main naming it.
R="$WORK/hf/hub/models--acme--tiny-1"
mkdir -p "$R/refs" "$R/snapshots/0123abcd" "$R/snapshots/ffff0000" "$R/blobs"
for f in "$M"/*; do cp "$f" "$R/blobs/$(basename "$f")"; ln -s "../../blobs/$(basename "$f")" "$R/snapshots/0123abcd/"; done
printf 0123abcd >"$R/refs/main"
export HF_HOME="$WORK/hf"
unset HF_HUB_CACHE

echo "a Hugging Face id in the local cache"
check "grpo-ctl model-info --model acme/tiny-1: the snapshot refs/main names" \
  bash -c "'$BIN/grpo-ctl' model-info --model acme/tiny-1 2>'$WORK/mi.err' && grep -q 'the Hugging Face cache.s $R/snapshots/0123abcd' '$WORK/mi.err'"
check "grpo-ctl eval --model acme/tiny-1" bash -c "'$BIN/grpo-ctl' eval --model acme/tiny-1 --dataset '$WORK/ev.jsonl' \
  --max-new-tokens 2 >'$WORK/ev.json' 2>/dev/null && grep -q accuracy_rule '$WORK/ev.json'"
"$BIN/grpo-train" --model acme/tiny-1 --run "file://$WORK/run" --steps 0 --lora-rank 4 >"$WORK/train.log" 2>&1
check "grpo-train --model acme/tiny-1 publishes v0" test -f "$WORK/run/adapters/v00000000.h5"
check "...and its effective configuration names the folder" grep -q "model = $R/snapshots/0123abcd" "$WORK/train.log"
check "HF_HUB_CACHE wins over HF_HOME" bash -c "HF_HUB_CACHE='$WORK/hf/hub' HF_HOME=/nonexistent '$BIN/grpo-ctl' model-info --model acme/tiny-1"

echo "what is not a folder"
expect_fail "an id not in the cache: how to download it, and that the folder can then be passed" 1 \
  "--model acme/none: no such folder, and not in the Hugging Face cache \(.*/hf/hub/models--acme--none\): download it with \`hf download acme/none\` and pass --model acme/none again, or \`hf download acme/none --local-dir DIR\` and pass --model DIR" \
  "$BIN/grpo-ctl" model-info --model acme/none
expect_fail "grpo-rollout: the same line" 1 "grpo-rollout: --model acme/none: no such folder, and not in the Hugging Face cache" \
  "$BIN/grpo-rollout" --model acme/none --run "file://$WORK/run" --dataset "$WORK/ev.jsonl"
rm "$R/refs/main"
expect_fail "two snapshots and no refs/main: pass the folder" 1 "2 snapshots under .*models--acme--tiny-1/snapshots and no refs/main naming one" \
  "$BIN/grpo-ctl" model-info --model acme/tiny-1
rmdir "$R/snapshots/ffff0000"
check "one snapshot and no refs/main: that one" "$BIN/grpo-ctl" model-info --model acme/tiny-1
printf 'GGUF' >"$WORK/m.gguf"
for tool in "grpo-train --run file://$WORK/r2" "grpo-rollout --run file://$WORK/r2 --dataset $WORK/ev.jsonl" "grpo-ctl eval --dataset $WORK/ev.jsonl"; do
  set -- $tool
  expect_fail "$1 $2 --model FILE.gguf: import it with grpo-ctl import-gguf" 1 \
    "--model .*/m.gguf: a GGUF file, not a model folder: import it once with \`grpo-ctl import-gguf .*/m.gguf --out DIR\`.*then pass --model DIR" \
    "$BIN/$1" "${@:2}" --model "$WORK/m.gguf"
done
expect_fail "a file that is not a model" 1 "--model .*/ev.jsonl: a file, not a model folder" "$BIN/grpo-ctl" plan --model "$WORK/ev.jsonl"
expect_fail "a path that does not exist" 1 "--model $WORK/nope: no such folder$" "$BIN/grpo-ctl" model-info --model "$WORK/nope"
finish
