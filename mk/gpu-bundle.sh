#!/bin/bash
# Build the CUDA twins' test (make CUDA=1) and gather it, with the Debian shared
# libraries the GPU machine's image may lack, into .gpu/ (ignored by git), plus
# .gpu/run.sh, which runs it there: the suite, then under compute-sanitizer
# memcheck when the tool is present. Usage: mk/gpu-bundle.sh; then on the GPU
# machine: bash .gpu/run.sh [OUTDIR]. The CUDA libraries come from the machine's
# own toolkit (/usr/local/cuda), which must be CUDA 13 like the one built against.
set -euo pipefail
cd "$(dirname "$0")/.."
make CUDA=1 -j"$(nproc)" build-cuda/tests/check_kernels_cuda >/dev/null
rm -rf .gpu && mkdir -p .gpu/lib
cp build-cuda/tests/check_kernels_cuda .gpu/
# Every resolved library outside libc's own set and the CUDA toolkit.
ldd build-cuda/tests/check_kernels_cuda | awk '$3 ~ /^\// {print $3}' |
  grep -Ev '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*)\.so|/usr/local/cuda/' |
  while read -r lib; do cp -L "$lib" .gpu/lib/; done
cat > .gpu/run.sh <<'RUN'
#!/bin/bash
# Runs on the GPU machine from the repository root. $1: where logs go.
out=${1:-/tmp}; here=$(cd "$(dirname "$0")" && pwd)
cuda=/usr/local/cuda/lib64
[ -e $cuda/libcublas.so.13 ] || cuda=$(dirname "$(find / -name 'libcublas.so.13' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$here/lib:$cuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
rc=0
CK_VERBOSITY=verbose "$here/check_kernels_cuda" 2>&1 | tee "$out/check_kernels_cuda.log" || rc=1
if command -v compute-sanitizer >/dev/null; then
  compute-sanitizer --tool memcheck --leak-check no --error-exitcode 3 \
    env CK_FORK=no "$here/check_kernels_cuda" >"$out/memcheck.log" 2>&1 || rc=1
  tail -5 "$out/memcheck.log"
fi
exit $rc
RUN
chmod +x .gpu/run.sh
grep -qx '/.gpu/' .gitignore || echo '/.gpu/' >> .gitignore
du -sh .gpu
