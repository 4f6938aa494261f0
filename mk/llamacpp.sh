#!/usr/bin/env bash
# Prints the folder of a CPU build of llama.cpp, building it first if needed:
# the llama.cpp that PyPI's llama-cpp-python source package (pinned by sha256,
# mk/pypi-fetch.sh) bundles in vendor/llama.cpp, for bench/vs_llamacpp.sh.
# The folder holds bin/llama-bench, bin/llama-batched-bench, bin/llama-quantize
# (bench/vs_llamacpp.sh's Q8_0 / Q4_K_M files) and src/ (the
# sources: convert_hf_to_gguf.py, gguf-py). Built once per version and CPU (the
# build is -march=native), kept in pail's cache folder (mk/cache.sh), under a lock.
# Release, GGML_NATIVE (AVX-512 / BF16 where the CPU has them), OpenMP, static,
# no BLAS, no CUDA, no OpenSSL; only the two targets (6.5 min on 2 cores).
# AMX: on a CPU with AMX, -march=native defines __AMX_INT8__ and ggml-cpu
# compiles its AMX path (ggml-cpu/amx: an extra buffer type for quantized
# weights), which can die of SIGILL in prompt processing. The
# vendored tree's GGML_AMX_TILE / GGML_AMX_INT8 / GGML_AMX_BF16 options (OFF by
# default) are read only when GGML_NATIVE=OFF (ggml/src/ggml-cpu/CMakeLists.txt),
# so they cannot turn it off here; a build without it would add
# -DCMAKE_C_FLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" (and the same
# CMAKE_CXX_FLAGS: GCC lets an explicit -mno-* win over -march=native's
# implied flags whatever their order), or use GGML_NATIVE=OFF with the
# GGML_AVX512* options named and GGML_AMX_* left OFF. Not done: the machines
# this runs on so far have no AMX (a second build per CPU would cost ~7 min).
#   PAIL_LLAMACPP_JOBS  make's -j (2)
#   --cached            print the folder only when it is already built; exit 3 otherwise (no build)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
VER=0.3.36
FILE=llama_cpp_python-$VER.tar.gz
SHA=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
TARGETS="llama-bench llama-batched-bench llama-quantize"
# The ISA the native build used, so another CPU sharing the cache gets its own build.
isa=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx|amx|f16c|fma)' | sort | tr '\n' ' ')
key=$(printf '%s' "$isa" | sha256sum | cut -c1-8)
cache=$(bash "$root/mk/cache.sh")
dir="$cache/llamacpp-$VER-$key"
done_() { [ -f "$dir/.complete" ] && for t in $TARGETS; do [ -x "$dir/bin/$t" ] || return 1; done; }
if done_; then echo "$dir"; exit 0; fi
if [ "${1:-}" = --cached ]; then echo "llamacpp: no build cached in $dir (bash mk/llamacpp.sh builds it, ~7 min)" >&2; exit 3; fi
for t in cmake g++ tar; do
  command -v $t >/dev/null || { echo "llamacpp: $t not found (Debian: apt-get install cmake g++)" >&2; exit 1; }
done
mkdir -p "$cache"
exec 9>"$dir.lock"
flock 9
if done_; then echo "$dir"; exit 0; fi
sdist=$(bash "$root/mk/pypi-fetch.sh" llama-cpp-python "$VER" "$FILE" "$SHA")
echo "llamacpp: building llama.cpp from $FILE into $dir ($TARGETS; first time: ~7 minutes on 2 cores)" >&2
rm -rf "$dir"
mkdir -p "$dir/src"
tar -xzf "$sdist" -C "$dir/src" --strip-components=3 "llama_cpp_python-$VER/vendor/llama.cpp"
cmake -S "$dir/src" -B "$dir/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
  -DGGML_NATIVE=ON -DGGML_OPENMP=ON -DGGML_BLAS=OFF -DGGML_CUDA=OFF -DLLAMA_OPENSSL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
  >"$dir/build.log" 2>&1 || { tail -20 "$dir/build.log" >&2; echo "llamacpp: cmake configure failed ($dir/build.log)" >&2; exit 1; }
# shellcheck disable=SC2086
cmake --build "$dir/build" -j "${PAIL_LLAMACPP_JOBS:-2}" --target $TARGETS >>"$dir/build.log" 2>&1 ||
  { tail -20 "$dir/build.log" >&2; echo "llamacpp: build failed ($dir/build.log)" >&2; exit 1; }
mkdir -p "$dir/bin"
for t in $TARGETS; do cp "$dir/build/bin/$t" "$dir/bin/"; done
grep -E 'ggml-cpu: -march|Found OpenMP:' "$dir/build.log" >"$dir/config.txt" || true
rm -rf "$dir/build"
printf '%s\n' "$isa" >"$dir/isa.txt"
touch "$dir/.complete"
echo "$dir"
