"""GGUF files for tests/integration/test_gguf.sh, written with gguf-py's GGUFWriter,
and the checks against gguf-py and transformers.

  types OUT.gguf                 every tensor type pail reads, random values; K-quants as
                                 random blocks with finite fp16 scales (gguf-py cannot quantize them)
  check-dequant FILE.gguf DIR    DIR/<name>.f32 (pail's) bit-equal to gguf.quants.dequantize
  model OUT.gguf --arch A --qtype T   a tiny random llama / qwen2 / qwen3 model with a gpt2 tokenizer
                                 (--tokenizer sp: a small SentencePiece one; a tokenizer.model path: that one)
  check-import FILE.gguf DIR     pail's folder against transformers' reading of the GGUF: ids, log-probs
  check-tokenizer FILE.gguf DIR  pail's tokenizer against transformers' from the GGUF on the tokenizer corpus
  from-hf WORK NAME=FAMILY[:MOD] a tiny random transformers checkpoint (granite, olmo2, exaone, smollm3,
                                 mistral; llama31, exaone35: llama3 RoPE scaling; phi3, phi3lr: partial
                                 rotary, longrope, window; gemma2, gemma3) and the GGUF convert_hf_to_gguf writes from it
  check-hf WORK NAME ...         pail's log-probs on the imported folder against transformers' on the checkpoint
                                 (NAME@gguf or --from-gguf: transformers' reading of WORK/NAME.gguf)
"""
import argparse
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q

QUANTIZED = [Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1]
K_TYPES = [Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K]


def random_k_blocks(rng, qtype, n_blocks):
    """Random bytes with every fp16 field (d, dmin) set to a finite value."""
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    b = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    # byte offsets of the fp16 scales in each layout (gguf/quants.py)
    f16_at = {Q.Q2_K: [80, 82], Q.Q3_K: [108], Q.Q4_K: [0, 2], Q.Q5_K: [0, 2], Q.Q6_K: [208]}[qtype]
    for off in f16_at:
        d = rng.uniform(-0.05, 0.05, size=n_blocks).astype(np.float16)
        b[:, off:off + 2] = d.view(np.uint8).reshape(n_blocks, 2)
    return b


def add(writer, name, data, qtype, rng=None):
    """Adds a float32 array quantized by gguf-py (or, for a K type, random K blocks of its shape:
    gguf-py cannot quantize them)."""
    if qtype in (Q.F32, Q.F16):
        writer.add_tensor(name, data.astype(np.float32 if qtype == Q.F32 else np.float16))
    elif qtype in K_TYPES:
        rows, cols = data.shape
        b = random_k_blocks(rng, qtype, rows * cols // 256).reshape(rows, cols // 256 * gguf.GGML_QUANT_SIZES[qtype][1])
        for off in {Q.Q4_K: [0, 2], Q.Q5_K: [0, 2], Q.Q6_K: [208], Q.Q2_K: [80, 82], Q.Q3_K: [108]}[qtype]:
            # smaller scales than the types file's: a model whose logits stay in a sane range
            d = (rng.uniform(0.0002, 0.0008, size=rows * cols // 256) * np.sqrt(256.0 / cols)).astype(np.float16)
            b.reshape(-1, gguf.GGML_QUANT_SIZES[qtype][1])[:, off:off + 2] = d.view(np.uint8).reshape(-1, 2)
        writer.add_tensor(name, b, raw_dtype=qtype)
    else:
        writer.add_tensor(name, gguf.quants.quantize(data, qtype), raw_dtype=qtype)


def cmd_types(a):
    rng = np.random.default_rng(7)
    w = gguf.GGUFWriter(a.out, "llama")
    for qt in QUANTIZED:
        add(w, f"t.{qt.name}", rng.normal(0, 1, size=(3, 64)).astype(np.float32), qt)
    for qt in K_TYPES:
        w.add_tensor(f"t.{qt.name}", random_k_blocks(rng, qt, 6).reshape(2, -1), raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def cmd_check_dequant(a):
    r = gguf.GGUFReader(a.file)
    bad = 0
    for t in r.tensors:
        ref = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32).ravel()
        got = np.fromfile(f"{a.dir}/{t.name}.f32", dtype=np.float32)
        same = got.shape == ref.shape and np.array_equal(got.view(np.uint32), ref.view(np.uint32))
        print(f"dequant {t.tensor_type.name:5s} {t.name}: {ref.size} values {'bit-equal' if same else 'DIFFER'}")
        bad += not same
    sys.exit(1 if bad else 0)


STRINGS = ["Hello world! 123 4567", "  two  spaces\n\nand tabs\t.", "<|im_start|>user\nhi<|im_end|>",
           "caf\u00e9 na\u00efve \u65e5\u672c\u8a9e \U0001F600", "don't I'll 3.14159 x=y+z"]


def tiny_vocab():
    """A byte-level BPE vocabulary: the 256 byte symbols, merges of common pairs, then
    control tokens; a user-defined one (<think>)."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode
    alphabet = [bytes_to_unicode()[b] for b in range(256)]
    tokens, merges = list(alphabet), []
    have = set(tokens)
    corpus = " ".join(STRINGS * 3).encode()
    words = ["".join(bytes_to_unicode()[b] for b in w) for w in corpus.replace(b" ", b" \x00").split(b"\x00")]
    seqs = [list(w) for w in words]
    for _ in range(80):  # greedy BPE on the strings themselves
        counts = {}
        for s in seqs:
            for a, b in zip(s, s[1:]):
                counts[(a, b)] = counts.get((a, b), 0) + 1
        if not counts:
            break
        (a, b), _ = max(counts.items(), key=lambda kv: (kv[1], kv[0]))
        merges.append(f"{a} {b}")
        if a + b not in have:
            tokens.append(a + b); have.add(a + b)
        for s in seqs:
            i = 0
            while i < len(s) - 1:
                if s[i] == a and s[i + 1] == b:
                    s[i:i + 2] = [a + b]
                i += 1
    types = [1] * len(tokens)
    for t, ty in (("<|endoftext|>", 3), ("<|im_start|>", 3), ("<|im_end|>", 3), ("<think>", 4)):
        tokens.append(t); types.append(ty)
    return tokens, types, merges


def sp_vocab_random():
    """A small SentencePiece BPE vocabulary as llama.cpp writes one: <unk> (UNKNOWN), <s> </s>
    (CONTROL), the 256 <0xNN> byte tokens (BYTE), then the characters and pieces of greedy BPE
    on the strings with U+2581 for the space, scored -rank, with ties (equal scores) on purpose;
    a CONTROL [INST] and a USER_DEFINED <think>. Characters outside it fall back to bytes."""
    text = "\u2581" + "\u2581".join(" ".join(STRINGS * 3).replace("\n", " ").split(" "))
    chars = sorted(set(text) - {"\u65e5", "\U0001F600"})  # two characters left to the byte fallback
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [2, 3, 3] + [6] * 256
    scores = [0.0] * len(tokens)
    pieces, have = [], set(tokens)
    words = [list(w) for w in text.replace("\u2581", " \u2581").split(" ") if w]
    for _ in range(70):
        counts = {}
        for w in words:
            for x, y in zip(w, w[1:]):
                counts[(x, y)] = counts.get((x, y), 0) + 1
        if not counts:
            break
        (x, y), _ = max(counts.items(), key=lambda kv: (kv[1], kv[0]))
        if x + y not in have:
            pieces.append(x + y); have.add(x + y)
        for w in words:
            i = 0
            while i < len(w) - 1:
                if w[i] == x and w[i + 1] == y:
                    w[i:i + 2] = [x + y]
                i += 1
    for r, t in enumerate(pieces):
        tokens.append(t); types.append(1); scores.append(-float(r // 3))  # three pieces a score: ties
    for c in chars:
        if c not in have:
            tokens.append(c); types.append(1); scores.append(-1000.0); have.add(c)
    for t, ty in (("[INST]", 3), ("<think>", 4)):
        tokens.append(t); types.append(ty); scores.append(0.0)
    return tokens, types, scores


def sp_vocab_model(path):
    """A real SentencePiece tokenizer.model as llama.cpp's convert_hf_to_gguf writes it
    (_create_vocab_sentencepiece: pieces, scores, piece types; the specials' ids)."""
    from transformers.convert_slow_tokenizer import import_protobuf
    m = import_protobuf().ModelProto()
    with open(path, "rb") as f:
        m.ParseFromString(f.read())
    return [p.piece for p in m.pieces], [p.type for p in m.pieces], [p.score for p in m.pieces], m


# DeepSeek-R1-Distill-Qwen's added tokens after Qwen2.5's 151,643 BPE tokens (its
# tokenizer.json), with the types llama.cpp's converter gives them: CONTROL (3) where special or
# looking special (<|...|>, <｜...｜>), else USER_DEFINED (4).
R1_ADDED = ["<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "<｜begin▁of▁sentence｜>", "<|EOT|>", "<think>",
            "</think>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
            "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>",
            "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"]


def r1_vocab(path):
    """The real Qwen2 vocabulary of llama.cpp's ggml-vocab-qwen2.gguf (tokens and merges), its
    added tokens replaced by DeepSeek-R1-Distill-Qwen's."""
    r = gguf.GGUFReader(path)
    tokens = list(r.fields["tokenizer.ggml.tokens"].contents())[:151643]
    merges = list(r.fields["tokenizer.ggml.merges"].contents())
    types = [1] * len(tokens)
    for t in R1_ADDED:
        looks = (t.startswith("<|") and t.endswith("|>")) or (t.startswith("<｜") and t.endswith("｜>"))
        tokens.append(t); types.append(3 if looks else 4)
    return tokens, types, merges


def cmd_model(a):
    rng = np.random.default_rng(a.seed)
    arch, qt = a.arch, Q[a.qtype]
    C, L, H, Hkv, F = (256, 2, 4, 2, 512) if qt in K_TYPES else (64, 2, 4, 2, 128)  # K types: rows of 256-blocks
    D = 128 if arch == "qwen3" else C // H  # transformers reads no head_dim for qwen3: Qwen3Config's 128
    if a.tokenizer == "gpt2":
        tokens, types, merges = tiny_vocab()
    elif a.tokenizer.startswith("r1:"):
        tokens, types, merges = r1_vocab(a.tokenizer[3:])
    elif a.tokenizer == "sp":
        tokens, types, scores = sp_vocab_random()
    else:
        tokens, types, scores, proto = sp_vocab_model(a.tokenizer)
    V = len(tokens)
    w = gguf.GGUFWriter(a.out, arch)
    w.add_block_count(L); w.add_context_length(256); w.add_embedding_length(C)
    w.add_feed_forward_length(F); w.add_head_count(H); w.add_head_count_kv(Hkv)
    w.add_layer_norm_rms_eps(1e-6); w.add_rope_freq_base(a.rope_base)
    if arch == "llama":
        w.add_rope_dimension_count(D)
    if arch == "qwen3":
        w.add_key_length(D); w.add_value_length(D)
    if a.tokenizer == "gpt2":
        w.add_tokenizer_model("gpt2"); w.add_tokenizer_pre({"llama": "llama-bpe", "qwen2": "qwen2", "qwen3": "smollm"}[arch])
        w.add_token_list(tokens); w.add_token_types(types); w.add_token_merges(merges)
        w.add_bos_token_id(V - 3); w.add_eos_token_id(V - 2); w.add_pad_token_id(V - 2)
        w.add_add_bos_token(arch == "llama")
    elif a.tokenizer.startswith("r1:"):  # as convert_hf_to_gguf writes DeepSeek-R1-Distill-Qwen
        w.add_tokenizer_model("gpt2"); w.add_tokenizer_pre("deepseek-r1-qwen")
        w.add_token_list(tokens); w.add_token_types(types); w.add_token_merges(merges)
        w.add_bos_token_id(151646); w.add_eos_token_id(151643); w.add_pad_token_id(151643)
        w.add_add_bos_token(True); w.add_add_eos_token(False)
    else:  # SentencePiece: no merges, the scores rank them; the dummy prefix
        w.add_tokenizer_model("llama"); w.add_tokenizer_pre("default")
        w.add_token_list(tokens); w.add_token_scores(scores); w.add_token_types(types)
        w.add_add_space_prefix(True)
        w.add_unk_token_id(0); w.add_bos_token_id(1); w.add_eos_token_id(2)
        w.add_add_bos_token(True); w.add_add_eos_token(a.add_eos)
    if a.chat_template_file:
        a.chat_template = open(a.chat_template_file, encoding="utf-8").read()
    w.add_chat_template(a.chat_template.replace("\\0", "\0") if a.chat_template is not None else
                        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}")

    def mat(name, rows, cols, scale=0.1, q=qt):
        add(w, name, rng.normal(0, scale, size=(rows, cols)).astype(np.float32), q, rng)

    def vec(name, n, base=0.0):
        w.add_tensor(name, (base + rng.normal(0, 0.1, size=n)).astype(np.float32))

    mat("token_embd.weight", V, C, 1.0, Q.F32 if V * C % 32 or qt in K_TYPES else qt)
    for l in range(L):
        p = f"blk.{l}."
        vec(p + "attn_norm.weight", C, 1.0); vec(p + "ffn_norm.weight", C, 1.0)
        mat(p + "attn_q.weight", H * D, C); mat(p + "attn_k.weight", Hkv * D, C); mat(p + "attn_v.weight", Hkv * D, C)
        mat(p + "attn_output.weight", C, H * D)
        if arch == "qwen2":
            vec(p + "attn_q.bias", H * D); vec(p + "attn_k.bias", Hkv * D); vec(p + "attn_v.bias", Hkv * D)
        if arch == "qwen3":
            vec(p + "attn_q_norm.weight", D, 1.0); vec(p + "attn_k_norm.weight", D, 1.0)
        mat(p + "ffn_gate.weight", F, C); mat(p + "ffn_up.weight", F, C); mat(p + "ffn_down.weight", C, F)
    vec("output_norm.weight", C, 1.0)
    if arch != "qwen2":  # qwen2 tied, the others with their own head
        mat("output.weight", V, C, 0.5, Q.F32 if V * C % 32 else Q.Q8_0 if qt in K_TYPES else qt)
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()


def as_model(tok, path):
    """transformers' GGUF loader builds every byte-level vocabulary with GPT-2's or a Split regex and
    every SentencePiece one with a Metaspace pre-tokenizer; the models' own tokenizer.json files
    differ (doc/tokenizer.md), and pail's import builds those. This rewrites the loader's tokenizer
    into the model's pipeline for the names these tests write, so that the tokenizers library
    runs it: SentencePiece as Llama 2's legacy file (Prepend + Replace, no pre-tokenizer; Gemma's
    files are left as transformers builds them, GemmaTokenizer's own pipeline), llama-bpe
    with Llama 3's ignore_merges, qwen2 / deepseek-r1-qwen with NFC, smollm with Digits."""
    import json
    from tokenizers import Tokenizer
    r = gguf.GGUFReader(path)
    model = r.fields["tokenizer.ggml.model"].contents()
    pre = r.fields["tokenizer.ggml.pre"].contents() if "tokenizer.ggml.pre" in r.fields else None
    j = json.loads(tok.backend_tokenizer.to_str())
    arch = r.fields["general.architecture"].contents()
    if model == "llama" and arch in ("gemma", "gemma2", "gemma3"):
        pass  # transformers builds Gemma's files as GemmaTokenizer: the model's own pipeline
    elif model == "llama":
        j["normalizer"] = {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "\u2581"}, {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}
        j["pre_tokenizer"] = None
    elif pre == "llama-bpe":
        j["model"]["ignore_merges"] = True
    elif pre in ("qwen2", "deepseek-r1-qwen"):
        j["normalizer"] = {"type": "NFC"}
    elif pre == "smollm":
        j["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]}
    tok._tokenizer = Tokenizer.from_str(json.dumps(j))
    return tok


def cmd_check_import(a):
    """pail's folder against transformers' reading of the same GGUF: tokenizer ids on STRINGS
    (pail's grpo-ctl tokenize, given as a JSON file of lists; the tokenizer rewritten into the
    model's own pipeline, as_model), and log-probs (f32)."""
    import json, os, subprocess, torch
    from transformers import AutoTokenizer, AutoModelForCausalLM
    d, f = os.path.dirname(os.path.abspath(a.file)), os.path.basename(a.file)
    tok = as_model(AutoTokenizer.from_pretrained(d, gguf_file=f), a.file)
    from tokenizers import Tokenizer
    written = Tokenizer.from_file(f"{a.dir}/tokenizer.json")  # pail's file as the HF library reads it
    pail_ids = [json.loads(l) for l in open(a.pail_ids)]
    bad = len(pail_ids) != len(STRINGS)
    if bad:
        print(f"tokenize: pail gave {len(pail_ids)} id lists for {len(STRINGS)} strings")
    for s, got in zip(STRINGS, pail_ids):
        ref = tok(s, add_special_tokens=False)["input_ids"]
        ref_sp, got_sp = tok(s)["input_ids"], written.encode(s).ids  # with the post-processor's bos / eos
        ok = ref == got and ref_sp == got_sp
        bad += not ok
        print(f"tokenize {s[:24]!r:28s} {len(ref)} ids {'equal' if ok else f'DIFFER pail {got} {got_sp} hf {ref} {ref_sp}'}")
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32).eval()
    with open(a.ids_out, "w") as out:
        for s in STRINGS:
            out.write(json.dumps({"ids": tok(s)["input_ids"]}) + "\n")
    r = subprocess.run([a.ctl, "logprobs", "--model", a.dir, "--input", a.ids_out, "--dtype", "f32"],
                       capture_output=True, text=True)
    if r.returncode:
        print(r.stderr); sys.exit(1)
    worst = 0.0
    for s, line in zip(STRINGS, r.stdout.splitlines()):
        ids = tok(s)["input_ids"]
        with torch.no_grad():
            lp = torch.log_softmax(model(torch.tensor([ids])).logits[0].double(), -1)
        ref = lp[torch.arange(len(ids) - 1), torch.tensor(ids[1:])].numpy()
        got = np.array(json.loads(line)["logprobs"])
        worst = max(worst, float(np.abs(got - ref).max()))
    ok = worst <= a.tol
    print(f"logprobs: max |pail - transformers| = {worst:.3g} over {len(STRINGS)} strings ({'<=' if ok else '>'} {a.tol})")
    sys.exit(0 if ok and not bad else 1)


# The families written from a transformers checkpoint: GGUF architecture, whether
# convert_hf_to_gguf permutes Q and K (LlamaModel and its subclasses).
HF_FAMILIES = {"granite": ("granite", True), "olmo2": ("olmo2", False), "exaone": ("exaone", False),
               "smollm3": ("smollm3", True), "mistral": ("llama", True), "llama31": ("llama", True),
               "exaone35": ("exaone", False), "phi3": ("phi3", False), "phi3lr": ("phi3", False),
               "phi3sr": ("phi3", False), "gemma2": ("gemma2", False), "gemma3": ("gemma3", False),
               "cohere": ("command-r", False), "cohere2": ("cohere2", False)}
# llama3 RoPE scaling as Llama 3.1 and EXAONE 3.5 publish it (theta, factor; low 1, high 4, 8192)
LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192, "rope_theta": 500000.0}


def hf_config(family, V):
    import transformers as tf
    common = dict(vocab_size=V, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-5, bos_token_id=None,
                  eos_token_id=None, pad_token_id=None)
    if family == "granite":  # Granite 3.x's multipliers (attention_multiplier larger, as check_forward), tied
        return tf.GraniteConfig(**common, tie_word_embeddings=True, embedding_multiplier=12.0, residual_multiplier=0.22,
                                attention_multiplier=0.25, logits_scaling=8.0)
    if family == "olmo2":
        return tf.Olmo2Config(**common, tie_word_embeddings=False)
    if family == "exaone":
        return tf.ExaoneConfig(**common, tie_word_embeddings=False,
                               rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
    if family == "smollm3":  # 4 layers: the default no_rope_layer_interval 4 leaves RoPE out of layer 3, tied
        return tf.SmolLM3Config(**dict(common, num_hidden_layers=4))
    if family == "llama31":
        return tf.LlamaConfig(**dict(common, max_position_embeddings=16384), tie_word_embeddings=False,
                              rope_parameters=dict(LLAMA3_ROPE))
    if family == "exaone35":
        return tf.ExaoneConfig(**dict(common, max_position_embeddings=16384), tie_word_embeddings=False,
                               rope_parameters=dict(LLAMA3_ROPE, factor=32.0))
    if family == "phi3":  # Phi-4-mini's shape of file: no window (written 0), full rotary, no scaling, tied
        return tf.Phi3Config(**common, tie_word_embeddings=True, sliding_window=None)
    if family in ("phi3lr", "phi3sr"):  # partial rotary 0.5 (8 of 16 dims), window 8, longrope (legacy
        # rope_scaling); original_max 16 (lr: the 32-token sequences take long_factor) or 64 (sr: short_factor)
        g = np.random.default_rng(11)
        omax = 16 if family == "phi3lr" else 64
        return tf.Phi3Config(**common, tie_word_embeddings=False, sliding_window=8, partial_rotary_factor=0.5,
                             original_max_position_embeddings=omax,
                             rope_scaling={"type": "longrope", "short_factor": g.uniform(1, 3, 4).tolist(),
                                           "long_factor": g.uniform(2, 12, 4).tolist()})
    if family == "gemma2":  # head_dim 32 (not C / H: query_pre_attn_scalar follows it), window 8, caps that bite
        return tf.Gemma2Config(**common, head_dim=32, query_pre_attn_scalar=32, sliding_window=8,
                               attn_logit_softcapping=5.0, final_logit_softcapping=2.0)
    if family == "gemma3":  # 6 layers (the 6th global), q/k norms, two RoPE bases, linear scaling 4 on the global
        rp = {"full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 100000.0},
              "sliding_attention": {"rope_type": "default", "rope_theta": 50.0}}
        return tf.Gemma3TextConfig(**dict(common, num_hidden_layers=6), head_dim=32, query_pre_attn_scalar=32,
                                   sliding_window=8, rope_parameters=rp)
    if family in ("cohere", "cohere2"):  # LayerNorm eps 1e-4 (not the default), logit_scale 0.3, tied;
        # cohere: use_qk_norm (per-head (H, D) norms); cohere2: 4 layers (the 4th full, no RoPE), window 8
        kw = dict(common, layer_norm_eps=1e-4, logit_scale=0.3)
        kw.pop("rms_norm_eps")
        if family == "cohere":
            return tf.CohereConfig(**kw, use_qk_norm=True)
        return tf.Cohere2Config(**dict(kw, num_hidden_layers=4), sliding_window=8)
    if family == "mistral":  # a window far shorter than the 32-token sequences
        return tf.MistralConfig(**common, sliding_window=8, tie_word_embeddings=False)
    raise SystemExit(f"unknown family {family}")


def permute(w, n_head, n_head_kv):
    """convert_hf_to_gguf's LlamaModel.permute: each head's rows (t, i) -> (i, t)."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


# from-hf's damaged variants, for the refusals: what each changes in the file
FROM_HF_MODS = ("no-window", "window4", "no-logit-scale", "rope-dim-half", "drop-post-ffw", "rope-freqs-off",
                "no-short-factors", "no-orig-ctx", "rope-dim-odd", "long-factors-5", "swa-pattern", "no-norm-shift",
                "no-logit-scale", "rms-eps", "layers-27b", "blocks-1e6", "attn-factor-1e-45", "rope-factor-1e30")


def llama3_rope_freqs(rp, dim):
    """convert_hf_to_gguf's generate_extra_tensors (LlamaModel, ExaoneModel): the llama3 factors."""
    import math, torch
    base = rp["rope_theta"]
    freqs = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    factor, lo, hi, old = rp["factor"], rp["low_freq_factor"], rp["high_freq_factor"], rp["original_max_position_embeddings"]
    out = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < old / hi:
            out.append(1)
        elif wavelen > old / lo:
            out.append(factor)
        else:
            smooth = (old / wavelen - lo) / (hi - lo)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return torch.tensor(out, dtype=torch.float32).numpy()


def write_from_hf(hf_dir, out, family, mod, seed):
    """A tiny random transformers checkpoint of a family (saved to hf_dir) and the GGUF llama.cpp's
    convert_hf_to_gguf writes from it (F32 tensors): its keys, the checkpoint's tensor names mapped
    by gguf-py's tensor map, Q / K permuted where the converter does; the byte-level tokenizer.
    mod (FROM_HF_MODS) damages the file for a refusal check."""
    import torch
    from safetensors.numpy import load_file
    from transformers import AutoModelForCausalLM
    arch, permuted = HF_FAMILIES[family]
    tokens, types, merges = tiny_vocab()
    cfg = hf_config(family, len(tokens))
    if mod == "layers-27b":  # the 27B models' layer count (gemma2 46, gemma3 62), whose scale llama.cpp takes from C / H
        d = dict(cfg.to_dict(), num_hidden_layers=46 if family == "gemma2" else 62, layer_types=None)
        cfg = type(cfg)(**{k: v for k, v in d.items() if k not in ("model_type", "transformers_version")})
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif "q_proj" in name or "k_proj" in name:  # scores far from uniform, so a wrong RoPE layout shows
                p.mul_(10.0)
    model.save_pretrained(hf_dir)
    sd = load_file(f"{hf_dir}/model.safetensors")  # the file's own names (EXAONE keeps its)
    C, H, Hkv, L = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.num_hidden_layers
    w = gguf.GGUFWriter(out, arch)
    w.add_block_count(1000000 if mod == "blocks-1e6" else L); w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(C); w.add_feed_forward_length(cfg.intermediate_size); w.add_head_count(H); w.add_head_count_kv(Hkv)
    if arch in ("command-r", "cohere2"):  # TextModel: layer_norm_eps as LayerNorm's (rms-eps: misnamed)
        (w.add_layer_norm_rms_eps if mod == "rms-eps" else w.add_layer_norm_eps)(cfg.layer_norm_eps)
        if mod != "no-logit-scale":  # CommandR2Model / Cohere2Model
            w.add_logit_scale(cfg.logit_scale)
        if arch == "cohere2":
            w.add_sliding_window(cfg.sliding_window); w.add_rope_dimension_count(cfg.head_dim)
            if mod == "swa-pattern":
                w.add_sliding_window_pattern(4)
    else:
        w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    if arch == "gemma3":  # Gemma3Model.set_gguf_parameters: the global base, linear scaling; llama.cpp's 10000
        rp = cfg.rope_parameters["full_attention"]  # for the sliding layers unless rope.freq_base_swa says
        w.add_rope_freq_base(rp["rope_theta"]); w.add_rope_freq_base_swa(cfg.rope_parameters["sliding_attention"]["rope_theta"])
        if rp.get("rope_type") == "linear":
            w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
            w.add_rope_scaling_factor(1e30 if mod == "rope-factor-1e30" else rp["factor"])
    elif arch != "gemma2":  # Gemma2Model writes no base (llama.cpp's 10000, Gemma2Config's)
        w.add_rope_freq_base(cfg.rope_parameters["rope_theta"])
    if arch in ("gemma2", "gemma3"):  # Gemma2Model / Gemma3Model: key_length, the window; gemma2 the caps
        w.add_key_length(cfg.head_dim); w.add_value_length(cfg.head_dim); w.add_sliding_window(cfg.sliding_window)
        if arch == "gemma2":
            w.add_attn_logit_softcapping(cfg.attn_logit_softcapping)
            w.add_final_logit_softcapping(cfg.final_logit_softcapping)
        if mod == "swa-pattern":
            w.add_sliding_window_pattern(2)
    if permuted or family == "exaone":  # LlamaModel and ExaoneModel write the rotary width
        w.add_rope_dimension_count(C // H // (2 if mod == "rope-dim-half" else 1))
    if arch == "phi3":  # Phi3MiniModel.set_gguf_parameters / generate_extra_tensors
        w.add_rope_dimension_count(int(getattr(cfg, "partial_rotary_factor", 1.0) * C) // H - (mod == "rope-dim-odd"))
        omax = cfg.original_max_position_embeddings
        if mod != "no-orig-ctx":
            w.add_rope_scaling_orig_ctx_len(omax)
        w.add_sliding_window(cfg.sliding_window or 0)
        rp = cfg.rope_parameters
        if rp.get("rope_type") == "longrope":
            import math
            scale = cfg.max_position_embeddings / omax
            w.add_rope_scaling_attn_factors(1e-45 if mod == "attn-factor-1e-45" else
                                            math.sqrt(1 + math.log(scale) / math.log(omax)) if scale > 1.0 else 1.0)
            lf = rp["long_factor"] + ([1.0] if mod == "long-factors-5" else [])
            w.add_tensor("rope_factors_long.weight", np.array(lf, np.float32))
            if mod != "no-short-factors":
                w.add_tensor("rope_factors_short.weight", np.array(rp["short_factor"], np.float32))
    if family == "granite":  # GraniteModel: the multipliers as *_scale keys
        w.add_attention_scale(cfg.attention_multiplier); w.add_embedding_scale(cfg.embedding_multiplier)
        w.add_residual_scale(cfg.residual_multiplier)
        if mod != "no-logit-scale":
            w.add_logit_scale(cfg.logits_scaling)
    if (family == "mistral" and mod != "no-window") or mod == "window4":
        w.add_sliding_window(4 if mod == "window4" else cfg.sliding_window)
    w.add_tokenizer_model("gpt2"); w.add_tokenizer_pre("llama-bpe")
    w.add_token_list(tokens); w.add_token_types(types); w.add_token_merges(merges)
    if arch == "phi3":  # a pad id inside the vocabulary: transformers' GGUF loader else keeps Phi3Config's 32000
        w.add_pad_token_id(len(tokens) - 2)
    if cfg.rope_parameters.get("rope_type") == "llama3":
        rf = llama3_rope_freqs(cfg.rope_parameters, C // H)
        if mod == "rope-freqs-off":  # one band's factor changed: no llama3 table
            rf[len(rf) // 2] *= 1.01
        w.add_tensor("rope_freqs.weight", rf)
    tmap = gguf.get_tensor_name_map(gguf.MODEL_ARCH[arch.upper().replace("-", "_")], L)
    for name, t in sd.items():
        if mod == "drop-post-ffw" and "layers.1.post_feedforward_layernorm" in name:
            continue
        new = tmap.get_name(name, try_suffixes=(".weight", ".bias"))
        if new is None:
            raise SystemExit(f"{name}: no GGUF name for {arch}")
        if permuted and name.endswith("q_proj.weight"):
            t = permute(t, H, H)
        if permuted and name.endswith("k_proj.weight"):
            t = permute(t, H, Hkv)
        if arch in ("gemma2", "gemma3") and name.endswith("norm.weight") and mod != "no-norm-shift":
            t = t + 1  # the converter stores gemma's norms as 1 + w
        w.add_tensor(new, np.ascontiguousarray(t.astype(np.float32)))
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()


def cmd_from_hf(a):
    """from-hf WORK NAME=FAMILY[:MOD] ...: WORK/NAME.hf (the checkpoint) and WORK/NAME.gguf each."""
    for spec in a.specs:
        name, fm = spec.split("=")
        family, _, mod = fm.partition(":")
        if family not in HF_FAMILIES or (mod and mod not in FROM_HF_MODS):
            raise SystemExit(f"{spec}: family one of {sorted(HF_FAMILIES)}, MOD one of {FROM_HF_MODS}")
        write_from_hf(f"{a.work}/{name}.hf", f"{a.work}/{name}.gguf", family, mod, a.seed)


def cmd_check_hf(a):
    """check-hf WORK NAME ...: pail's log-probs on the imported WORK/NAME against transformers' on
    the checkpoint WORK/NAME.hf the GGUF was written from (f32), on 3 random 32-token sequences;
    one line per NAME; NAME@gguf: against transformers' reading of WORK/NAME.gguf."""
    import json, subprocess, torch
    from transformers import AutoModelForCausalLM
    bad = 0
    for name in a.names:
        name, _, via = name.partition("@")  # NAME@gguf: against transformers' reading of NAME.gguf
        hf, d = f"{a.work}/{name}.hf", f"{a.work}/{name}"
        if a.from_gguf or via == "gguf":
            model = AutoModelForCausalLM.from_pretrained(a.work, gguf_file=f"{name}.gguf", dtype=torch.float32).eval()
        else:
            model = AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32).eval()
        g = torch.Generator().manual_seed(5)
        seqs = [torch.randint(0, model.config.vocab_size, (32,), generator=g).tolist() for _ in range(3)]
        path = f"{d}.ids.jsonl"
        with open(path, "w") as out:
            for s in seqs:
                out.write(json.dumps({"ids": s}) + "\n")
        r = subprocess.run([a.ctl, "logprobs", "--model", d, "--input", path, "--dtype", "f32"], capture_output=True,
                           text=True)
        worst, lines = float("inf"), r.stdout.splitlines()
        if r.returncode == 0 and len(lines) == len(seqs):
            worst = 0.0
            for s, line in zip(seqs, lines):
                with torch.no_grad():
                    lp = torch.log_softmax(model(torch.tensor([s])).logits[0].double(), -1)
                ref = lp[torch.arange(len(s) - 1), torch.tensor(s[1:])].numpy()
                worst = max(worst, float(np.abs(np.array(json.loads(line)["logprobs"]) - ref).max()))
        ok = worst <= a.tol
        bad += not ok
        ref_name = "its GGUF" if a.from_gguf or via == "gguf" else "the checkpoint"
        print(f"{'PASS' if ok else 'FAIL'} {name}{'@' + via if via else ''}: log-probs max |pail - transformers on {ref_name}| = {worst:.3g} "
              f"over {len(seqs)} sequences of 32 ({'<=' if ok else '>'} {a.tol}){'' if r.returncode == 0 else ' ' + r.stderr.strip()}")
    sys.exit(1 if bad else 0)


def cmd_check_tokenizer(a):
    """pail's imported tokenizer.json against the tokenizer transformers builds from the same GGUF,
    rewritten into the model's own pipeline (as_model), on validation/tokenizer's corpus (>= 2,000 strings): ids without special tokens (grpo-ctl
    tokenize), ids with them (the written file's post-processor, through the tokenizers library, and
    pail's plain-prompt encoding, grpo-ctl tokenize --add-special-tokens), and the text of transformers' ids decoded (grpo-ctl detokenize)."""
    import json, os, subprocess
    from transformers import AutoTokenizer
    from tokenizers import Tokenizer
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tokenizer"))
    import corpus
    d, f = os.path.dirname(os.path.abspath(a.file)), os.path.basename(a.file)
    tok = as_model(AutoTokenizer.from_pretrained(d, gguf_file=f), a.file)
    texts = corpus.texts() + STRINGS
    tj = f"{a.dir}/tokenizer.json"

    def ctl(args, items):
        path = f"{a.dir}.check.jsonl"
        with open(path, "w", encoding="utf-8") as out:
            for x in items:
                out.write(json.dumps(x, ensure_ascii=False) + "\n")
        r = subprocess.run([a.ctl] + args + ["--tokenizer", tj, "--jsonl", path], capture_output=True)
        if r.returncode:
            sys.exit(f"{a.ctl} {args[0]}: {r.stderr.decode(errors='replace').strip()}")
        return [json.loads(l) for l in r.stdout.decode().split("\n") if l]

    want = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    got = ctl(["tokenize"], texts)
    written = Tokenizer.from_file(tj)
    want_sp = [tok(t)["input_ids"] for t in texts]
    got_sp = [e.ids for e in written.encode_batch(texts)]
    got_text = ctl(["tokenize", "--add-special-tokens"], texts)  # pail's own post-processing (a plain prompt)
    want_dec = [tok.decode(i) for i in want]
    got_dec = ctl(["detokenize"], want)
    bad = 0
    for what, w, g in (("ids", want, got), ("ids with bos/eos", want_sp, got_sp), ("plain-prompt ids", want_sp, got_text),
                       ("decode", want_dec, got_dec)):
        diff = [i for i in range(len(texts)) if i >= len(g) or w[i] != g[i]]
        print(f"{what}: {len(texts) - len(diff)}/{len(texts)} equal")
        for i in diff[:3]:
            print(f"    {texts[i][:60]!r}: transformers {w[i][:12]!r} pail {g[i][:12] if i < len(g) else None!r}")
        bad += bool(diff)
    sys.exit(1 if bad else 0)


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("types"); s.add_argument("out"); s.set_defaults(f=cmd_types)
    s = sub.add_parser("check-dequant"); s.add_argument("file"); s.add_argument("dir"); s.set_defaults(f=cmd_check_dequant)
    s = sub.add_parser("model"); s.add_argument("out"); s.add_argument("--arch", required=True)
    s.add_argument("--qtype", default="Q8_0"); s.add_argument("--seed", type=int, default=1)
    s.add_argument("--rope-base", type=float, default=10000.0, help="rope.freq_base (inf, nan, 0: hostile files)")
    s.add_argument("--chat-template", help="tokenizer.chat_template; \\0 in it becomes a NUL byte")
    s.add_argument("--chat-template-file", help="tokenizer.chat_template read from this file")
    s.add_argument("--tokenizer", default="gpt2",
                   help="gpt2 (a small byte-level BPE), sp (a small SentencePiece BPE), a tokenizer.model's path, "
                   "or r1:VOCAB.gguf (DeepSeek-R1-Distill-Qwen's: llama.cpp's Qwen2 vocab file with R1's added tokens)")
    s.add_argument("--add-eos", action="store_true", help="SentencePiece: tokenizer.ggml.add_eos_token")
    s.set_defaults(f=cmd_model)
    s = sub.add_parser("check-import"); s.add_argument("file"); s.add_argument("dir"); s.add_argument("--ctl", required=True)
    s.add_argument("--pail-ids", required=True); s.add_argument("--ids-out", required=True)
    s.add_argument("--tol", type=float, default=1e-4); s.set_defaults(f=cmd_check_import)
    s = sub.add_parser("from-hf"); s.add_argument("work"); s.add_argument("specs", nargs="+", help="NAME=FAMILY[:MOD]")
    s.add_argument("--seed", type=int, default=3); s.set_defaults(f=cmd_from_hf)
    s = sub.add_parser("check-hf"); s.add_argument("work"); s.add_argument("names", nargs="+")
    s.add_argument("--ctl", required=True); s.add_argument("--tol", type=float, default=1e-4)
    s.add_argument("--from-gguf", action="store_true", help="against transformers' reading of WORK/NAME.gguf")
    s.set_defaults(f=cmd_check_hf)
    s = sub.add_parser("check-tokenizer"); s.add_argument("file"); s.add_argument("dir"); s.add_argument("--ctl", required=True)
    s.set_defaults(f=cmd_check_tokenizer)
    a = p.parse_args()
    a.f(a)


if __name__ == "__main__":
    main()
