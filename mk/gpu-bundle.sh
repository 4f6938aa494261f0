#!/bin/bash
# Build the CUDA suites (make CUDA=1, for x86-64-v3 rather than this host's
# -march=native, stripped): the twins against the CPU reference
# (check_kernels_cuda) and the whole model on the CUDA backend against the
# reference backend (check_model_backend); gather them, with the Debian shared
# libraries the GPU machine's image may lack, into .gpu/ (ignored by git), plus
# .gpu/run.sh, which runs them there, then under compute-sanitizer memcheck
# when the tool is present. Usage: mk/gpu-bundle.sh; then on the GPU
# machine: bash .gpu/run.sh [OUTDIR]. The CUDA libraries come from the machine's
# own toolkit (/usr/local/cuda), which must be CUDA 13 like the one built against.
set -euo pipefail
cd "$(dirname "$0")/.."
SUITES="check_kernels_cuda check_model_backend"
make CUDA=1 BUILD=build-gpu BIN=bin-gpu OPT="-O2 -march=x86-64-v3" -j"$(nproc)" \
  $(for s in $SUITES; do echo build-gpu/tests/$s; done) >/dev/null
rm -rf .gpu && mkdir -p .gpu/lib
for s in $SUITES; do
  cp build-gpu/tests/$s .gpu/ && strip .gpu/$s
  # Every resolved library outside libc's own set and the CUDA toolkit.
  ldd build-gpu/tests/$s | awk '$3 ~ /^\// {print $3}' |
    grep -Ev '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*)\.so|/usr/local/cuda/' |
    while read -r lib; do cp -L "$lib" .gpu/lib/; done
done
strip --strip-unneeded .gpu/lib/*.so* 2>/dev/null || true  # the tool carries 64 MiB at most
cat > .gpu/run.sh <<'RUN'
#!/bin/bash
# Runs on the GPU machine from the repository root. $1: where logs go.
out=${1:-/tmp}; here=$(cd "$(dirname "$0")" && pwd)
cuda=/usr/local/cuda/lib64
[ -e $cuda/libcublas.so.13 ] || cuda=$(dirname "$(find / -name 'libcublas.so.13' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$here/lib:$cuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
rc=0
for s in check_kernels_cuda check_model_backend; do
  CK_VERBOSITY=verbose "$here/$s" 2>&1 | tee "$out/$s.log" || rc=1
  if command -v compute-sanitizer >/dev/null; then
    compute-sanitizer --tool memcheck --leak-check no --error-exitcode 3 \
      env CK_FORK=no "$here/$s" >"$out/memcheck-$s.log" 2>&1 || rc=1
    tail -5 "$out/memcheck-$s.log"
  fi
done
exit $rc
RUN
chmod +x .gpu/run.sh
grep -qx '/.gpu/' .gitignore || echo '/.gpu/' >> .gitignore
du -sh .gpu
