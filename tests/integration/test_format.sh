#!/usr/bin/env bash
# mk/format.sh, the layout check of `make test`, on a scratch tree with this
# checkout's .clang-format: a formatted file passes, an unformatted or new one
# fails naming it, a file in .clang-format-ignore is skipped, `fix` formats it;
# then this checkout passes. A second or two; SKIP without clang-format 14.
source "$(dirname "$0")/lib.sh"
F=$ROOT/mk/format.sh
if ! command -v clang-format >/dev/null && ! command -v clang-format-14 >/dev/null; then
  echo "SKIP: clang-format is not installed (mk/deps.sh test)"; echo "$TEST_NAME: 0 passed, 0 failed"; exit 0
fi
T=$WORK/tree; mkdir -p "$T/src/core" "$T/kernels" "$T/tests"
cp "$ROOT/.clang-format" "$T/"
printf 'static int f(int x) {\n    if (x > 0) return 1;\n    return 0;\n}\n' >"$T/src/core/good.c"
printf '# none\n' >"$T/.clang-format-ignore"
check "a formatted file passes" bash "$F" check "$T"
printf 'static int   g(int x){ return x+1; }\n' >"$T/kernels/bad.c"
expect_fail_last "a new unformatted file fails, named" 1 'format: 1 of 2 files need formatting' bash "$F" check "$T"
cp "$WORK/last.err" "$WORK/bad.err"
check "... and the line before names it" grep -q 'format: kernels/bad.c is not as clang-format lays it out' "$WORK/bad.err"
printf 'kernels/bad.c\n' >>"$T/.clang-format-ignore"
check "a file listed in .clang-format-ignore is skipped" bash "$F" check "$T"
printf '# none\n' >"$T/.clang-format-ignore"
check "mk/format.sh fix formats it" bash "$F" fix "$T"
check "... and then it passes" bash "$F" check "$T"
check "... laid out as .clang-format says (4-space indent, spaces around +)" \
  grep -qx 'static int g(int x) { return x + 1; }' "$T/kernels/bad.c"
check "this checkout passes the layout check" bash "$F" check "$ROOT"
finish
