#!/usr/bin/env bash
# --device on the computing tools, in the CPU build and (when built: make
# CUDA=1, as .ci/run does) the CUDA build: the spelling is checked (exit 2),
# cuda is refused with one line on every machine until it is verified on a GPU
# (exit 1); with the verification run's escape (PAIL_UNVERIFIED_CUDA=1) cuda
# where there is no usable GPU fails at once with one line naming what is
# missing (exit 1); the CUDA build needs no CUDA library to start and gives
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
  expect_fail "$name --device cuda is refused: not verified on a GPU" 1 \
    "--device cuda: not yet verified on a GPU in this release: use --device cpu" "${argv[@]}" --device cuda
  expect_fail "...with PAIL_UNVERIFIED_CUDA=1 a CPU build says what is missing" 1 \
    "--device cuda: this pail was built without CUDA \(build it with make CUDA=1\)" env PAIL_UNVERIFIED_CUDA=1 "${argv[@]}" --device cuda
done
expect_fail "PAIL_UNVERIFIED_CUDA=yes is not the escape" 1 "not yet verified on a GPU" \
  env PAIL_UNVERIFIED_CUDA=yes "$BIN/grpo-ctl" "${LP[@]}" --device cuda:1
check "...and with the escape --device auto in a CPU build is the CPU" \
  bash -c "PAIL_UNVERIFIED_CUDA=1 '$BIN/grpo-ctl' ${LP[*]} --device auto >'$WORK/auto-escape.out'"
check "grpo-ctl logprobs --device cpu" bash -c "'$BIN/grpo-ctl' ${LP[*]} --device cpu >'$WORK/cpu.out'"
check "...and --device auto give the same log-probs" bash -c "'$BIN/grpo-ctl' ${LP[*]} --device auto | cmp - '$WORK/cpu.out'"
check "...with the escape too" cmp "$WORK/auto-escape.out" "$WORK/cpu.out"

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
    expect_fail "the CUDA build's --device cuda is refused: not verified on a GPU" 1 \
      "--device cuda: not yet verified on a GPU in this release" "$CUDA_BIN/grpo-ctl" "${LP[@]}" --device cuda
    expect_fail "...with PAIL_UNVERIFIED_CUDA=1 and no GPU it names what is missing" 1 \
      "--device cuda: no NVIDIA driver on this machine" env PAIL_UNVERIFIED_CUDA=1 "$CUDA_BIN/grpo-ctl" "${LP[@]}" \
      --device cuda
    expect_fail "...so does cuda:1" 1 "--device cuda:1: no NVIDIA driver" env PAIL_UNVERIFIED_CUDA=1 \
      "$CUDA_BIN/grpo-train" --model "$M" --run "file://$WORK/r" --device cuda:1
    expect_fail "...and grpo-rollout" 1 "--device cuda: no NVIDIA driver" env PAIL_UNVERIFIED_CUDA=1 \
      "$CUDA_BIN/grpo-rollout" --model "$M" --run "file://$WORK/r" --dataset "$WORK/eval.jsonl" --device cuda
    check "...and nothing was written to the run" test ! -e "$WORK/r"
  fi
else
  echo "  (no bin-cuda/: make CUDA=1 builds it; .ci/run does)"
fi
finish
