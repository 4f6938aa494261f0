#!/usr/bin/env bash
# --device on the computing tools, in the CPU build and (when built: make
# CUDA=1, as .ci/run does) the CUDA build: the spelling is checked (exit 2),
# cuda where there is no usable GPU fails at once with one line naming what is
# missing (exit 1), and the CUDA build needs no CUDA library to start and gives
# the CPU build's results with --device cpu or auto.
source "$(dirname "$0")/lib.sh"
M="$WORK/model"
"$BIN/grpo-ctl" init-model --out "$M" --shape tiny --vocab 257 --tokenizer "$ROOT/data/tokenizers/bytes" \
  --dtype f32 >/dev/null 2>&1 || { bad "init-model"; finish; exit 1; }
printf '{"ids": [1, 5, 9, 33, 7]}\n{"ids": [4, 4, 200, 18]}\n' >"$WORK/ids.jsonl"
head -4 "$ROOT/data/addition/train.jsonl" >"$WORK/eval.jsonl"
LP=(logprobs --model "$M" --input "$WORK/ids.jsonl")
EV=(eval --model "$M" --dataset "$WORK/eval.jsonl" --max-new-tokens 4)

for tool in "grpo-train --model $M --run file://$WORK/r" "grpo-rollout --model $M --run file://$WORK/r --dataset $WORK/eval.jsonl" \
            "grpo-ctl ${LP[*]}" "grpo-ctl ${EV[*]}"; do
  name=$(cut -d' ' -f1-2 <<<"$tool" | sed 's/ --model//')
  read -r -a argv <<<"$tool"
  argv[0]="$BIN/${argv[0]}"
  expect_fail "$name --device gpu: a usage error" 2 "--device 'gpu': use cpu, cuda, cuda:N, auto or sim" "${argv[@]}" --device gpu
  expect_fail "$name --device cuda in a CPU build says so" 1 "built without CUDA \(build it with make CUDA=1\)" \
    "${argv[@]}" --device cuda
done
check "grpo-ctl logprobs --device cpu" bash -c "'$BIN/grpo-ctl' ${LP[*]} --device cpu >'$WORK/cpu.out'"
check "...and --device auto give the same log-probs" bash -c "'$BIN/grpo-ctl' ${LP[*]} --device auto | cmp - '$WORK/cpu.out'"

CUDA_BIN="$ROOT/bin-cuda"
if [ -x "$CUDA_BIN/grpo-ctl" ]; then
  for t in grpo-train grpo-rollout grpo-ctl grpo-relay; do
    check "$t (CUDA build) links no CUDA library (runtime static, cuBLAS opened at run time)" \
      bash -c "! ldd '$CUDA_BIN/$t' | grep -Eq 'libcudart|libcublas|libcusparse|libcuda\.'"
  done
  check "the CUDA build with --device cpu gives the CPU build's log-probs" \
    bash -c "'$CUDA_BIN/grpo-ctl' ${LP[*]} --device cpu | cmp - '$WORK/cpu.out'"
  check "...and so does --device auto where there is no GPU" \
    bash -c "'$CUDA_BIN/grpo-ctl' ${LP[*]} --device auto | cmp - '$WORK/cpu.out'"
  check "the CUDA build's grpo-ctl eval --device cpu runs" "$CUDA_BIN/grpo-ctl" "${EV[@]}" --device cpu
  if [ -e /dev/nvidiactl ]; then
    echo "  (a GPU driver is present: the no-GPU refusals are not checked here)"
  else
    expect_fail "the CUDA build's --device cuda with no GPU names what is missing" 1 \
      "--device cuda: no NVIDIA driver on this machine" "$CUDA_BIN/grpo-ctl" "${LP[@]}" --device cuda
    expect_fail "...so does cuda:1" 1 "--device cuda:1: no NVIDIA driver" "$CUDA_BIN/grpo-train" --model "$M" \
      --run "file://$WORK/r" --device cuda:1
    check "...and nothing was written to the run" test ! -e "$WORK/r"
  fi
else
  echo "  (no bin-cuda/: make CUDA=1 builds it; .ci/run does)"
fi
finish
