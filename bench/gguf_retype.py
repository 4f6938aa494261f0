"""The llama.cpp side's model for bench/vs_llamacpp.sh: a GGUF file holding the
values pail's `grpo-ctl import-gguf --dtype f32|bf16` folder holds, and a check
that they are the same, bit for bit.

    gguf_retype.py IN.gguf OUT.gguf f32|bf16 PAIL_FOLDER

Every quantized tensor of IN (the wheel's Q4_1 / Q8_0 file) is dequantized by
gguf-py (pail's import is bit-exact with it) and written as F32, or rounded to
BF16 (round to nearest even, as pail's import rounds); 1-D tensors (the norms)
stay F32, as convert_hf_to_gguf.py writes them and as pail holds vectors (in
bf16 with bf16's values: pail's bf16 folder stores them as bf16). The
metadata (tokenizer, hyper-parameters) is IN's, general.file_type set to the new
type. Then every tensor of OUT is compared with PAIL_FOLDER's model.safetensors
(q and k rows in GGUF's RoPE order, convert_hf_to_gguf's permute): any value
that differs fails. Needs the sdist's gguf-py on PYTHONPATH, numpy, torch and
safetensors (the project venv, mk/venv.sh)."""
import sys

import gguf
import numpy as np
import torch
from safetensors.torch import load_file

FT = gguf.GGMLQuantizationType
HF = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
      "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
      "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm"}


def field(reader, key):
    f = reader.fields[key]
    return f.contents()


def retype(src, dst, want):
    reader = gguf.GGUFReader(src)
    arch = field(reader, gguf.Keys.General.ARCHITECTURE)
    writer = gguf.GGUFWriter(dst, arch)
    for f in reader.fields.values():
        if f.name == gguf.Keys.General.ARCHITECTURE or f.name.startswith("GGUF."):
            continue
        vtype = f.types[0]
        sub = f.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        val = f.contents()
        if f.name == gguf.Keys.General.FILE_TYPE:
            val = int(gguf.LlamaFileType.ALL_F32 if want == "f32" else gguf.LlamaFileType.MOSTLY_BF16)
        writer.add_key_value(f.name, val, vtype, sub_type=sub)
    for t in reader.tensors:
        x = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        if want == "bf16" and x.ndim > 1:
            writer.add_tensor(t.name, gguf.quants.quantize(x, FT.BF16), raw_dtype=FT.BF16)
        elif want == "bf16":  # pail's bf16 folder stores the norms as bf16 too: the same values, held as F32
            bits = gguf.quants.quantize(x, FT.BF16).view(np.uint16).astype(np.uint32) << 16
            writer.add_tensor(t.name, bits.view(np.float32))
        else:
            writer.add_tensor(t.name, x)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return arch


def permute(w, n_head):  # convert_hf_to_gguf.py's LlamaModel.permute: HF rows -> GGUF's RoPE order
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def check(dst, folder, arch):
    reader = gguf.GGUFReader(dst)
    heads = int(field(reader, f"{arch}.attention.head_count"))
    kv_heads = int(field(reader, f"{arch}.attention.head_count_kv"))
    pail = load_file(f"{folder}/model.safetensors")
    n, values = 0, 0
    for t in reader.tensors:
        parts = t.name.split(".")
        if parts[0] == "token_embd":
            hf = "model.embed_tokens.weight"
        elif parts[0] == "output_norm":
            hf = "model.norm.weight"
        elif parts[0] == "output":
            hf = "lm_head.weight"
        elif parts[0] == "blk" and parts[2] in HF:
            hf = f"model.layers.{parts[1]}.{HF[parts[2]]}.weight"
        else:
            sys.exit(f"gguf_retype: {dst}: tensor {t.name} has no counterpart in pail's folder")
        if hf not in pail:
            sys.exit(f"gguf_retype: {folder}/model.safetensors has no {hf} (for {t.name})")
        p = pail[hf]
        if p.dtype == torch.bfloat16 and t.tensor_type == FT.BF16:
            p = p.view(torch.int16).numpy().view(np.uint16)
        else:  # bf16 widens to f32 exactly
            p = p.float().numpy()
        if parts[-2] in ("attn_q", "attn_k"):
            p = permute(p, heads if parts[-2] == "attn_q" else kv_heads)
        g = np.asarray(t.data)
        if t.tensor_type == FT.BF16:
            g = g.view(np.uint16)
        if g.dtype != p.dtype or g.shape != p.shape:
            sys.exit(f"gguf_retype: {t.name}: {g.dtype} {g.shape} in {dst}, {p.dtype} {p.shape} in {folder}")
        diff = int(np.count_nonzero(g.view(np.uint8) != p.view(np.uint8)))
        if diff:
            sys.exit(f"gguf_retype: {t.name}: {diff} bytes differ from {hf} in {folder}")
        n += 1
        values += g.size
    return n, values


def main():
    if len(sys.argv) != 5 or sys.argv[3] not in ("f32", "bf16"):
        sys.exit("usage: gguf_retype.py IN.gguf OUT.gguf f32|bf16 PAIL_FOLDER")
    src, dst, want, folder = sys.argv[1:]
    arch = retype(src, dst, want)
    n, values = check(dst, folder, arch)
    print(f"gguf_retype: {dst}: {n} tensors, {values} values ({want}), equal bit for bit to {folder}")


if __name__ == "__main__":
    main()
