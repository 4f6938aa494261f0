# Random cases for jinja_semantics.py --random: templates drawn from three small grammars where
# Python's own rules are intricate, each with its variables, seeded so a run is reproducible:
# - printf-style formatting (flags, width, precision, conversion) and str.format's format specs
#   (fill, align, sign, #, 0, width, grouping, precision, type) over ints, floats, strings, bools;
# - str methods and string filters with random arguments over short strings of ASCII, Unicode and
#   whitespace;
# - list filters, tests and operators over random nested values (None, bools, numbers, strings,
#   lists, dicts).
# Each case is (group, template, {}, vars) as jinja_semantics.cases() yields them.
import json
import random

_FMT_VALUES = [0, 1, -1, 7, 42, -42, 255, 1234567, -9876543, 2**40, 0.0, -0.0, 0.5, 1.5, 2.5, -2.5, 3.14159, 1e-7,
               1e16, 1e20, 123456.789, 1e300, "ab", "é", "", "hello world", True, False]
_ALPHA = ["a", "b", "A", " ", "  ", "\n", "\t", "é", "ß", "-", ",", "ab", "\u00a0", "İ", "x y", "1", "_"]
_ATOMS = [0, 1, -1, 2, 3, 1.5, -0.5, 2.0, True, False, None, "a", "B", "b", "", "A", "é", "10", "9"]


def _lit(v):
    """A Jinja literal for v."""
    if isinstance(v, str):
        return json.dumps(v)
    return repr(v).replace("None", "none").replace("True", "true").replace("False", "false")


def _printf_spec(rng):
    flags = "".join(rng.sample("-+ #0", rng.randint(0, 3)))
    width = rng.choice(["", str(rng.randint(0, 12))])
    prec = rng.choice(["", "." + str(rng.randint(0, 12))])
    return "%" + flags + width + prec + rng.choice("sdixXofFeEgGcr%")


def _format_spec(rng):
    align = rng.choice(["", "<", ">", "^", "="])
    fill = rng.choice(["", "*", "0", " "]) if align else ""
    return (fill + align + rng.choice(["", "+", "-", " "]) + rng.choice(["", "#"]) + rng.choice(["", "0"]) +
            rng.choice(["", str(rng.randint(1, 12))]) + rng.choice(["", ",", "_"]) +
            rng.choice(["", "." + str(rng.randint(0, 10))]) +
            rng.choice(["", "s", "d", "x", "X", "o", "b", "c", "e", "E", "f", "F", "g", "G", "%", "n"]))


def _rand_str(rng):
    return "".join(rng.choice(_ALPHA) for _ in range(rng.randint(0, 6)))


_METHODS = [
    ("split", lambda g: g.choice([[], [_rand_str(g) or "a"], [_rand_str(g) or "a", g.randint(-1, 3)], [None, g.randint(-1, 2)]])),
    ("rsplit", lambda g: g.choice([[], [_rand_str(g) or "a"], [_rand_str(g) or "a", g.randint(-1, 3)], [None, g.randint(-1, 2)]])),
    ("strip", lambda g: g.choice([[], [_rand_str(g)], [None]])), ("lstrip", lambda g: g.choice([[], [_rand_str(g)]])),
    ("rstrip", lambda g: g.choice([[], [_rand_str(g)]])),
    ("replace", lambda g: g.choice([[_rand_str(g), _rand_str(g)], [_rand_str(g), _rand_str(g), g.randint(-1, 3)]])),
    ("find", lambda g: [_rand_str(g)]), ("rfind", lambda g: [_rand_str(g)]), ("count", lambda g: [_rand_str(g) or "a"]),
    ("startswith", lambda g: [_rand_str(g)]), ("endswith", lambda g: [_rand_str(g)]), ("title", lambda g: []),
    ("capitalize", lambda g: []), ("upper", lambda g: []), ("lower", lambda g: []), ("swapcase", lambda g: []),
    ("casefold", lambda g: []), ("center", lambda g: [g.randint(0, 9)] + g.choice([[], ["*"]])),
    ("ljust", lambda g: [g.randint(0, 9)]), ("rjust", lambda g: [g.randint(0, 9)]), ("zfill", lambda g: [g.randint(0, 9)]),
    ("partition", lambda g: [_rand_str(g) or "a"]), ("rpartition", lambda g: [_rand_str(g) or "a"]),
    ("splitlines", lambda g: g.choice([[], [True]])), ("isspace", lambda g: []), ("isalpha", lambda g: []),
    ("isdigit", lambda g: []), ("islower", lambda g: []), ("isupper", lambda g: []), ("istitle", lambda g: []),
    ("removeprefix", lambda g: [_rand_str(g)]), ("removesuffix", lambda g: [_rand_str(g)]),
    ("expandtabs", lambda g: g.choice([[], [g.randint(0, 5)]])),
]
_STR_FILTERS = [
    ("trim", lambda g: g.choice([[], [_rand_str(g)]])), ("title", lambda g: []), ("capitalize", lambda g: []),
    ("wordcount", lambda g: []), ("replace", lambda g: [_rand_str(g), _rand_str(g)]), ("center", lambda g: [g.randint(0, 9)]),
    ("indent", lambda g: g.choice([[], [g.randint(0, 3)], [g.randint(0, 3), True], [g.randint(0, 3), False, True]])),
    ("list", lambda g: []), ("reverse", lambda g: []), ("length", lambda g: []), ("upper", lambda g: []),
    ("lower", lambda g: []),
]
_LIST_EXPRS = [
    "{{ l | sort }}", "{{ l | sort(reverse=true) }}", "{{ l | sort(case_sensitive=true) }}", "{{ l | unique | list }}",
    "{{ l | min }}", "{{ l | max }}", "{{ l | sum }}", "{{ l | join(',') }}", "{{ l | map('string') | list }}",
    "{{ l | select | list }}", "{{ l | reject | list }}", "{{ l | first }}", "{{ l | last }}", "{{ l | length }}",
    "{{ l | tojson }}", "{{ l | tojson(sort_keys=true) }}", "{{ l | string }}", "{{ l | reverse | list }}",
    "{{ l | map('int') | list }}", "{{ l | map('float') | list }}", "{{ l | select('string') | list }}",
    "{{ l | select('number') | list }}", "{{ l | select('none') | list }}", "{{ l | select('odd') | list }}",
    "{{ l | batch(2) | list }}", "{{ l | slice(2) | list }}", "{{ l[1:] }}", "{{ l[::-1] }}", "{{ l | map('abs') | list }}",
    "{{ l | map('round') | list }}", "{{ l | selectattr('a') | list }}", "{{ l | map(attribute='a') | list }}",
    "{{ l | sort(attribute='a') }}", "{{ l | unique(attribute='a') | list }}", "{{ l | dictsort }}", "{{ l | items | list }}",
    "{{ l | tojson(indent=1) }}", "{{ a + b }}", "{{ a - b }}", "{{ a * b }}", "{{ a / b }}", "{{ a // b }}", "{{ a % b }}",
    "{{ a ** b }}", "{{ a < b }}", "{{ a == b }}", "{{ a in b }}", "{{ a ~ b }}", "{{ a | round(1) }}", "{{ a | int }}",
    "{{ a | float }}", "{{ [a, b] | max }}", "{{ a is divisibleby(b) }}", "{{ l | count }}", "{{ l | list }}",
    "{{ l | join(', ', attribute='a') }}", "{{ l | first | default('d') }}", "{{ l | sum(attribute='a') }}",
]


def _rand_value(rng, depth=0):
    k = rng.random()
    if depth < 2 and k < 0.15:
        return [_rand_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    if depth < 2 and k < 0.25:
        return {rng.choice(["a", "b", "c", "x"]): _rand_value(rng, depth + 1) for _ in range(rng.randint(0, 3))}
    return rng.choice(_ATOMS)


def cases(n, seed):
    """n cases of each grammar."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        v = rng.choice(_FMT_VALUES)
        if i % 2:
            out.append(("random: printf", "{{ fmt % (v,) }}", {}, {"fmt": _printf_spec(rng), "v": v}))
        else:
            out.append(("random: format specs", "{{ fmt.format(v) }}", {}, {"fmt": "{:" + _format_spec(rng) + "}", "v": v}))
    for i in range(n):
        name, gen = rng.choice(_STR_FILTERS) if i % 3 == 0 else rng.choice(_METHODS)
        args = ", ".join(_lit(a) for a in gen(rng))
        tpl = ("{{ s | %s%s }}" % (name, "(" + args + ")" if args else "")) if i % 3 == 0 else "{{ s.%s(%s) }}" % (name, args)
        out.append(("random: str methods and filters", tpl, {}, {"s": _rand_str(rng)}))
    for _ in range(n):
        l = _rand_value(rng) if rng.random() < 0.3 else [_rand_value(rng) for _ in range(rng.randint(0, 5))]
        out.append(("random: list filters, tests, operators", rng.choice(_LIST_EXPRS), {},
                    {"l": l, "a": _rand_value(rng), "b": _rand_value(rng)}))
    return out
