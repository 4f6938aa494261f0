#!/usr/bin/env bash
# pail's quantizer (kernels/quantize.c, quant_quantize) byte-equal to two independent
# references on seeded random rows and edge rows (validation/model/quantize_check.py):
# gguf-py's gguf.quants.quantize for Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 (the types it
# quantizes), and llama.cpp's own quantize_row_<type>_ref for all eight types, built
# from the pinned llama.cpp (llama-cpp-python 0.3.36's sdist, PyPI, sha256-pinned) by
# validation/model/llamacpp_quant/build.sh (SKIP when the sdist is neither cached nor
# reachable); pail's scalar path (PAIL_KERNELS_ISA=scalar) equal to its default (AVX2
# where the CPU has it); and ggml's fp32 -> fp16 equal to pail's on every 61st fp32 bit pattern.
source "$(dirname "$0")/lib.sh"
TEST_NAME=quantize
PY=$(venv)/bin/python
BUILD=${BUILD:-build}
make -s -C "$ROOT" "$BUILD/tools/quantize_rows" >/dev/null || { bad "build quantize_rows"; finish; exit 1; }
args=(--tool "$ROOT/$BUILD/tools/quantize_rows" --work "$WORK" --rows 4096 --seed 1 --isa scalar)
if h=$(bash "$ROOT/validation/model/llamacpp_quant/build.sh" 2>"$WORK/build.err"); then
  args+=(--harness "$h")
  "$h" f16 61 >"$WORK/f16.log" 2>&1
  grep -q "^f16: 0 of " "$WORK/f16.log" && ok "ggml's fp32 -> fp16 is pail's: $(cat "$WORK/f16.log")" ||
    bad "ggml's fp32 -> fp16 differs from pail's: $(head -3 "$WORK/f16.log")"
elif grep -q 'offline?' "$WORK/build.err"; then
  echo "SKIP llama.cpp's quantize_row_*_ref: its sdist is not cached and PyPI is unreachable ($(head -1 "$WORK/build.err"))"
else bad "build llama.cpp's quantizer harness:"; tail -5 "$WORK/build.err" | sed 's/^/        /'; fi
run_oracle "$WORK/check.log" "$PY" "$ROOT/validation/model/quantize_check.py" "${args[@]}"
finish
