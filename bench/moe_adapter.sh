#!/usr/bin/env bash
# Issue 48: the bucket protocol with expert adapters of ~1 GB. A real grpo-relay
# on loopback (TLS, SigV4, a folder bucket behind it), grpo-train publishing and
# grpo-rollout long-polling through it, on a random qwen3_moe of many small
# experts (E 512, C 64, Fe 64, L 24) with LoRA rank 64 on the experts only: the
# adapter is L x E x R x (2C + 3Fe) x 4 bytes = 1.007 GB, the base ~0.3 GB (bf16).
# Prints, per published version, the time from the trainer starting its publish
# to the worker's first tokens with it, and the parts: serialise, state put,
# adapter put (each through the relay), the worker's wake-up, fetch (GET +
# sha256), parse, attach (set_lora), first tokens. Every process's log lines
# are stamped on arrival (ms) by the script; the relay's access log has its own.
# Needs ~12 GB of memory (the trainer peaks at 9.2 GB RSS: params, grads, m, v and
# the 4 GB state image) and ~5 minutes on 2 cores; results in doc/performance.md.
#   MOE_LAYERS (24), MOE_EXPERTS (512), MOE_RANK (64), MOE_STEPS (2): the shape
#   (MOE_LAYERS=2 MOE_EXPERTS=64: a 10 MB adapter, a check of the script in seconds).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin}
L=${MOE_LAYERS:-24} E=${MOE_EXPERTS:-512} R=${MOE_RANK:-64} STEPS=${MOE_STEPS:-2}
make -s "$BIN/grpo-relay" "$BIN/grpo-train" "$BIN/grpo-rollout" "$BIN/grpo-ctl"
ROOT=$PWD
source tests/integration/lib.sh
source tests/integration/lib_relay.sh
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
# Each line stamped with its arrival time (unix seconds, ms).
stamp() { perl -MTime::HiRes=time -ne 'BEGIN { $| = 1 } printf "%.3f %s", time, $_'; }

start_relay --threads 4 --access-log "$WORK/access.log" >/dev/null
M=$WORK/model
"$BIN/grpo-ctl" init-model --out "$M" --model-type qwen3_moe --shape tiny --hidden 64 --heads 4 --kv-heads 2 \
  --layers "$L" --experts "$E" --experts-per-token 2 --expert-ffn 64 --ffn 64 --vocab 257 \
  --tokenizer "$ROOT/data/tokenizers/bytes" >/dev/null 2>&1
head -64 "$ROOT/data/addition/train.jsonl" >"$WORK/train.jsonl"
G=(--endpoint "$RELAY_URL" --ca-bundle "$RELAY_CA" --run s3://pail/runs/r1 --model "$M")
echo "model: qwen3_moe L $L, E $E (K 2), C 64, Fe 64; LoRA rank $R on the experts; relay $RELAY_URL over $WORK/root"
# The worker first: it waits for run.json, then long-polls the relay for v0.
AWS_ACCESS_KEY_ID=$RO_AK AWS_SECRET_ACCESS_KEY=$RO_SK "$BIN/grpo-rollout" "${G[@]}" --dataset "$WORK/train.jsonl" \
  --group-size 4 --groups-per-shard 1 --max-new-tokens 4 --batch-size 4 --worker-id w1 \
  --reward format --format-regex '[0-9]' >"$WORK/roll.raw" 2> >(stamp >"$WORK/roll.log") &
PIDS+=($!)
sleep 1
t_start=$(perl -MTime::HiRes=time -e 'printf "%.3f", time')
AWS_ACCESS_KEY_ID=$TR_AK AWS_SECRET_ACCESS_KEY=$TR_SK "$BIN/grpo-train" "${G[@]}" --steps "$STEPS" \
  --groups-per-step 1 --group-size 4 --lora-rank "$R" --lora-targets experts --lr 1e-3 --metrics "" \
  --max-staleness 1 --rollout-timeout 600 >"$WORK/train.raw" 2> >(stamp >"$WORK/train.log") ||
  { echo "moe_adapter: grpo-train failed:"; tail -5 "$WORK/train.log"; exit 1; }
sleep 2  # the worker's last lines
grep -h "adapter\|trainable\|LoRA" "$WORK/train.log" | head -3 | cut -c1-220
python3 - "$WORK/train.log" "$WORK/roll.log" "$WORK/access.log" "$t_start" <<'PY'
import re, sys
tl, rl, al, t_start = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
pub, load, first, acc = {}, {}, {}, {}
for line in open(tl):
    m = re.search(r'^(\S+) .*published adapter v(\d+) .* in ([\d.]+) s \(([\d.]+) MB; serialise ([\d.]+) s, '
                  r'state put ([\d.]+) s \(([\d.]+) MB\), adapter put ([\d.]+) s\)', line)
    if m: pub[int(m[2])] = [float(x) for x in m.group(1, 3, 4, 5, 6, 7, 8)]
for line in open(rl):
    m = re.search(r'^(\S+) .*adapter v(\d+) loaded in ([\d.]+) s \(([\d.]+) MB, fetch ([\d.]+) s, parse ([\d.]+) s, '
                  r'attach ([\d.]+) s\)', line)
    if m: load[int(m[2])] = [float(x) for x in m.group(1, 3, 4, 5, 6, 7)]
    m = re.search(r'^(\S+) .*adapter v(\d+): first tokens ([\d.]+) s after its load', line)
    if m: first[int(m[2])] = float(m[1])
for line in open(al):  # 2026-..T..:..:..mmmZ role METHOD OP key status bytes ms
    f = line.split()
    m = re.search(r'adapters/v(\d+)\.h5$', f[4]) if len(f) > 7 else None
    if m and f[5] == '200' and (f[1], f[3]) in (('trainer', 'MPCOMPLETE'), ('trainer', 'PUT'), ('rollout', 'GET')):
        acc.setdefault(int(m[1]), {})['GET' if f[3] == 'GET' else 'PUT'] = float(f[7]) / 1e3
print(f"{'version':>8} {'MB':>6} {'total':>7} | {'serial':>6} {'st.put':>6} {'ad.put':>6} {'relay.cmp':>9} | "
      f"{'wake':>6} {'fetch':>6} {'relay.get':>9} {'parse':>6} {'attach':>6} {'1st tok':>7}")
for v in sorted(pub):
    if v not in load or v not in first: continue  # the final version: the run is done, the worker exits
    p_end, p_tot, mb, ser, sput, smb, aput = pub[v]
    l_end, l_tot, lmb, fetch, parse, attach = load[v]
    p_start, l_start = p_end - p_tot, l_end - l_tot
    ad_put_end = p_start + ser + sput + aput
    a = acc.get(v, {})
    rput, rget = a.get('PUT', float('nan')), a.get('GET', float('nan'))
    print(f"v{v:07d} {mb:6.0f} {first[v] - p_start:7.2f} | {ser:6.2f} {sput:6.2f} {aput:6.2f} {rput:9.2f} | "
          f"{l_start - ad_put_end:6.2f} {fetch:6.2f} {rget:9.2f} {parse:6.2f} {attach:6.2f} {first[v] - l_end:7.2f}")
print("seconds: total = from the trainer starting the publish to the worker's first tokens with that version;")
print("serial = host copies + adapter and state images; st.put / ad.put = the state's and the adapter's PUT as the")
print("trainer saw them (sha256 + TLS + the relay spooling the parts, joining them, writing the folder); relay.cmp =")
print("the relay's CompleteMultipartUpload of the adapter (join + into the folder), relay.get = its GET to the worker")
print("(access log); wake = adapter PUT done to the worker's GET starting; fetch = GET + sha256 as the worker saw it;")
print("parse = HDF5 image to floats; attach = engine_attach (upload, set_lora); 1st tok = prefill + first tokens.")
PY
