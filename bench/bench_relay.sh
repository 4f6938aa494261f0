#!/usr/bin/env bash
# `make bench` relay figures, on loopback over TLS (one throwaway CA):
#  1. small-object GET requests/s with keep-alive: wrk against grpo-relay (SigV4
#     headers signed once, valid 15 min) and against nginx serving the same
#     files with the same certificate, in the same run; prints the ratio
#     (target relay >= 0.5x nginx);
#  2. large-object GET throughput (MB/s) for both, with curl;
#  3. publish-to-wake latency for 200 long-polling clients (bench_relay longpoll).
# Validates first: both servers return the same bytes.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
BIN=${BIN:-bin}
for c in wrk nginx curl openssl; do
  command -v "$c" >/dev/null || { echo "bench_relay: needs $c (apt-get install -y wrk nginx-light curl openssl; mk/deps.sh bench)"; exit 1; }
done
make -s "$BIN/grpo-relay" "$BUILD/bench/bench_relay"
source tests/integration/lib.sh
source tests/integration/lib_relay.sh
DUR=${BENCH_SECONDS:-5}
CONNS=${BENCH_CONNS:-32}
start_relay --threads 4 --cache-bytes $((1 << 30)) --access-log "$WORK/bench-access.log" >/dev/null
R=$WORK/root
mkdir -p "$R/runs/r1/rollouts/v00000001"
# Published as pail publishes (create-only, x-amz-meta-pail-sha256): the relay
# caches only objects that carry it.
head -c 4096 /dev/urandom >"$WORK/small.bin"
"$BIN/grpo-ctl" put --versioned "file://$R/runs/r1/rollouts/v00000001/w-000001.h5" "$WORK/small.bin"
head -c $((512 << 20)) /dev/urandom >"$WORK/big.bin" 2>/dev/null || true
"$BIN/grpo-ctl" put --versioned "file://$R/runs/r1/adapters/v00000000.h5" "$WORK/big.bin"
rm -f "$WORK/big.bin"

# nginx on the same files, same certificate and key.
NGINX_PORT=$(free_port)
mkdir -p "$WORK/nginx"; chmod 755 "$WORK"  # nginx workers run as www-data
cat >"$WORK/nginx/nginx.conf" <<CONF
worker_processes auto;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/error.log;
events { worker_connections 4096; }
http {
  access_log $WORK/nginx/access.log combined buffer=64k flush=1s;
  sendfile on; keepalive_requests 1000000; keepalive_timeout 60;
  client_body_temp_path $WORK/nginx; proxy_temp_path $WORK/nginx; fastcgi_temp_path $WORK/nginx;
  uwsgi_temp_path $WORK/nginx; scgi_temp_path $WORK/nginx;
  server {
    listen 127.0.0.1:$NGINX_PORT ssl;
    ssl_certificate $WORK/tls/server.pem; ssl_certificate_key $WORK/tls/server.key;
    ssl_protocols TLSv1.2 TLSv1.3;
    location /pail/ { alias $R/; }
  }
}
CONF
nginx -c "$WORK/nginx/nginx.conf" -e "$WORK/nginx/error.log"
trap 'kill $(cat "$WORK/nginx/nginx.pid" 2>/dev/null) 2>/dev/null; cleanup' EXIT
wait_port "$NGINX_PORT" 10

SMALL=/pail/runs/r1/rollouts/v00000001/w-000001.h5
BIG=/pail/runs/r1/adapters/v00000000.h5
hdrs() { "$BUILD/bench/bench_relay" sign GET "$RELAY_URL$1" "$RD_AK" "$RD_SK"; }
curl_relay() { local h=(); while IFS= read -r l; do h+=(-H "$l"); done < <(hdrs "$1"); curl -sf --cacert "$RELAY_CA" "${h[@]}" "${@:2}" "$RELAY_URL$1"; }
NGINX_URL="https://127.0.0.1:$NGINX_PORT"

# ---- validate ----
curl_relay "$SMALL" -o "$WORK/s.relay"
curl -sf --cacert "$RELAY_CA" "$NGINX_URL$SMALL" -o "$WORK/s.nginx"
cmp "$WORK/s.relay" "$WORK/s.nginx" && cmp "$WORK/s.relay" "$R${SMALL#/pail}" || { echo "bench_relay: relay and nginx disagree"; exit 1; }
echo "validated: relay and nginx serve the same bytes"

# ---- 1. small-object GET requests/s ----
lua="$WORK/hdr.lua"
{ echo "wrk.headers = wrk.headers or {}"
  hdrs "$SMALL" | while IFS= read -r l; do printf 'wrk.headers["%s"] = "%s"\n' "${l%%: *}" "${l#*: }"; done; } >"$lua"
rps() { sed -n 's/^Requests\/sec: *\([0-9.]*\).*/\1/p' "$1"; }
# Interleaved rounds, best of each: other load on the machine hits both alike.
rr=0; rn=0
for round in $(seq 1 "${BENCH_ROUNDS_WRK:-3}"); do
  wrk -t1 -c"$CONNS" -d"${DUR}s" -s "$lua" "$RELAY_URL$SMALL" >"$WORK/wrk.relay.$round"
  wrk -t1 -c"$CONNS" -d"${DUR}s" "$NGINX_URL$SMALL" >"$WORK/wrk.nginx.$round"
  if grep -q "Non-2xx" "$WORK/wrk.relay.$round"; then
    echo "bench_relay: relay answered non-2xx under load:"; cat "$WORK/wrk.relay.$round"; exit 1
  fi
  a=$(rps "$WORK/wrk.relay.$round"); b=$(rps "$WORK/wrk.nginx.$round")
  echo "  round $round: relay $a req/s, nginx $b req/s"
  if [ "$(echo "$a > $rr" | bc)" = 1 ]; then rr=$a; cp "$WORK/wrk.relay.$round" "$WORK/wrk.relay"; fi
  if [ "$(echo "$b > $rn" | bc)" = 1 ]; then rn=$b; cp "$WORK/wrk.nginx.$round" "$WORK/wrk.nginx"; fi
done
ratio=$(echo "scale=2; $rr / $rn" | bc)
printf 'small GET (4 KiB, TLS keep-alive, wrk -t1 -c%s, best of %s x %ss): relay %.0f req/s, nginx %.0f req/s, ratio %s (target >= 0.5)\n' \
  "$CONNS" "${BENCH_ROUNDS_WRK:-3}" "$DUR" "$rr" "$rn" "$ratio"
grep -E "Latency" "$WORK/wrk.relay" | sed 's/^/  relay /'
grep -E "Latency" "$WORK/wrk.nginx" | sed 's/^/  nginx /'

# ---- 2. large-object GET throughput ----
mbps() { echo "scale=0; $1 / 1048576 / $2" | bc; }
for i in 1 2; do  # first pass warms the page cache (and the relay's streaming path)
  t0=$(date +%s.%N); curl_relay "$BIG" -o /dev/null; t1=$(date +%s.%N)
  t2=$(date +%s.%N); curl -sf --cacert "$RELAY_CA" "$NGINX_URL$BIG" -o /dev/null; t3=$(date +%s.%N)
done
size=$(stat -c %s "$R/runs/r1/adapters/v00000000.h5")
dr=$(echo "$t1 - $t0" | bc); dn=$(echo "$t3 - $t2" | bc)
printf 'large GET (%d MiB, TLS, curl): relay %s MB/s, nginx %s MB/s\n' $((size >> 20)) "$(mbps "$size" "$dr")" "$(mbps "$size" "$dn")"

# ---- 3. long-poll publish-to-wake latency ----
"$BUILD/bench/bench_relay" longpoll "$RELAY_URL" "$RELAY_CA" "$TR_AK" "$TR_SK" "$RD_AK" "$RD_SK" \
  "${BENCH_WAITERS:-200}" "${BENCH_ROUNDS:-10}"
rss=$(awk '/VmHWM/ {print $2}' /proc/"$RELAY_PID"/status)
echo "relay peak RSS: $((rss / 1024)) MiB (cache limit 1024 MiB, 512 MiB object streamed in 8 MiB chunks)"

# ---- 4. scale: 1M keys under --root, 256 simulated workers ----
# tests/tools/relay_load.c: each worker long-polls adapters/ and, once per
# cycle, PUTs a 64 KiB shard and its heartbeat, HEADs control/stop and LISTs
# adapters/ and workers/; the trainer, once per step, LISTs and GETs every new
# shard and publishes a 4 MiB adapter, LATEST, progress and metrics. The
# keys live on tmpfs when there is one (a million inodes are minutes to create
# on a busy disk).
SK=${BENCH_SCALE_KEYS:-1000000}
SW=${BENCH_SCALE_WORKERS:-256}
SS=${BENCH_SCALE_SECONDS:-60}
STEP=${BENCH_SCALE_STEP:-5}
CYCLE=${BENCH_SCALE_CYCLE:-10}
make -s "$BUILD/tools/relay_load"
LOAD=$BUILD/tools/relay_load
S=$WORK/scale
if [ -d /dev/shm ] && SHM=$(mktemp -d /dev/shm/pail-bench-scale-XXXXXX 2>/dev/null); then
  trap 'kill $(cat "$WORK/nginx/nginx.pid" 2>/dev/null) 2>/dev/null; rm -rf "$SHM"; cleanup' EXIT
  ln -s "$SHM" "$S"
fi
"$LOAD" populate "$S/" runs/r1 "$SK"
V0=$(( (SK + 255) / 256 ))
RELAY_BACKEND="--root $S/" start_relay --threads 8 >/dev/null
INNER_URL=$RELAY_URL; INNER_PID=$RELAY_PID
grep "listing index" "$WORK/relay.log" | tail -1 | sed 's/.*relay: /relay /'
cpu() { awk '{print $14 + $15}' /proc/"$1"/stat; }
c0=$(cpu "$INNER_PID"); t0=$(date +%s.%N)
"$LOAD" scale "$INNER_URL" "$RELAY_CA" "$RO_AK" "$RO_SK" "$TR_AK" "$TR_SK" runs/r1 "$SW" "$SS" "$STEP" "$CYCLE" "$V0" \
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
  "$STEP" "$CYCLE" "$(( V0 + 1000 ))" >"$WORK/s3.out" || { cat "$WORK/s3.out"; echo "bench_relay: upstream run had failed requests"; exit 1; }
sleep 1
steps=$(sed -n 's/.* \([0-9]*\) training steps.*/\1/p' "$WORK/s3.out")
tail -n +"$((l0 + 1))" "$WORK/access.log" | awk '$2 == "operator" {print $3, $4}' | sort | uniq -c >"$WORK/s3.kinds"
total=$(awk '{t += $1} END {print t + 0}' "$WORK/s3.kinds")
printf 'S3 requests per training step (through --upstream, %s workers, %s steps of %s s): %.0f\n' "$SW" "$steps" "$STEP" \
  "$(echo "$total / $steps" | bc -l)"
awk -v s="$steps" '{printf "  %-6s %-12s %8.1f\n", $2, $3, $1 / s}' "$WORK/s3.kinds"
