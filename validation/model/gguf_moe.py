"""GGUF mixtures of experts for tests/integration/test_gguf_moe.sh: tiny random transformers
checkpoints of qwen3_moe, qwen2_moe, olmoe, granitemoe, mixtral and gpt_oss (save_pretrained: per-expert
tensors, granitemoe's fused ones), written as GGUF by llama.cpp's own convert_hf_to_gguf.py (the
pinned tree, --src) at f32, f16 and q8_0 (the converter's Q8_0; gpt-oss also its f32 file with the expert matrices
MXFP4 by gguf-py's quantize, the type of the published files) and, with --quantize, llama-quantize's
Q4_0 of the f32 file (qwen3moe-kq, C = Fe = 256: its Q4_K_M, K-quant experts whose down is Q6_K in
one layer and Q4_K in the other); each imported by grpo-ctl import-gguf and checked:

  - the imported tensors (the experts' rows, the router, the shared expert and its gate included):
    an f32 file's bit-equal to the checkpoint's; another file's, imported with --dequantize, bit-equal
    to gguf-py's dequantization of the file mapped back onto the checkpoint's names (each expert's
    slab of ffn_{gate,up,down}_exps, Q and K un-permuted where the converter permuted them);
  - pail's log-probs on the import (quantized matrices computed on as their blocks) against
    transformers on the checkpoint (f32) or on those dequantized values (the others): <= 1e-4 on
    3 random sequences of 32 tokens;
  - qwen3moe-unnorm (a qwen3_moe checkpoint with norm_topk_prob false): llama.cpp renormalises
    every qwen3moe's routing weights, so the import does, and must differ from that checkpoint.

  run WORK --src LLAMACPP_SRC --ctl GRPO_CTL [--quantize LLAMA_QUANTIZE] [--only NAME]
      PASS / FAIL lines; then (without --only) mixed.gguf, the q8_0 qwen3moe file with layer 0's
      up written F32, imported and checked, and the refusals' files WORK/<name>.gguf (the test's)

The venv has no sentencepiece and the tiny tokenizer's pre-tokenizer has no hash the converter
knows: its tokenizer is written the gpt2 way with tokenizer.ggml.pre gpt-2 (the tensors and keys
are the converter's own)."""
import argparse
import json
import os
import re
import subprocess
import sys

import numpy as np

E, K, FE = 4, 2, 32
COMMON = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
              max_position_embeddings=256, rms_norm_eps=1e-5, tie_word_embeddings=False)
# name: (model_type, GGUF architecture, the config's own fields)
FAMILIES = {
    "qwen3moe": ("qwen3_moe", "qwen3moe", dict(head_dim=16, intermediate_size=96, moe_intermediate_size=FE,
                                                num_experts=E, num_experts_per_tok=K, norm_topk_prob=True)),
    "qwen3moe-unnorm": ("qwen3_moe", "qwen3moe", dict(head_dim=16, intermediate_size=96, moe_intermediate_size=FE,
                                                       num_experts=E, num_experts_per_tok=K, norm_topk_prob=False)),
    # C = Fe = 256: rows of whole K-quant blocks, so llama-quantize's Q4_K_M keeps K types in the experts
    "qwen3moe-kq": ("qwen3_moe", "qwen3moe", dict(hidden_size=256, head_dim=16, intermediate_size=96,
                                                   moe_intermediate_size=256, num_experts=E, num_experts_per_tok=K,
                                                   norm_topk_prob=True)),
    "qwen2moe": ("qwen2_moe", "qwen2moe", dict(intermediate_size=96, moe_intermediate_size=FE,
                                                shared_expert_intermediate_size=48, num_experts=E,
                                                num_experts_per_tok=K, norm_topk_prob=False)),
    "olmoe": ("olmoe", "olmoe", dict(intermediate_size=FE, num_experts=E, num_experts_per_tok=K)),
    "granitemoe": ("granitemoe", "granitemoe", dict(intermediate_size=FE, num_local_experts=E, num_experts_per_tok=K,
                                                    embedding_multiplier=12.0, residual_multiplier=0.22,
                                                    attention_multiplier=0.25, logits_scaling=8.0)),
    "mixtral": ("mixtral", "llama", dict(intermediate_size=FE, num_local_experts=E, num_experts_per_tok=K)),
    # layer 0 sliding (a window of 8 in 32 tokens), layer 1 full: llama.cpp's fixed pattern for a file
    # without one; YaRN with truncate true and beta 32 / 1, as llama.cpp runs every gpt-oss file
    "gpt-oss": ("gpt_oss", "gpt-oss", dict(head_dim=16, intermediate_size=FE, num_local_experts=E, num_experts_per_tok=K,
                                           sliding_window=8, layer_types=["sliding_attention", "full_attention"],
                                           rope_parameters=dict(rope_type="yarn", factor=4.0, beta_fast=32.0, beta_slow=1.0,
                                                                truncate=True, original_max_position_embeddings=64,
                                                                rope_theta=150000.0))),
}
PERMUTED = ("granitemoe", "mixtral")  # LlamaModel and its subclasses permute Q and K
OUTTYPES = ("f32", "f16", "q8_0")


def use_tree(src):
    """llama.cpp's own gguf-py ahead of the venv's, as convert_hf_to_gguf.py itself does."""
    sys.path.insert(0, os.path.join(src, "gguf-py"))
    sys.path.insert(0, src)


def tokenizer():
    """gguf_files.py's tiny byte-level BPE as a tokenizers file (its 336 tokens, <|endoftext|> last)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from gguf_files import tiny_vocab
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    tokens, _, merges = tiny_vocab()
    vocab = {t: i for i, t in enumerate(tokens[:-4])}
    tk = Tokenizer(models.BPE(vocab=vocab, merges=[tuple(m.split(" ")) for m in merges]))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens(["<|endoftext|>"])
    return PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|endoftext|>"), len(vocab) + 1


def checkpoint(hf, name, tok, vocab, seed):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    mt, _, kw = FAMILIES[name]
    cfg = AutoConfig.for_model(mt, vocab_size=vocab, **{**COMMON, **kw})
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "norm" in n:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif "sinks" in n:
                p.copy_(torch.randn_like(p))
            elif "bias" in n:
                p.copy_(0.1 * torch.randn_like(p))
            elif n.endswith("mlp.gate.weight") or "router" in n or n.endswith("block_sparse_moe.gate.weight"):
                p.copy_(torch.randn_like(p) / p.shape[-1] ** 0.5 * 4)  # logits ~ N(0, 16): no near ties
            elif "q_proj" in n or "k_proj" in n:  # scores far from uniform, so a wrong RoPE layout shows
                p.mul_(10.0)
    model.save_pretrained(hf)
    tok.save_pretrained(hf)


def convert(hf, out, outtype):
    """llama.cpp's convert_hf_to_gguf.py main(), in this process."""
    import convert_hf_to_gguf as conv
    from conversion import base
    base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "gpt-2"

    def no_sp(self):
        raise FileNotFoundError("no tokenizer.model")
    base.TextModel._set_vocab_sentencepiece = no_sp  # LlamaModel.set_vocab tries these first
    base.TextModel._set_vocab_llama_hf = no_sp
    argv = sys.argv
    sys.argv = ["convert_hf_to_gguf.py", hf, "--outtype", outtype, "--outfile", out]
    try:
        conv.main()
    finally:
        sys.argv = argv


def unpermute(w, n_head):
    """The inverse of convert_hf_to_gguf's LlamaModel.permute (rows (i, t) -> (t, i) in each head)."""
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def reference(path, hf, name):
    """The checkpoint's tensors as the GGUF at path holds them: gguf-py's dequantization of each
    file tensor, mapped back onto the checkpoint's names."""
    import gguf
    from safetensors.numpy import load_file
    mt, arch, _ = FAMILIES[name]
    cfg = json.load(open(f"{hf}/config.json"))
    H, Hkv, L = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["num_hidden_layers"]
    r = gguf.GGUFReader(path)
    have = {t.name: gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32) for t in r.tensors}
    tmap = gguf.get_tensor_name_map(next(k for k, v in gguf.MODEL_ARCH_NAMES.items() if v == arch), L)
    out = {}
    for n, w in load_file(f"{hf}/model.safetensors").items():
        m = re.match(r"model\.layers\.(\d+)\.(?:mlp|block_sparse_moe)\.experts\.(\d+)\.(\w+)\.weight$", n)
        o = re.match(r"model\.layers\.(\d+)\.(?:mlp\.experts\.(gate_up_proj|down_proj)(_bias)?|self_attn\.sinks)$", n)
        g = re.match(r"model\.layers\.(\d+)\.block_sparse_moe\.(input|output)_linear\.weight$", n)
        if o:  # gpt_oss: gate_up (E, C, 2 Fe) with gate and up interleaved, down (E, Fe, C), biases (E, *)
            b, x = f"blk.{o[1]}.", ".bias" if o[3] else ".weight"
            if not o[2]:
                v = have[b + "attn_sinks.weight"]
            elif o[2] == "down_proj":
                v = have[b + "ffn_down_exps" + x] if o[3] else have[b + "ffn_down_exps" + x].transpose(0, 2, 1)
            else:
                gt, up = have[b + "ffn_gate_exps" + x], have[b + "ffn_up_exps" + x]
                if not o[3]:
                    gt, up = gt.transpose(0, 2, 1), up.transpose(0, 2, 1)
                v = np.empty((*gt.shape[:-1], 2 * gt.shape[-1]), np.float32)
                v[..., 0::2], v[..., 1::2] = gt, up
        elif m:
            which = {"gate_proj": "gate", "w1": "gate", "up_proj": "up", "w3": "up"}.get(m[3], "down")
            v = have[f"blk.{m[1]}.ffn_{which}_exps.weight"][int(m[2])]
        elif g and g[2] == "input":  # granitemoe: (E, 2 Fe, C), each expert's gate rows then its up rows
            v = np.concatenate([have[f"blk.{g[1]}.ffn_gate_exps.weight"], have[f"blk.{g[1]}.ffn_up_exps.weight"]], 1)
        elif g:
            v = have[f"blk.{g[1]}.ffn_down_exps.weight"]
        else:
            v = have[tmap.get_name(n, try_suffixes=(".weight", ".bias"))].reshape(w.shape)
            if name in PERMUTED and n.endswith(("q_proj.weight", "k_proj.weight")):
                v = unpermute(v, H if "q_proj" in n else Hkv)
        if v.shape != w.shape:
            raise SystemExit(f"{path}: {n} maps to {v.shape}, the checkpoint's is {w.shape}")
        out[n] = np.ascontiguousarray(v)
    return out


def ctl(args):
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"{' '.join(os.path.basename(a) for a in args[:2])}: {r.stderr.strip()}")
    return r.stdout


def compare_tensors(got_dir, want):
    """Max |pail's imported tensor - want| over want's names (pail writes the checkpoint's names)."""
    from safetensors.numpy import load_file
    got = load_file(f"{got_dir}/model.safetensors")
    if set(got) != set(want):
        return f"names differ: {sorted(set(got) ^ set(want))[:4]}"
    worst = max(float(np.abs(got[n].astype(np.float32) - want[n]).max()) for n in want)
    experts = sum(1 for n in want if "experts" in n or "_linear" in n)
    return None if worst == 0 else f"max |diff| {worst:.3g}", len(want), experts


def logprobs(model_dir, ref_dir, work, ctl_bin, vocab):
    import torch
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(ref_dir, dtype=torch.float32).eval()
    g = torch.Generator().manual_seed(5)
    seqs = [torch.randint(0, vocab, (32,), generator=g).tolist() for _ in range(3)]
    path = f"{work}/ids.jsonl"
    with open(path, "w") as f:
        for s in seqs:
            f.write(json.dumps({"ids": s}) + "\n")
    lines = ctl([ctl_bin, "logprobs", "--model", model_dir, "--input", path]).splitlines()
    worst = 0.0
    for s, line in zip(seqs, lines):
        with torch.no_grad():
            lp = torch.log_softmax(model(torch.tensor([s])).logits[0].double(), -1)
        ref = lp[torch.arange(len(s) - 1), torch.tensor(s[1:])].numpy()
        worst = max(worst, float(np.abs(np.array(json.loads(line)["logprobs"]) - ref).max()))
    return worst if len(lines) == len(seqs) else float("inf")


def save_reference(ref_dir, hf, tensors):
    """A checkpoint folder holding tensors: transformers loads the dequantized values from it."""
    import shutil
    from safetensors.numpy import save_file
    os.makedirs(ref_dir, exist_ok=True)
    shutil.copy(f"{hf}/config.json", ref_dir)
    save_file(tensors, f"{ref_dir}/model.safetensors", metadata={"format": "pt"})


def cmd_run(a):
    use_tree(a.src)
    import torch
    from safetensors.numpy import load_file
    torch.set_num_threads(1)  # tiny models; and no idle pool spinning against grpo-ctl
    tok, vocab = tokenizer()
    bad = 0

    def report(ok, what):
        nonlocal bad
        bad += not ok
        print(f"{'PASS' if ok else 'FAIL'} {what}", flush=True)

    for name in a.only or FAMILIES:
        hf, arch = f"{a.work}/{name}.hf", FAMILIES[name][1]
        checkpoint(hf, name, tok, vocab, a.seed)
        files = {}
        for t in ("f32",) if name.startswith("qwen3moe-") else OUTTYPES:
            files[t] = f"{a.work}/{name}-{t}.gguf"
            convert(hf, files[t], t)
        if name == "gpt-oss":  # the f32 file with its expert matrices MXFP4 (gguf-py's quantize), as published
            files["mxfp4"] = f"{a.work}/{name}-mxfp4.gguf"
            rewrite(files["f32"], files["mxfp4"], edit=mxfp4_experts)
        if a.quantize and name not in ("qwen3moe-unnorm", "gpt-oss"):
            qt = "Q4_K_M" if name == "qwen3moe-kq" else "Q4_0"
            files[qt.lower()] = f"{a.work}/{name}-{qt.lower()}.gguf"
            ctl([a.quantize, files["f32"], files[qt.lower()], qt])
        for t, f in files.items():
            what = f"{name} {t} ({arch})"
            try:
                d = f"{a.work}/{name}-{t}"
                ctl([a.ctl, "import-gguf", f, "--out", d, "--dtype", "f32"])
                if name == "qwen3moe-unnorm":  # llama.cpp renormalises: the import must not match this checkpoint
                    err = logprobs(d, hf, a.work, a.ctl, vocab)
                    report(err > 1e-3, f"{what}: imported with norm_topk_prob true as llama.cpp runs every qwen3moe; "
                           f"differs from the norm_topk_prob false checkpoint (log-probs max |diff| {err:.3g} > 1e-3)")
                    continue
                if t == "f32":
                    want, ref_dir = {n: w.astype(np.float32) for n, w in load_file(f"{hf}/model.safetensors").items()}, hf
                    deq = d
                else:
                    want, ref_dir, deq = reference(f, hf, name), f"{d}.ref", f"{d}-deq"
                    save_reference(ref_dir, hf, want)
                    ctl([a.ctl, "import-gguf", f, "--out", deq, "--dtype", "f32", "--dequantize"])
                diff = compare_tensors(deq, want)
                src = "the checkpoint's" if t == "f32" else "gguf-py's dequantization mapped back"
                if isinstance(diff, str) or diff[0]:
                    report(False, f"{what}: imported tensors against {src}: {diff if isinstance(diff, str) else diff[0]}")
                else:
                    report(True, f"{what}: {diff[1]} imported tensors ({diff[2]} of the experts) bit-equal to {src}")
                err = logprobs(d, ref_dir, a.work, a.ctl, vocab)
                kept = "" if t in ("f32", "f16") else ", dequantized at import" if t == "mxfp4" else ", computed on its blocks"
                report(err <= 1e-4, f"{what}: log-probs max |pail - transformers on the "
                       f"{'checkpoint' if t == 'f32' else 'dequantized values'}| = {err:.3g}{kept} (<= 1e-4)")
            except (RuntimeError, SystemExit, KeyError) as e:
                report(False, f"{what}: {e}")
    if not a.only:
        damaged(a.work)
        # gate and up of two types in a layer: that layer's exp_gate_up held as fp32, the other's blocks kept
        what = "mixed.gguf (layer 0: gate Q8_0, up F32)"
        try:
            d, q = f"{a.work}/mixed", f"{a.work}/qwen3moe-q8_0"
            ctl([a.ctl, "import-gguf", f"{d}.gguf", "--out", d, "--dtype", "f32"])
            err = logprobs(d, f"{q}.ref", a.work, a.ctl, vocab)
            sm, sq = (os.path.getsize(f"{x}/model.safetensors") for x in (d, q))
            report(err <= 1e-4 and sm > sq, f"{what}: log-probs max |pail - transformers on the q8_0 file's values| = "
                   f"{err:.3g} (<= 1e-4); model.safetensors {sm} bytes (the q8_0 import's {sq}: layer 0's experts fp32)")
        except RuntimeError as e:
            report(False, f"{what}: {e}")
    sys.exit(1 if bad else 0)


def rewrite(src, dst, arch=None, drop_keys=(), set_keys=(), drop_tensors=(), edit=None, add=()):
    """A copy of the GGUF src with keys or tensors changed (set_keys: (key, value, GGUFValueType);
    add: (name, array)); edit(name, tensor) returns the array to write, or None to keep it."""
    import gguf
    r = gguf.GGUFReader(src)
    w = gguf.GGUFWriter(dst, arch or r.fields["general.architecture"].contents())
    for k, f in r.fields.items():
        if k.startswith("GGUF.") or k == "general.architecture" or k in drop_keys:
            continue
        w.add_key_value(k, f.contents(), f.types[0], sub_type=f.types[-1] if len(f.types) > 1 else None)
    for k, v, vt in set_keys:
        w.add_key_value(k, v, vt)
    for t in r.tensors:
        if t.name in drop_tensors:
            continue
        v = np.array(t.data)
        if edit and (e := edit(t.name, t)) is not None:
            v = e
        elif t.tensor_type not in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
            v = (v, t.tensor_type)  # a quantized one's blocks as they are
        if isinstance(v, tuple):  # (its blocks' bytes (..., row bytes), ggml type)
            w.add_tensor(t.name, v[0], raw_dtype=v[1])
        else:
            w.add_tensor(t.name, v)
    for n, v in add:
        w.add_tensor(n, v)
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()


def mxfp4_experts(name, t):
    """gguf-py's MXFP4 of an expert matrix (ffn_{gate,up,down}_exps.weight), None for the others."""
    import gguf
    if not re.search(r"ffn_(gate|up|down)_exps\.weight$", name):
        return None
    return gguf.quants.quantize(np.array(t.data, np.float32), gguf.GGMLQuantizationType.MXFP4), \
        gguf.GGMLQuantizationType.MXFP4


def damaged(W):
    """The files the refusals need and mixed.gguf, from run's files."""
    import gguf
    VT = gguf.GGUFValueType
    q3, q2, gr, mx = (f"{W}/{n}-f32.gguf" for n in ("qwen3moe", "qwen2moe", "granitemoe", "mixtral"))
    rewrite(q3, f"{W}/no-up.gguf", drop_tensors=("blk.1.ffn_up_exps.weight",))
    rewrite(q3, f"{W}/three-experts.gguf",
            edit=lambda n, t: np.array(t.data)[:3] if n == "blk.0.ffn_down_exps.weight" else None)
    rewrite(q3, f"{W}/no-count.gguf", drop_keys=("qwen3moe.expert_count",))
    rewrite(q3, f"{W}/k5.gguf", set_keys=(("qwen3moe.expert_used_count", 5, VT.UINT32),))
    rewrite(q2, f"{W}/no-shexp.gguf", drop_tensors=("blk.0.ffn_gate_inp_shexp.weight",))
    rewrite(gr, f"{W}/granite-shared.gguf", set_keys=(("granitemoe.expert_shared_feed_forward_length", 48, VT.UINT32),))
    # gpt-oss without layer 1's sinks, without its experts' width, with an up bias of 3 experts
    go = f"{W}/gpt-oss-f32.gguf"
    rewrite(go, f"{W}/gpt-oss-no-sinks.gguf", drop_tensors=("blk.1.attn_sinks.weight",))
    rewrite(go, f"{W}/gpt-oss-no-fe.gguf", drop_keys=("gpt-oss.expert_feed_forward_length",))
    # llama.cpp's sliding_window_pattern as a bool array (layer 0 full, layer 1 sliding) and as a period
    # (0: every layer slides); without rope.scaling.type: plain RoPE
    rewrite(go, f"{W}/gpt-oss-pattern.gguf", set_keys=(("gpt-oss.attention.sliding_window_pattern", [False, True],
                                                        VT.ARRAY),))
    rewrite(go, f"{W}/gpt-oss-period0.gguf", set_keys=(("gpt-oss.attention.sliding_window_pattern", 0, VT.UINT32),))
    rewrite(go, f"{W}/gpt-oss-norope.gguf", drop_keys=("gpt-oss.rope.scaling.type",))
    rewrite(go, f"{W}/gpt-oss-up-bias.gguf",
            edit=lambda n, t: np.array(t.data)[:3] if n == "blk.0.ffn_up_exps.bias" else None)
    # gate Q8_0 and up F32 (its dequantized values) in layer 0: that layer's exp_gate_up held as fp32,
    # layer 1's as its Q8_0 blocks; the same values as the q8_0 file
    rewrite(f"{W}/qwen3moe-q8_0.gguf", f"{W}/mixed.gguf", edit=lambda n, t: gguf.quants.dequantize(
        t.data, t.tensor_type).astype(np.float32) if n == "blk.0.ffn_up_exps.weight" else None)
    # a Q3_K expert tensor (zero blocks), a type pail does not compute on: refused unless --dequantize
    rewrite(f"{W}/qwen3moe-kq-f32.gguf", f"{W}/q3k-experts.gguf", edit=lambda n, t: (
        np.zeros((*t.data.shape[:-1], t.data.shape[-1] // 256 * 110), np.uint8), gguf.GGMLQuantizationType.Q3_K)
        if n == "blk.0.ffn_gate_exps.weight" else None)
    # a Mixtral file with a bias on Q (MixtralAttention has none)
    rewrite(mx, f"{W}/mixtral-bias.gguf", add=(("blk.0.attn_q.bias", np.zeros(64, np.float32)),))


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("run"); s.add_argument("work"); s.add_argument("--src", required=True)
    s.add_argument("--ctl", required=True); s.add_argument("--quantize", help="llama-quantize: also a Q4_0 file")
    s.add_argument("--seed", type=int, default=3)
    s.add_argument("--only", action="append", choices=sorted(FAMILIES), help="these families only")
    s.set_defaults(f=cmd_run)
    a = p.parse_args()
    a.f(a)


if __name__ == "__main__":
    main()
