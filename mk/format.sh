#!/usr/bin/env bash
# The C layout check (.clang-format): every C/CUDA file under src/ and kernels/,
# and tests/*.[ch], must be as clang-format writes it, except the files listed in
# .clang-format-ignore (written before the check, with layouts clang-format does
# not keep). A new file is checked from the start. Usage (from any folder):
#   mk/format.sh check [ROOT]   exit 1 naming each file clang-format would change
#   mk/format.sh fix [ROOT]     format those files in place (clang-format -i)
# The reference is Debian 12's clang-format 14 (mk/deps.sh test installs it); another
# major version lays some constructs out differently, so the check says so and skips
# (PAIL_FORMAT_ANY=1 runs it anyway). Without clang-format it says so and skips.
set -uo pipefail
what=${1:-check}
root=${2:-$(cd "$(dirname "$0")/.." && pwd)}
case "$what" in check|fix) ;; *) echo "usage: mk/format.sh check|fix [ROOT]" >&2; exit 2 ;; esac
cd "$root" || exit 2
cf=$(command -v clang-format-14 || command -v clang-format) || {
  echo "format: SKIP: clang-format is not installed (apt-get install clang-format; mk/deps.sh test)"; exit 0; }
major=$("$cf" --version | sed -n 's/.*version \([0-9]*\)\..*/\1/p')
if [ "$major" != 14 ] && [ -z "${PAIL_FORMAT_ANY:-}" ]; then
  echo "format: SKIP: $cf is version ${major:-?}; the layout is checked with clang-format 14 (PAIL_FORMAT_ANY=1 to run it anyway)"
  exit 0
fi
[ -f .clang-format ] || { echo "format: no .clang-format in $root" >&2; exit 2; }
# .clang-format-ignore: one path a line (relative to ROOT), '#' comments; clang-format 18+
# reads the same file and leaves those files alone.
declare -A skip=()
if [ -f .clang-format-ignore ]; then
  while read -r p _; do [ -n "$p" ] && [ "${p#\#}" = "$p" ] && skip[$p]=1; done <.clang-format-ignore
fi
files=()
while IFS= read -r f; do f=${f#./}; [ -n "${skip[$f]:-}" ] || files+=("$f"); done < <(
  { find src kernels -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' \) 2>/dev/null
    find tests -maxdepth 1 -type f \( -name '*.c' -o -name '*.h' \); } | sort)
[ ${#files[@]} -gt 0 ] || { echo "format: no files to check"; exit 0; }
if [ "$what" = fix ]; then "$cf" -i --style=file "${files[@]}"; echo "format: ${#files[@]} files formatted"; exit 0; fi
bad=()
# One clang-format per file in parallel would be faster on many cores; one process for
# all of them takes about a second here, so keep it simple: list the files it flags.
while IFS= read -r f; do bad+=("$f"); done < <("$cf" --dry-run --style=file "${files[@]}" 2>&1 \
  | sed -n 's/^\(.*\):[0-9]*:[0-9]*: \(error\|warning\): code should be clang-formatted.*/\1/p' | sort -u)
if [ ${#bad[@]} -gt 0 ]; then
  for f in "${bad[@]}"; do echo "format: $f is not as clang-format lays it out (mk/format.sh fix, or clang-format -i $f)" >&2; done
  echo "format: ${#bad[@]} of ${#files[@]} files need formatting (.clang-format; files written before the check are in .clang-format-ignore)" >&2
  exit 1
fi
echo "format: ${#files[@]} files as .clang-format lays them out (${#skip[@]} listed in .clang-format-ignore)"
