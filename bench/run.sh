#!/usr/bin/env bash
# `make bench`: builds and runs each benchmark binary in turn; each one validates
# its fast paths first, then prints figures with their references and ratios.
# One line per benchmark below; add yours (built by the GNUmakefile's
# $(BUILD)/bench/bench_% rule from bench/bench_<module>.c).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
BIN=${BIN:-bin}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
# The OpenMP wait policy: the benches set the executables' own (src/core/
# threads.h: a short spin, then sleep) unless OMP_WAIT_POLICY or GOMP_SPINCOUNT
# is set here; doc/kernels.md ("Threads") has the measurements.
run() { make -s "$BUILD/bench/$1" && echo "== $1" && "$BUILD/bench/$1"; }

run bench_kernels
run bench_tokenizer
bash mk/deps.sh bench && echo "== bench_relay" && bash bench/bench_relay.sh
echo "== bench_model" && bash bench/bench_model.sh
# Base weights held as bf16 (issue 14): decode beyond the caches, log-prob
# distances against transformers, peak memory (doc/performance.md).
run bench_model_dtype
# GGUF block-quantized weights (issue 46): decode mat-vec per type beside bf16 and
# fp32 at the 0.5B shapes, the two mat-vec designs, prefill (doc/kernels.md).
run bench_kernels_quant
# Mixture-of-experts (issue 48): the expert-grouped GEMM of a granite-3.1-1b-a400m-like
# MLP against a dense product of the same FLOPs (doc/kernels.md "moe").
run bench_kernels_moe
# Expert adapters of ~1 GB (issue 48): from the trainer's publish to a worker's first tokens
# through a loopback grpo-relay on a folder, and each part (doc/performance.md, "Expert adapters").
echo "== moe_adapter (bench/moe_adapter.sh)" && BIN="$BIN" bash bench/moe_adapter.sh
echo "== dtype log-probs (validation/bench/dtype_logprobs.py)" &&
  "$(bash mk/venv.sh)/bin/python" validation/bench/dtype_logprobs.py --ctl "$BIN/grpo-ctl" \
    --decode "$BUILD/bench/bench_model_dtype" --tokenizer data/tokenizers/bytes
echo "== dtype memory (bench/dtype_memory.sh)" && BIN="$BIN" BUILD="$BUILD" bash bench/dtype_memory.sh
# Quantized bases (issue 46): batch-1 decode (q8_0, q4_k) and the policy step
# (q4_k) on GGUF blocks against bf16 at the qwen2.5-0.5b shape (doc/performance.md).
run bench_model_quant
run bench_rollout
# The OpenAI-compatible endpoint (issue 21): the same episodes through an
# environment program and through --serve with 64 concurrent clients.
echo "== serve (bench/serve.sh)" && BIN="$BIN" bash bench/serve.sh
# A real model against TRL (issue 17): SmolLM2-135M-Instruct, GRPO + LoRA on
# two-digit addition (make demo-real's task), end-to-end wall clock and reward curves (doc/performance.md).
echo "== vs_trl (bench/vs_trl.sh)" && BIN="$BIN" bash bench/vs_trl.sh
# llama.cpp on the same GGUF values and cores (issue 38): batch-1 decode, pp512 and
# the GRPO shape (8 prompts x 8 samples), bf16, f32 and the quantized files (Q4_1,
# Q8_0, Q4_K_M: the same GGUF on both sides), as ratios (doc/performance.md).
echo "== vs_llamacpp (bench/vs_llamacpp.sh)" && BIN="$BIN" BUILD="$BUILD" bash bench/vs_llamacpp.sh
