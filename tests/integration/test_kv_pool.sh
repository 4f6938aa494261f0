#!/usr/bin/env bash
# The group generator's KV block pool on a tiny random f32 checkpoint
# (doc/rollout.md "KV pool"): grpo-rollout --kv-memory with a pool of 6 blocks
# (one sequence of 16 + 200 tokens needs 5) preempts and replays sequences and
# writes the tokens of a full-pool run with the same seed and worker id (the
# log-probs within 1e-5); the pool's figures reach the shard's attributes, the
# heartbeat and grpo-ctl status; a pool too small for one sequence is refused
# at start in one line; a worker killed mid-shard leaves whole shards or none.
source "$(dirname "$0")/lib.sh"
M="$WORK/model"
export OMP_NUM_THREADS=1
"$BIN/grpo-ctl" init-model --out "$M" --shape tiny --vocab 257 --tokenizer "$ROOT/data/tokenizers/bytes" \
  --dtype f32 >/dev/null 2>&1 || { bad "init-model"; finish; exit 1; }
head -16 "$ROOT/data/addition/train.jsonl" >"$WORK/train.jsonl"
# run DIR: a run with v0 (the trainer's LoRA B = 0: the base model's completions)
run() { "$BIN/grpo-train" --model "$M" --run "file://$1" --group-size 4 --groups-per-step 4 --lora-rank 4 --steps 0 \
          >"$1.train.log" 2>&1; }
W0=("$BIN/grpo-rollout" --model "$M" --dataset "$WORK/train.jsonl" --group-size 4 --groups-per-shard 4
    --max-new-tokens 200 --max-prompt-tokens 16 --batch-size 8 --max-ahead 0 --seed 3 --worker-id a)
W=("${W0[@]}" --reward length:0.5 --length-target 3)
attr() { h5dump -a "$2" "$1" | awk '/\(0\)/ {print $2}'; }
SH=rollouts/v00000000/a-000000.h5

check "a run with v0 (full pool)" run "$WORK/full"
check "...a worker with the full pool writes one shard" "${W[@]}" --run "file://$WORK/full" --max-shards 1
cp "$WORK/last.err" "$WORK/full.log"
check "...its plan is the full pool: 45 blocks, 9 slots x 256 tokens" \
  grep -q "KV cache .* 45 blocks of 64 tokens, f32 (full; the full pool: 45, 9 slots x 256 tokens)" "$WORK/full.log"
check "...no preemptions (kv_preemptions 0, kv_pool_blocks 45)" \
  test "$(attr "$WORK/full/$SH" kv_preemptions) $(attr "$WORK/full/$SH" kv_pool_blocks)" = "0 45"

check "a second run with v0" run "$WORK/small"
check "...a worker with --kv-memory 192K (6 blocks of 32 KiB) writes one shard" \
  "${W[@]}" --run "file://$WORK/small" --max-shards 1 --kv-memory 192K
cp "$WORK/last.err" "$WORK/small.log"
check "...its plan says so" grep -q "KV cache .* 6 blocks of 64 tokens, f32 (--kv-memory; the full pool: 45" "$WORK/small.log"
pre=$(attr "$WORK/small/$SH" kv_preemptions)
rec=$(attr "$WORK/small/$SH" kv_recomputed_tokens)
peak=$(attr "$WORK/small/$SH" kv_peak_blocks)
check "...the shard records the pool: 6 blocks, peak $peak, $pre preemptions, $rec tokens recomputed" \
  test "$(attr "$WORK/small/$SH" kv_pool_blocks)" = 6 -a "${pre:-0}" -gt 0 -a "${rec:-0}" -gt 0 -a "${peak:-9}" -le 6
check "...the same completions as the full pool, token for token" \
  bash -c "diff <(h5dump -d completion_ids -y -w 0 '$WORK/full/$SH' | sed -n '/DATA {/,/}/p') \
                <(h5dump -d completion_ids -y -w 0 '$WORK/small/$SH' | sed -n '/DATA {/,/}/p') >/dev/null &&
           diff <(h5dump -d completion_offsets -y -w 0 '$WORK/full/$SH' | sed -n '/DATA {/,/}/p') \
                <(h5dump -d completion_offsets -y -w 0 '$WORK/small/$SH' | sed -n '/DATA {/,/}/p') >/dev/null"
lp() { h5dump -d logprobs -y -w 0 -m %.9g "$1" | sed -n '/DATA {/,/}/p' | tr -s ', ' '\n\n' | grep -E '^-?[0-9]'; }
check "...and their log-probs within 1e-5" \
  bash -c "paste <($(declare -f lp); lp '$WORK/full/$SH') <($(declare -f lp); lp '$WORK/small/$SH') |
           awk '{ d = \$1 - \$2; if (d < 0) d = -d; if (d > 1e-5) bad = 1; n++ } END { exit bad || n < 100 }'"
check "...the heartbeat carries the pool (kv_pool: 6 blocks of 32768 bytes, $pre preemptions)" \
  grep -Pzq '"kv_pool": \{\s*"block_bytes": 32768,\s*"blocks": 6,\s*"peak_blocks": [0-9]+,\s*"preemptions": '"$pre"',\s*"recomputed_tokens": '"$rec" \
  "$WORK/small/workers/a.json"
check "...grpo-ctl status shows it" bash -c "'$BIN/grpo-ctl' status 'file://$WORK/small' |
  grep -q 'KV pool 6 blocks (0.2 MiB), peak [0-9]* ([0-9]*%), $pre preemptions, $rec tokens recomputed'"

expect_fail_last "a pool below one sequence is refused at start in one line" 1 \
  "KV pool of 3 blocks \(0.1 MiB, --kv-memory\) cannot hold one sequence of 16 prompt \+ 200 new tokens: it needs 5 blocks of 64 tokens \(0.2 MiB\); plan total .* MiB; raise --kv-memory or lower --max-new-tokens" \
  "${W[@]}" --run "file://$WORK/small" --max-shards 1 --kv-memory 100K --worker-id b
check "...and writes no shard" test -z "$(ls "$WORK/small/rollouts/v00000000" | grep '^b-')"
expect_fail "a bad --kv-memory" 2 "--kv-memory: '2Q' is not a memory size" \
  "${W[@]}" --run "file://$WORK/small" --kv-memory 2Q
expect_fail "--kv-memory with --env" 2 "--kv-memory sizes the group generator's pool; --env episodes" \
  "${W0[@]}" --run "file://$WORK/small" --kv-memory 1M --env true

# A worker under pool pressure killed while it generates: every shard there is whole, nothing else.
check "a third run with v0" run "$WORK/kill"
"${W[@]}" --run "file://$WORK/kill" --worker-id k --groups-per-shard 16 --max-new-tokens 400 --kv-memory 256K \
  >"$WORK/kill.log" 2>&1 &
pid=$!
PIDS+=("$pid")
for _ in $(seq 100); do [ -e "$WORK/kill/workers/k.json" ] && break; sleep 0.1; done
sleep 1
alive=no
kill -0 "$pid" 2>/dev/null && alive=yes
kill -9 "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
check "...it was still running when killed ($alive)" test "$alive" = yes
whole() {
  for f in $(find "$1/rollouts" -type f); do
    case "$f" in *.h5) h5dump -A "$f" >/dev/null 2>&1 || { echo "not whole: $f" >&2; return 1; } ;;
                 *) echo "not a shard: $f" >&2; return 1 ;; esac
  done
}
check "...its rollouts hold whole shards or none ($(find "$WORK/kill/rollouts" -type f 2>/dev/null | wc -l) files)" \
  whole "$WORK/kill"
finish
