#!/usr/bin/env python3
"""Writes tests/fuzz/corpus/safetensors/: good-*.safetensors written by the
reference `safetensors` library, and bad-*.safetensors hand-made hostile files,
each of which the reference library must also refuse (checked here). EXPECTED
lists, per bad file, a fragment pail's error message must contain; the Check
suite (tests/check_model.c) reads it. Run with the project venv:
  $(bash mk/venv.sh)/bin/python validation/model/make_safetensors_corpus.py
"""
import json, os, struct, sys
import numpy as np
from safetensors.numpy import save_file, load_file
from safetensors import safe_open

root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
out = os.path.join(root, "tests", "fuzz", "corpus", "safetensors")
os.makedirs(out, exist_ok=True)
for f in os.listdir(out):
    os.remove(os.path.join(out, f))

# ---- good files from the reference writer ----
rng = np.random.default_rng(7)
save_file({"a": rng.standard_normal((2, 3)).astype(np.float32),
           "b": rng.standard_normal((4,)).astype(np.float16)},
          os.path.join(out, "good-f32-f16.safetensors"), metadata={"format": "pt"})
save_file({"w": np.arange(6, dtype=np.int64).reshape(3, 2), "s": np.array(3.5, dtype=np.float64),
           "e": np.zeros((0, 4), dtype=np.float32)},
          os.path.join(out, "good-int-scalar-empty.safetensors"))
save_file({}, os.path.join(out, "good-empty.safetensors"))


def raw(header, data=b"", hlen=None, pad=True):
    h = header if isinstance(header, bytes) else json.dumps(header, separators=(",", ":")).encode()
    if pad:
        h += b" " * ((8 - len(h) % 8) % 8)
    n = len(h) if hlen is None else hlen
    return struct.pack("<Q", n) + h + data


T = lambda dt, shape, b, e: {"dtype": dt, "shape": shape, "data_offsets": [b, e]}
bad = {
    # name: (bytes, fragment of pail's message)
    "short": (b"\x08\x00\x00", "shorter than the 8-byte header length"),
    "hlen-past-end": (raw({"a": T("F32", [1], 0, 4)}, b"\0" * 4, hlen=1 << 20), "larger than the file"),
    "hlen-huge": (struct.pack("<Q", (1 << 64) - 1) + b"{}", "larger than the file"),
    # (the 100 MB header limit needs a 100 MB file: tests/check_model.c makes a sparse one)
    "not-json": (raw(b"{\"a\": [1, 2"), "not valid JSON"),
    "not-object": (raw(b"[1,2,3]"), "does not start with '{'"),
    "empty-header": (struct.pack("<Q", 0), "does not start with '{'"),
    "trailing-garbage": (raw(b"{} xx"), "not valid JSON"),
    "duplicate-key": (raw(b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
                          b'"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', b"\0" * 4), "not valid JSON"),
    "bad-dtype": (raw({"a": T("Q4", [1], 0, 1)}, b"\0"), "unknown dtype"),
    "dtype-not-string": (raw({"a": {"dtype": 3, "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4), "'dtype'"),
    "shape-negative": (raw({"a": T("F32", [-1], 0, 4)}, b"\0" * 4), "shape[0]"),
    "shape-float": (raw({"a": T("F32", [1.5], 0, 4)}, b"\0" * 4), "shape[0]"),
    "shape-overflow": (raw({"a": T("F32", [1 << 40, 1 << 40], 0, 4)}, b"\0" * 4), "overflows"),
    "shape-too-many-dims": (raw({"a": T("U8", [1] * 9, 0, 1)}, b"\0"), "dimensions"),
    "shape-mismatch": (raw({"a": T("F32", [2], 0, 4)}, b"\0" * 4), "span 4 bytes"),
    "offsets-past-end": (raw({"a": T("F32", [4], 0, 16)}, b"\0" * 8), "past the data section"),
    "offsets-reversed": (raw({"a": T("F32", [0], 8, 4)}, b"\0" * 8), "begin <= end"),
    "offsets-negative": (raw({"a": T("F32", [1], -4, 0)}, b"\0" * 4), "begin <= end"),
    "offsets-overlap": (raw({"a": T("F32", [2], 0, 8), "b": T("F32", [2], 4, 12)}, b"\0" * 12), "overlap"),
    "offsets-gap": (raw({"a": T("F32", [1], 0, 4), "b": T("F32", [1], 8, 12)}, b"\0" * 12), "gap"),
    "offsets-not-covering": (raw({"a": T("F32", [1], 0, 4)}, b"\0" * 12), "data section holds"),
    "offsets-huge": (raw({"a": T("U8", [1], (1 << 62), (1 << 62) + 1)}, b"\0"), "past the data section"),
    "offsets-three": (raw({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4, 8]}}, b"\0" * 4),
                      "data_offsets"),
    "entry-not-object": (raw({"a": 5}), "not an object"),
    "entry-unknown-field": (raw({"a": dict(T("F32", [1], 0, 4), extra=1)}, b"\0" * 4), "unknown field"),
    "metadata-not-strings": (raw({"__metadata__": {"k": 1}}), "not a string"),
    "metadata-not-object": (raw({"__metadata__": [1]}), "__metadata__"),
    "name-nul": (raw(b'{"a\\u0000b":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', b"\0"), "not valid JSON"),
}

with open(os.path.join(out, "EXPECTED"), "w") as ex:
    ex.write("# bad file<TAB>fragment of pail's error message (read by tests/check_model.c)\n")
    for name, (data, frag) in sorted(bad.items()):
        path = os.path.join(out, f"bad-{name}.safetensors")
        with open(path, "wb") as f:
            f.write(data)
        ex.write(f"bad-{name}.safetensors\t{frag}\n")
        # The reference must refuse it too (so the corpus is not pail's opinion alone).
        # Exceptions: rules pail adds on top (limits on dims, unknown entry fields,
        # non-string metadata values, NUL in names).
        try:
            with safe_open(path, "np") as s:
                for k in s.keys():
                    s.get_tensor(k)
            accepted = True
        except Exception:
            accepted = False
        if accepted:
            print(f"note: reference safetensors accepts bad-{name} (pail is stricter)")

for f in sorted(os.listdir(out)):
    if f.startswith("good-"):
        load_file(os.path.join(out, f))  # sanity: the reference reads its own files
for f in os.listdir(out):
    os.chmod(os.path.join(out, f), 0o644)
print(f"wrote {len(bad)} bad and 3 good files to {out}")
