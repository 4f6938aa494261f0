"""Compares the LoRA tensors of two pail adapter files (h5py): exit 0 when
every lora_A / lora_B dataset is bit-identical (or, with --differ, when at
least one differs). Usage: compare_adapters.py A.h5 B.h5 [--differ]"""
import sys

import h5py
import numpy as np

a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
names = []
a.visit(lambda n: names.append(n) if isinstance(a[n], h5py.Dataset) and n.startswith("layers/") else None)
same = all(np.array_equal(a[n][:], b[n][:]) for n in names) and len(names) > 0
print(f"{len(names)} tensors, {'identical' if same else 'different'}")
want_differ = "--differ" in sys.argv
sys.exit(0 if same != want_differ else 1)
