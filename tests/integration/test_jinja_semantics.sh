#!/usr/bin/env bash
# pail's chat-template interpreter against jinja2 itself, case by case
# (validation/tokenizer/jinja_semantics.py over the table of jinja_cases.py: undefined values,
# unknown filters deferred to run time, loops, scoping, macros, whitespace control, operators,
# filters, tests, methods, globals, real template idioms): each template and its variables
# rendered by jinja2 in transformers' environment and by tests/tools/jinja_render; one check
# per group of cases, passing when every case renders identically or both refuse it. Then 1,500
# random cases of each grammar of jinja_random.py (printf and format specs, str methods and
# filters, list filters and operators; seed 1), where pail may refuse but never render otherwise.
source "$(dirname "$0")/lib.sh"
BUILD=${BUILD:-build}
make -s -C "$ROOT" "$BUILD/tools/jinja_render" >/dev/null || { bad "build jinja_render"; finish; exit 1; }
run_oracle "$WORK/jinja.log" "$(venv)/bin/python" "$ROOT/validation/tokenizer/jinja_semantics.py" \
  --render "$ROOT/$BUILD/tools/jinja_render" --random 1500 --seed 1
finish
