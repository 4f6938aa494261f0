#!/usr/bin/env bash
# Checks that the Debian 12 packages pail builds and tests with are present.
# As root, installs what is missing with apt-get; otherwise prints the exact
# apt-get line and exits 1. Usage: mk/deps.sh build|test|bench|all
set -euo pipefail
what=${1:-build}

# pkg-config module : Debian package
build_pc=(
  "hdf5:libhdf5-dev" "libcurl:libcurl4-openssl-dev" "openssl:libssl-dev"
  "libevent:libevent-dev" "libevent_openssl:libevent-dev" "libevent_pthreads:libevent-dev"
  "jansson:libjansson-dev" "libpcre2-8:libpcre2-dev" "libutf8proc:libutf8proc-dev"
  "openblas:libopenblas-dev" "libxml-2.0:libxml2-dev" "check:check" "zlib:zlib1g-dev"
)
# command : Debian package
build_cmd=("gcc:gcc" "make:make" "pkg-config:pkg-config")
# clang-format: the layout check of `make test` (mk/format.sh)
test_cmd=("bc:bc" "h5dump:hdf5-tools" "aws:awscli" "s3cmd:s3cmd" "python3:python3" "curl:curl" "openssl:openssl"
  "clang-format:clang-format")
# slurm: the launcher test starts its own one-host cluster (tests/integration/lib_slurm.sh);
# libfaketime: the chaos campaign's clock-skew fault (tests/chaos/, doc/reliability.md)
test_pkg=("python3-venv" "slurmctld" "slurmd" "slurm-client" "munge" "libfaketime")
# `make bench` only: the load generator and the reference server for grpo-relay.
bench_cmd=("wrk:wrk" "nginx:nginx-light")

missing=()
if ! command -v pkg-config >/dev/null 2>&1; then missing+=(pkg-config); fi
for pair in "${build_cmd[@]}"; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair##*:}")
done
if command -v pkg-config >/dev/null 2>&1; then
  for pair in "${build_pc[@]}"; do
    pkg-config --exists "${pair%%:*}" || missing+=("${pair##*:}")
  done
else
  for pair in "${build_pc[@]}"; do missing+=("${pair##*:}"); done
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
  for pair in "${bench_cmd[@]}"; do
    command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair##*:}")
  done
fi
if [ "$what" != build ] && [ "$what" != bench ]; then
  for pair in "${test_cmd[@]}"; do
    command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair##*:}")
  done
  for p in "${test_pkg[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
fi
[ ${#missing[@]} -eq 0 ] && exit 0
mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
line="apt-get install -y ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "deps: missing Debian packages: ${missing[*]}" >&2
  echo "deps: run as root:  $line" >&2
  exit 1
fi
echo "deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2
apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
