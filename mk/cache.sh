#!/usr/bin/env bash
# Prints pail's cache folder, outside the checkout, shared by later checkouts and CI
# on the same machine: the test venv (mk/venv.sh), `make demo-real`'s model wheel.
#   PAIL_VENV_CACHE  the folder (default /var/cache/pail as root, else ~/.cache/pail)
if [ -n "${PAIL_VENV_CACHE:-}" ]; then echo "$PAIL_VENV_CACHE"
elif [ "$(id -u)" -eq 0 ]; then echo /var/cache/pail
else echo "${XDG_CACHE_HOME:-$HOME/.cache}/pail"; fi
