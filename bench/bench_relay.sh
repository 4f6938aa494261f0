#!/usr/bin/env bash
# `make bench` relay figures, on loopback over TLS (one throwaway CA):
#  1. small-object GET requests/s with keep-alive: wrk against grpo-relay (SigV4
#     headers signed once, valid 15 min) and against nginx serving the same
#     files with the same certificate, in the same run; prints the ratio
#     (target relay >= 0.5x nginx);
#  2. large-object GET throughput (MB/s) for both, with curl;
#  3. publish-to-wake latency for 200 long-polling clients (bench_relay longpoll);
#  4. the scale run (bench/bench_relay_scale.sh): 1M keys, 256 simulated workers.
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


# ---- 4. and 5.: 1M keys and 256 simulated workers; S3 requests per training step ----
bash bench/bench_relay_scale.sh
