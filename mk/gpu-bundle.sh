#!/bin/bash
# The GPU verification bundle. Here (no GPU needed): builds with make CUDA=1,
# for x86-64-v3 rather than this host's -march=native, stripped, in
# build-gpu/ and bin-gpu/: the CUDA suites (check_kernels_cuda: each twin
# against the CPU reference, the _dt ones with every storage dtype, the eight
# GGUF block types included; check_model_backend: the whole model, one trainer
# step and one generated group on the CUDA backend against the CPU) and the
# four executables; packs them with the Debian shared libraries they link
# (the GPU machine's image may lack them) into .gpu/payload.tar.xz, and writes
# .gpu/run.sh. .gpu/ is ignored by git: carry it to the GPU machine with the
# working tree (the tracked data/, bench/ and tests/ files are used there).
#
# There: bash .gpu/run.sh OUTDIR (from the repository root; every log goes to
# OUTDIR), under 4.5 minutes: each step has a timeout of its own (265 s in all):
#   1. unpack into /tmp (xz: ~3 s);
#   2. check_kernels_cuda (<= 25 s) and check_model_backend (<= 50 s);
#   3. compute-sanitizer --tool memcheck (where the tool exists) on
#      check_kernels_cuda (<= 35 s) and on check_model_backend's CUDA case alone
#      (CK_RUN_CASE=cuda, <= 40 s);
#   4. the loop on the device (<= 70 s): grpo-relay on loopback (TLS with a
#      throwaway CA from the openssl CLI when it is there, else --http, which
#      the relay allows on loopback only), grpo-train --device cuda and two
#      grpo-rollout --device cuda workers on a random bench-shape model (C512
#      L8, vocab 257, bf16), 20 steps; checks that adapters v0..v20 each exist
#      once and that each worker wrote shards the trainer took (not logged as
#      dropped, late or rejected);
#   5. bench/gpu.sh (<= 45 s): LoRA SFT tokens/s and generation seconds, cuda
#      against cpu, and transformers + PEFT where python3 imports them.
# cuda runs under PAIL_UNVERIFIED_CUDA=1, the escape kept for this run
# (src/model/device.h). run.sh exits 0 when every step passed; summary.txt in
# OUTDIR says which did not. The CUDA libraries (cuBLAS) come from the
# machine's own toolkit (/usr/local/cuda), which must be CUDA 13 like the one
# built against.
set -euo pipefail
cd "$(dirname "$0")/.."
SUITES="check_kernels_cuda check_model_backend"
TOOLS="grpo-train grpo-rollout grpo-relay grpo-ctl"
make CUDA=1 BUILD=build-gpu BIN=bin-gpu OPT="-O2 -march=x86-64-v3" -j"$(nproc)" \
  $(for s in $SUITES; do echo build-gpu/tests/$s; done) $(for t in $TOOLS; do echo bin-gpu/$t; done) >/dev/null
rm -rf .gpu && mkdir -p .gpu/stage/bin .gpu/stage/lib
for f in $(for s in $SUITES; do echo build-gpu/tests/$s; done) $(for t in $TOOLS; do echo bin-gpu/$t; done); do
  cp "$f" .gpu/stage/bin/ && strip ".gpu/stage/bin/$(basename "$f")"
  # Every resolved library outside libc's own set and the CUDA toolkit.
  ldd "$f" | awk '$3 ~ /^\// {print $3}' |
    grep -Ev '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*)\.so|/usr/local/cuda/' |
    while read -r lib; do [ -e ".gpu/stage/lib/$(basename "$lib")" ] || cp -L "$lib" .gpu/stage/lib/; done
done
strip --strip-unneeded .gpu/stage/lib/*.so* 2>/dev/null || true
# The tool carries 64 MiB at most: the libraries (OpenBLAS's every-CPU kernels
# above all) are ~4x smaller packed.
tar -C .gpu/stage -cf - . | xz -6 -T"$(nproc)" >.gpu/payload.tar.xz
rm -rf .gpu/stage
cat > .gpu/run.sh <<'RUN'
#!/bin/bash
# Runs on the GPU machine from the repository root (mk/gpu-bundle.sh says what
# and how long). $1: where logs go.
set -uo pipefail
out=${1:-/tmp/pail-gpu-out}; mkdir -p "$out"; out=$(cd "$out" && pwd)
here=$(cd "$(dirname "$0")" && pwd); root=$(cd "$here/.." && pwd)
x=/tmp/pail-gpu; rm -rf "$x"; mkdir -p "$x"
xz -dc "$here/payload.tar.xz" | tar -C "$x" -xf - || { echo "unpack failed"; exit 1; }
B=$x/bin
cuda=/usr/local/cuda/lib64
[ -e $cuda/libcublas.so.13 ] || cuda=$(dirname "$(find / -name 'libcublas.so.13' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$x/lib:$cuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PAIL_UNVERIFIED_CUDA=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
san=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
summary=$out/summary.txt; : >"$summary"
rc=0
step() {  # step NAME SECONDS command...: logged to $out/NAME.log, PASS/FAIL into the summary
  local name=$1 secs=$2; shift 2
  local t0=$SECONDS
  timeout -k 5 "$secs" "$@" >"$out/$name.log" 2>&1; local r=$?
  local verdict=PASS; [ $r = 0 ] || { verdict="FAIL (exit $r$([ $r = 124 ] && echo ": over ${secs} s"))"; rc=1; }
  echo "$name: $verdict in $((SECONDS - t0)) s" | tee -a "$summary"
  tail -4 "$out/$name.log" | sed 's/^/    /'
}
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nproc; } 2>&1 | tee "$out/machine.txt"

step check_kernels_cuda 25 env CK_VERBOSITY=verbose "$B/check_kernels_cuda"
step check_model_backend 50 env CK_VERBOSITY=verbose "$B/check_model_backend"
if [ -n "$san" ]; then
  # (no fork: the sanitizer follows one process; the CUDA case alone, the CPU ones gain nothing here)
  step memcheck-check_kernels_cuda 35 "$san" --tool memcheck --leak-check no --error-exitcode 3 \
    env CK_FORK=no "$B/check_kernels_cuda"
  step memcheck-check_model_backend 40 "$san" --tool memcheck --leak-check no --error-exitcode 3 \
    env CK_FORK=no CK_RUN_CASE=cuda "$B/check_model_backend"
else
  echo "memcheck: SKIP (no compute-sanitizer on this machine)" | tee -a "$summary"
fi

loop() {  # relay + trainer + two workers, 20 steps, all on loopback
  local w=/tmp/pail-gpu-loop port i
  pids=()
  rm -rf "$w"; mkdir -p "$w/root" "$w/tls"
  trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null' RETURN
  trap 'kill "${pids[@]}" 2>/dev/null; exit 143' TERM  # (step's timeout: the tools go with it)
  "$B/grpo-ctl" init-model --out "$w/model" --shape bench --vocab 257 --tokenizer "$root/data/tokenizers/bytes" \
    --dtype bf16 || return 1
  head -64 "$root/data/addition/train.jsonl" >"$w/train.jsonl"
  printf '%s\n' "pail-trainer trainer-secret-0123456789abcdef trainer runs/r1" \
    "pail-rollout rollout-secret-0123456789abcdef rollout runs/r1" >"$w/keys"
  for i in $(seq 1 50); do  # a free port: nothing answers on it
    port=$((20000 + RANDOM % 20000))
    (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null || break
  done
  local scheme=https tls=()
  if command -v openssl >/dev/null &&
     openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -keyout "$w/tls/ca.key" \
       -out "$w/tls/ca.pem" -subj /CN=pail-gpu-ca >/dev/null 2>&1 &&
     openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$w/tls/server.key" \
       -out "$w/tls/server.csr" -subj /CN=localhost >/dev/null 2>&1 &&
     printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' \
       >"$w/tls/ext.cnf" &&
     openssl x509 -req -in "$w/tls/server.csr" -CA "$w/tls/ca.pem" -CAkey "$w/tls/ca.key" -CAcreateserial \
       -out "$w/tls/server.pem" -days 2 -extfile "$w/tls/ext.cnf" >/dev/null 2>&1; then
    echo "relay: TLS (a throwaway CA from the openssl CLI)"
    tls=(--cert "$w/tls/server.pem" --key "$w/tls/server.key")
    export AWS_CA_BUNDLE=$w/tls/ca.pem
  else
    echo "relay: plain HTTP on loopback (no openssl CLI here)"
    scheme=http tls=(--http)
  fi
  "$B/grpo-relay" --listen "127.0.0.1:$port" --root "$w/root" --keys "$w/keys" "${tls[@]}" \
    >"$out/loop-relay-access.log" 2>"$out/loop-relay.log" &
  pids+=($!)
  for i in $(seq 1 100); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
  export AWS_REGION=us-east-1
  local run=(--model "$w/model" --group-size 4 --run s3://pail/runs/r1 --endpoint "$scheme://127.0.0.1:$port")
  AWS_ACCESS_KEY_ID=pail-trainer AWS_SECRET_ACCESS_KEY=trainer-secret-0123456789abcdef "$B/grpo-train" "${run[@]}" \
    --groups-per-step 2 --lr 5e-3 --lora-rank 8 --steps 20 --device cuda --metrics "$out/loop-metrics.jsonl" \
    --rollout-timeout 60 >"$out/loop-train.log" 2>&1 &
  local tr=$!; pids+=($tr)
  for wid in wa wb; do
    AWS_ACCESS_KEY_ID=pail-rollout AWS_SECRET_ACCESS_KEY=rollout-secret-0123456789abcdef "$B/grpo-rollout" "${run[@]}" \
      --dataset "$w/train.jsonl" --groups-per-shard 1 --max-new-tokens 16 --batch-size 8 --seed 7 --reward format \
      --format-regex '[0-9]' --worker-id $wid --device cuda >"$out/loop-$wid.log" 2>&1 &
    pids+=($!)
  done
  wait $tr || { echo "grpo-train failed:"; tail -5 "$out/loop-train.log"; return 1; }
  local r=$w/root/runs/r1 bad=0 v n
  for v in $(seq 0 20); do
    n=$(ls "$r/adapters/" 2>/dev/null | grep -c "^v$(printf %08d "$v")\.h5$")
    [ "$n" = 1 ] || { echo "adapter v$v: $n objects (want 1)"; bad=1; }
  done
  n=$(ls "$r/adapters/" | grep -c '^v[0-9]*\.h5$')
  [ "$n" = 21 ] || { echo "$n adapters (want v0..v20)"; bad=1; }
  for wid in wa wb; do
    # the worker's shards of versions 0..19, less those the trainer logged as not taken
    n=$(cd "$r" && ls rollouts/v000000[01]*/$wid-*.h5 2>/dev/null | while read -r k; do
          grep -qF "$k" "$out/loop-train.log" && grep -F "$k" "$out/loop-train.log" |
            grep -Eq 'dropped|late shard|reject' || echo "$k"; done | wc -l)
    echo "worker $wid: $n shards taken by the trainer; $(grep -c 'wrote ' "$out/loop-$wid.log") written"
    grep 'wrote ' "$out/loop-$wid.log" | tail -1
    [ "$n" -ge 1 ] || bad=1
  done
  grep 'done: step' "$out/loop-train.log"
  return $bad
}
export -f loop
export B out root
step loop 70 bash -c loop
step bench 45 bash "$root/bench/gpu.sh" "$B" "$out" 24
echo "total: $SECONDS s" | tee -a "$summary"
exit $rc
RUN
chmod +x .gpu/run.sh
grep -qx '/.gpu/' .gitignore || echo '/.gpu/' >> .gitignore
du -sh .gpu
