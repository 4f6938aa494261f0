#!/usr/bin/env bash
# Prints the folder holding the tokenizers built by build_tokenizers.py ({qwen,qwen-chatml,
# llama3}/), building them first if needed. Cached beside the test venv (outside the
# checkout), keyed by the sha256 of the build script and templates, so reruns are fast.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
venv=$(bash "$here/../../mk/venv.sh")
hash=$(cat "$here/build_tokenizers.py" "$here"/templates/*.jinja | sha256sum | cut -c1-16)
out="$(dirname "$venv")/tok-$hash"
if [ -f "$out/.complete" ]; then echo "$out"; exit 0; fi
exec 9>"$out.lock"
flock 9
if [ ! -f "$out/.complete" ]; then
  echo "tokenizer: building 32k BPE tokenizers into $out (about a minute, once)" >&2
  rm -rf "$out"
  TOKENIZERS_PARALLELISM=true "$venv/bin/python" "$here/build_tokenizers.py" "$out" >&2
  touch "$out/.complete"
fi
echo "$out"
