#!/usr/bin/env bash
# The printed memory plan against the measured peak RSS (tests/tools/
# memplan_driver.c): a LoRA step and decode on a Qwen2.5-7B-width checkpoint
# cut to 4 layers (2.0 B parameters, 8 GiB in fp32; random weights written
# once to $PAIL_BENCH_DIR), then the full 28-layer 7B shape in bf16 at
# --token-budget 4096 with --recompute, printed only, against 24 GB.
# Not part of `make bench` (minutes and 9 GiB of memory): run it by hand.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
DIR=${PAIL_BENCH_DIR:-/tmp/pail-bench-7b-l4}
make -s bin/grpo-ctl "$BUILD/tools/memplan_driver"
[ -f "$DIR/config.json" ] || bin/grpo-ctl init-model --out "$DIR" --shape qwen2.5-7b --layers 4 --dtype bf16 >/dev/null
echo "== LoRA step, 1024 tokens, rank 16"
"$BUILD/tools/memplan_driver" --model "$DIR" --mode train --token-budget 1024 --lora-rank 16
echo "== decode, 8 sequences, 256-token prompts to 512"
"$BUILD/tools/memplan_driver" --model "$DIR" --mode decode --batch-size 8 --prompt 256 --ctx 512
echo "== the 28-layer 7B shape, bf16 weights, --token-budget 4096 --recompute (printed, not run)"
bin/grpo-ctl plan --shape qwen2.5-7b --dtype bf16 --token-budget 4096 --recompute --max-memory 24G
