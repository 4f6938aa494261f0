#!/usr/bin/env bash
# Prints the path of pail's test virtual environment, creating it first if needed.
# The venv lives in a cache folder outside the checkout, keyed by the sha256 of
# validation/requirements.txt, so CI on the same machine and later checkouts
# reuse it (PyPI's torch wheel is a few GB). Never touches the system Python.
#   PAIL_VENV_CACHE  cache folder (mk/cache.sh: default /var/cache/pail as root, else ~/.cache/pail)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
req="$root/validation/requirements.txt"
hash=$(sha256sum "$req" | cut -c1-16)
cache=$(bash "$root/mk/cache.sh")
venv="$cache/venv-$hash"
if [ -f "$venv/.complete" ]; then echo "$venv"; exit 0; fi
mkdir -p "$cache"
exec 9>"$cache/venv-$hash.lock"
flock 9
if [ ! -f "$venv/.complete" ]; then
  py=$(command -v python3)
  echo "venv: creating $venv from $req (first time: several GB, a few minutes)" >&2
  rm -rf "$venv"
  "$py" -m venv "$venv" >&2
  "$venv/bin/pip" install --disable-pip-version-check -q -r "$req" >&2
  touch "$venv/.complete"
fi
echo "$venv"
