#!/usr/bin/env bash
# Prints the path of validation/model/llamacpp_quant/harness built against the
# llama.cpp that mk/llamacpp.sh pins (llama-cpp-python 0.3.36's sdist from PyPI,
# sha256-pinned, vendor/llama.cpp), building it first if needed: ggml-quants.c and
# the headers it includes are extracted from the sdist (mk/pypi-fetch.sh: pail's
# download cache, else PyPI) and compiled as llama.cpp's CMake builds ggml-base on
# x86-64 (Release: -O3 -DNDEBUG, C11 with GNU extensions, no -march: the CPU
# backend alone gets -march=native, so no FMA contraction in the reference).
# Kept in pail's cache folder (mk/cache.sh), keyed by the harness's and this
# script's sha256. Exit 3 with "offline?" on stderr when the sdist cannot be had.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
VER=0.3.36
FILE=llama_cpp_python-$VER.tar.gz
SHA=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
CC=${CC:-gcc}
key=$(cat "$here/harness.c" "$here/build.sh" "$root/kernels/dtype_cpu.h" "$root/kernels/dtype.h" | sha256sum | cut -c1-12)
cache=$(bash "$root/mk/cache.sh")
dir="$cache/llamacpp-quant-$VER-$key"
if [ -x "$dir/harness" ]; then echo "$dir/harness"; exit 0; fi
mkdir -p "$cache"
exec 9>"$dir.lock"
flock 9
if [ -x "$dir/harness" ]; then echo "$dir/harness"; exit 0; fi
# mk/llamacpp.sh's unpacked tree when there is one, else the sdist
src=
for d in "$cache"/llamacpp-$VER-*/src; do [ -f "$d/ggml/src/ggml-quants.c" ] && src=$d && break; done
rm -rf "$dir.tmp"
mkdir -p "$dir.tmp"
trap 'rm -rf "$dir.tmp"' EXIT
if [ -z "$src" ]; then
  sdist=$(bash "$root/mk/pypi-fetch.sh" llama-cpp-python "$VER" "$FILE" "$SHA") || exit 3
  v=llama_cpp_python-$VER/vendor/llama.cpp
  tar -xzf "$sdist" -C "$dir.tmp" --strip-components=3 "$v/ggml/include" "$v/ggml/src/ggml-quants.c" \
    "$v/ggml/src/ggml-quants.h" "$v/ggml/src/ggml-common.h" "$v/ggml/src/ggml-impl.h" "$v/ggml/src/ggml-cpu/ggml-cpu-impl.h"
  src=$dir.tmp
fi
flags=(-O3 -DNDEBUG -std=gnu11 -I"$src/ggml/include" -I"$src/ggml/src" -I"$src/ggml/src/ggml-cpu")
"$CC" "${flags[@]}" -c "$src/ggml/src/ggml-quants.c" -o "$dir.tmp/ggml-quants.o"
"$CC" "${flags[@]}" -Wall -Wno-unused-function -I"$root/kernels" -c "$here/harness.c" -o "$dir.tmp/harness.o"
"$CC" -o "$dir.tmp/harness" "$dir.tmp/harness.o" "$dir.tmp/ggml-quants.o" -lm
mkdir -p "$dir"
mv "$dir.tmp/harness" "$dir/harness"
echo "$dir/harness"
