#!/usr/bin/env bash
# Prints the path of one release file of a PyPI package in pail's download
# cache, downloading it first if needed: the URL and sha256 come from PyPI's
# JSON API, and both that sha256 and the downloaded bytes must equal the pinned
# one (a re-uploaded or tampered file is refused). Nothing else is downloaded.
#   mk/pypi-fetch.sh PACKAGE VERSION FILENAME SHA256
#   files go to downloads/ in pail's cache folder (mk/cache.sh: PAIL_VENV_CACHE, else
#   /var/cache/pail as root, else ~/.cache/pail)
set -euo pipefail
[ $# -eq 4 ] || { echo "usage: mk/pypi-fetch.sh PACKAGE VERSION FILENAME SHA256" >&2; exit 2; }
pkg=$1 ver=$2 file=$3 sha=$4
cache=$(bash "$(dirname "$0")/cache.sh")
dir="$cache/downloads"
dest="$dir/$file"
have() { [ -f "$dest" ] && [ "$(sha256sum "$dest" | cut -d' ' -f1)" = "$sha" ]; }
if have; then echo "$dest"; exit 0; fi
mkdir -p "$dir"
exec 9>"$dest.lock"
flock 9
if have; then echo "$dest"; exit 0; fi
# The package's JSON (pypi.org/pypi/PACKAGE/json lists every release's files).
meta=$(curl -fsSL --retry 3 "https://pypi.org/pypi/$pkg/json") ||
  { echo "pypi-fetch: https://pypi.org/pypi/$pkg/json: cannot fetch the package's metadata (offline?)" >&2; exit 1; }
line=$(printf '%s' "$meta" | python3 -c '
import json, sys, urllib.parse
ver, file, base = sys.argv[1], sys.argv[2], sys.argv[3]
for f in json.load(sys.stdin).get("releases", {}).get(ver, []):
    if f["filename"] == file:  # a mirror may give a url relative to the JSON
        print(urllib.parse.urljoin(base, f["url"]), f["digests"]["sha256"])
' "$ver" "$file" "https://pypi.org/pypi/$pkg/json")
[ -n "$line" ] || { echo "pypi-fetch: $pkg $ver on PyPI has no file $file" >&2; exit 1; }
url=${line% *} pypi_sha=${line#* }
[ "$pypi_sha" = "$sha" ] ||
  { echo "pypi-fetch: $pkg $ver $file: PyPI lists sha256 $pypi_sha, pinned $sha; refusing it" >&2; exit 1; }
echo "pypi-fetch: downloading $url" >&2
curl -fsSL --retry 3 -o "$dest.part" "$url" ||
  { rm -f "$dest.part"; echo "pypi-fetch: $url: download failed" >&2; exit 1; }
got=$(sha256sum "$dest.part" | cut -d' ' -f1)
[ "$got" = "$sha" ] ||
  { rm -f "$dest.part"; echo "pypi-fetch: $url: downloaded sha256 $got, pinned $sha; refusing it" >&2; exit 1; }
mv "$dest.part" "$dest"
echo "$dest"
