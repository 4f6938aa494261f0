"""pail's files as the validation scripts write them, shared by those scripts:
the LoRA adapter (doc/formats.md) from a PEFT model, and a checkpoint folder's
base_sha256 (doc/models.md). Import after putting validation/ on sys.path."""
import glob
import hashlib
import os

import h5py
import numpy as np

MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
# phi3's checkpoints fuse q, k, v (qkv_proj) and gate, up (gate_up_proj): PEFT's modules are those
PHI3_MODULES = ["qkv_proj", "o_proj", "gate_up_proj", "down_proj"]


def base_sha256(d):
    """doc/models.md: sha256 of `sha256sum *.safetensors` output, files sorted by name."""
    lines = ""
    for f in sorted(glob.glob(os.path.join(d, "*.safetensors")), key=os.path.basename):
        lines += hashlib.sha256(open(f, "rb").read()).hexdigest() + "  " + os.path.basename(f) + "\n"
    return hashlib.sha256(lines.encode()).hexdigest()


def write_pail_adapter(peft_model, path, L, rank, alpha, base="0" * 64, modules=MODULES):
    """A pail adapter file holding peft_model's LoRA A and B (all modules adapted)."""
    sd = {k: v.detach().float().numpy() for k, v in peft_model.state_dict().items() if "lora_" in k}
    with h5py.File(path, "w") as f:
        f.attrs["format"] = np.bytes_("pail.lora")
        f.attrs["format_version"] = np.int64(1)
        for k, v in dict(version=0, step=0, rank=rank, use_rslora=0, num_layers=L, created_unix=0).items():
            f.attrs[k] = np.int64(v)
        f.attrs["alpha"] = np.float64(alpha)
        f.attrs["scaling"] = np.float64(alpha / rank)
        f.attrs["target_modules"] = np.array([m.encode() for m in modules])
        f.attrs["base_sha256"] = np.bytes_(base)
        for i in range(L):
            for m in modules:
                parent = "mlp" if m in ("gate_proj", "up_proj", "down_proj", "gate_up_proj") else "self_attn"
                for ab in ("A", "B"):
                    key = f"base_model.model.model.layers.{i}.{parent}.{m}.lora_{ab}.default.weight"
                    f[f"layers/{i}/{m}/lora_{ab}"] = sd[key]
