#!/usr/bin/env bash
# `make bench` relay scale run (also run alone: bash bench/bench_relay_scale.sh):
#  4. 1M keys under --root (256 shard files a version folder) and 256
#     simulated workers with a trainer (tests/tools/relay_load.c scale): the
#     relay's CPU and peak RSS, the listing index's start, p50/p99 per request
#     kind as the clients see them;
#  5. the same load through a relay with --upstream, whose "S3" is a second
#     relay serving the same folder: its access log counts every request the
#     first sends upstream, by kind, per training step: what a run costs in
#     requests on a real S3.
# Knobs: BENCH_SCALE_KEYS (1000000), BENCH_SCALE_WORKERS (256),
# BENCH_SCALE_SECONDS (60), BENCH_SCALE_S3_SECONDS (30), BENCH_SCALE_STEP
# (seconds a training step, 5), BENCH_SCALE_CYCLE (seconds a worker's shard, 10),
# BENCH_SCALE_ADAPTER_BYTES (262144).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
BIN=${BIN:-bin}
make -s "$BIN/grpo-relay" "$BUILD/tools/relay_load"
source tests/integration/lib.sh
source tests/integration/lib_relay.sh
# ---- 4. 1M keys under --root, 256 simulated workers ----
# Each worker long-polls adapters/ and, once per
# cycle, PUTs a 64 KiB shard and its heartbeat, HEADs control/stop and LISTs
# adapters/ and workers/; the trainer, once per step, LISTs and GETs every new
# shard and publishes an adapter (256 KiB), LATEST, progress and metrics. The
# keys live on tmpfs when there is one (a million inodes are minutes to create
# on a busy disk).
SK=${BENCH_SCALE_KEYS:-1000000}
SW=${BENCH_SCALE_WORKERS:-256}
SS=${BENCH_SCALE_SECONDS:-60}
STEP=${BENCH_SCALE_STEP:-5}
CYCLE=${BENCH_SCALE_CYCLE:-10}
# Small, so that on a small bench machine the 256 clients' TLS (each worker
# fetches every adapter) does not take the CPU the relay is measured on.
ADAPTER=${BENCH_SCALE_ADAPTER_BYTES:-262144}
LOAD=$ROOT/$BUILD/tools/relay_load
S=$WORK/scale
if [ -d /dev/shm ] && SHM=$(mktemp -d /dev/shm/pail-bench-scale-XXXXXX 2>/dev/null); then
  trap 'rm -rf "$SHM"; cleanup' EXIT
  ln -s "$SHM" "$S"
fi
"$LOAD" populate "$S/" runs/r1 "$SK"
V0=$(( (SK + 255) / 256 ))
RELAY_BACKEND="--root $S/" start_relay --threads 8 >/dev/null
INNER_URL=$RELAY_URL; INNER_PID=$RELAY_PID
grep "listing index" "$WORK/relay.log" | tail -1 | sed 's/.*relay: /relay /'
echo "relay RSS with the index read, before any request: $(( $(awk '/VmRSS/ {print $2}' /proc/"$INNER_PID"/status) / 1024 )) MiB"
cpu() { awk '{print $14 + $15}' /proc/"$1"/stat; }
c0=$(cpu "$INNER_PID"); t0=$(date +%s.%N)
"$LOAD" scale "$INNER_URL" "$RELAY_CA" "$RO_AK" "$RO_SK" "$TR_AK" "$TR_SK" runs/r1 "$SW" "$SS" "$STEP" "$CYCLE" "$V0" "$ADAPTER" \
  | tee "$WORK/scale.out" || { echo "bench_relay: scale run had failed requests"; exit 1; }
c1=$(cpu "$INNER_PID"); t1=$(date +%s.%N)
hz=$(getconf CLK_TCK)
printf 'relay CPU during the scale run: %.2f cores (%.0f CPU-s over %.0f s); peak RSS %d MiB\n' \
  "$(echo "($c1 - $c0) / $hz / ($t1 - $t0)" | bc -l)" "$(echo "($c1 - $c0) / $hz" | bc -l)" "$(echo "$t1 - $t0" | bc -l)" \
  $(( $(awk '/VmHWM/ {print $2}' /proc/"$INNER_PID"/status) / 1024 ))

# ---- 5. what a run costs on a real S3 ----
# The same load through a relay whose backend is --upstream: the first relay
# stands in for S3 here, and its access log counts every request the second
# one sends upstream (with the operator key), by kind, per training step.
export AWS_ACCESS_KEY_ID=$OP_AK AWS_SECRET_ACCESS_KEY=$OP_SK
RELAY_BACKEND="--upstream s3://pail --endpoint $INNER_URL --ca-bundle $RELAY_CA" start_relay --threads 8 >/dev/null
unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY
sync_log() { kill -0 "$INNER_PID"; sleep 0.5; wc -l <"$WORK/access.log"; }
l0=$(sync_log)
"$LOAD" scale "$RELAY_URL" "$RELAY_CA" "$RO_AK" "$RO_SK" "$TR_AK" "$TR_SK" runs/r1 "$SW" "${BENCH_SCALE_S3_SECONDS:-30}" \
  "$STEP" "$CYCLE" "$(( V0 + 1000 ))" "$ADAPTER" >"$WORK/s3.out" || { cat "$WORK/s3.out"; echo "bench_relay: upstream run had failed requests"; exit 1; }
sleep 1
steps=$(sed -n 's/.* \([0-9]*\) training steps.*/\1/p' "$WORK/s3.out")
tail -n +"$((l0 + 1))" "$WORK/access.log" | awk '$2 == "operator" {print $3, $4}' | sort | uniq -c >"$WORK/s3.kinds"
total=$(awk '{t += $1} END {print t + 0}' "$WORK/s3.kinds")
printf 'S3 requests per training step (through --upstream, %s workers, %s steps of %s s): %.0f\n' "$SW" "$steps" "$STEP" \
  "$(echo "$total / $steps" | bc -l)"
awk -v s="$steps" '{printf "  %-6s %-12s %8.1f\n", $2, $3, $1 / s}' "$WORK/s3.kinds"
