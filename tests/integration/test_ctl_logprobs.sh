#!/usr/bin/env bash
# grpo-ctl logprobs as a user drives it: one output line per input line in
# order, packed rows of any --token-budget giving the same numbers as one
# line per row (within float rounding), a line of n ids taking n - 1 rows,
# an adapter of any rank, and one-line errors for bad input (a folder given
# as --input used to print nothing and exit 0).
source "$(dirname "$0")/lib.sh"
CTL="$BIN/grpo-ctl"
M="$WORK/model"
"$CTL" init-model --out "$M" --shape tiny --vocab 257 --tokenizer "$ROOT/data/tokenizers/bytes" --dtype f32 \
  >/dev/null 2>&1 || { bad "init-model"; finish; exit 1; }
export OMP_NUM_THREADS=1
printf '{"ids": [1, 2, 3, 4, 5]}\n{"ids": [7]}\n{"ids": [9, 8, 7, 6, 5, 4, 3, 2, 1]}\n{"ids": [10, 11]}\n' >"$WORK/in.jsonl"
for b in 8 9 16 4096; do
  check "--token-budget $b" bash -c "'$CTL' logprobs --model '$M' --input '$WORK/in.jsonl' --token-budget $b >'$WORK/b$b.out'"
done
check "one output line per input line" test "$(wc -l <"$WORK/b4096.out")" -eq 4
check "a single id has no log-probs" bash -c "sed -n 2p '$WORK/b4096.out' | grep -qx '{\"logprobs\": \[\]}'"
check "n ids give n - 1 log-probs" python3 -c "
import json, sys
n = [len(json.loads(l)['logprobs']) for l in open(sys.argv[1])]
assert n == [4, 0, 8, 1], n" "$WORK/b4096.out"
check "every budget gives the same log-probs (1e-5)" python3 -c "
import json, sys
rows = [[json.loads(l)['logprobs'] for l in open(f)] for f in sys.argv[1:]]
for other in rows[1:]:
    for a, b in zip(rows[0], other):
        assert len(a) == len(b) and all(abs(x - y) <= 1e-5 for x, y in zip(a, b)), (a, b)
" "$WORK/b8.out" "$WORK/b9.out" "$WORK/b16.out" "$WORK/b4096.out"
"$BIN/grpo-train" --sft <(for i in $(seq 8); do echo '{"prompt": "1+1=", "completion": "2"}'; done) --model "$M" \
  --out "$WORK/r32.h5" --steps 2 --groups-per-step 4 --lora-rank 32 --metrics "" >"$WORK/sft.log" 2>&1
check "an adapter of rank 32" bash -c "'$CTL' logprobs --model '$M' --adapter '$WORK/r32.h5' --input '$WORK/in.jsonl' | wc -l | grep -qx 4"
expect_fail "9 ids need 8 rows, over --token-budget 7" 1 "in.jsonl:3: 9 ids need 8 rows, more than --token-budget 7" \
  "$CTL" logprobs --model "$M" --input "$WORK/in.jsonl" --token-budget 7
printf '{"ids": [1, "x"]}\n' >"$WORK/bad.jsonl"
expect_fail "a non-integer id" 1 "bad.jsonl:1: ids\[1\] is not an integer" "$CTL" logprobs --model "$M" --input "$WORK/bad.jsonl"
printf '{"ids": []}\n' >"$WORK/empty.jsonl"
expect_fail "an empty ids list" 1 "empty.jsonl:1: expected" "$CTL" logprobs --model "$M" --input "$WORK/empty.jsonl"
expect_fail "a folder as --input" 1 "reading after line 0: Is a directory" "$CTL" logprobs --model "$M" --input "$WORK"
finish
