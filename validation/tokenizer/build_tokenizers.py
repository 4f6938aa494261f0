# Builds tokenizer.json files with the Hugging Face tokenizers library that reproduce
# the Qwen2/Qwen3 and Llama 3 byte-level BPE pipelines exactly (normalizer, Split
# regex, ByteLevel, added/special tokens, merges form, ignore_merges), with 32k BPE
# vocabularies trained on local text (/usr/share/doc, Python sources). They let the
# oracle comparison run on a clone without ../shared/reference.
# Usage: build_tokenizers.py OUTDIR   (writes OUTDIR/{qwen,qwen-chatml,llama3}/)
import glob, gzip, json, os, sys

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
VOCAB = 32768
QWEN_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
           r"|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
             r"|\s*[\r\n]+|\s+(?!\S)|\s+")
# Qwen2.5/Qwen3 added tokens after the BPE vocabulary: (content, special)
QWEN_ADDED = [(t, True) for t in [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
    "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>"]] + [
    ("<tool_call>", False), ("</tool_call>", False), ("<|fim_prefix|>", False), ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False), ("<|fim_pad|>", False), ("<|repo_name|>", False), ("<|file_sep|>", False),
    ("<tool_response>", False), ("</tool_response>", False), ("<think>", False), ("</think>", False)]
LLAMA3_ADDED = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                "<|reserved_special_token_1|>", "<|reserved_special_token_2|>",
                "<|reserved_special_token_3|>", "<|start_header_id|>", "<|end_header_id|>",
                "<|reserved_special_token_4|>", "<|eot_id|>"] + [
                f"<|reserved_special_token_{i}|>" for i in range(5, 20)]


def training_text(limit=24 << 20):
    """Real local text, in a fixed order so the build is reproducible on one machine."""
    files = sorted(glob.glob("/usr/share/doc/**/*", recursive=True))
    files += sorted(glob.glob("/usr/share/common-licenses/*"))
    files += sorted(glob.glob("/usr/lib/python3*/**/*.py", recursive=True))
    total = 0
    for f in files:
        if not os.path.isfile(f) or os.path.islink(f):
            continue
        try:
            raw = gzip.open(f).read() if f.endswith(".gz") else open(f, "rb").read()
            text = raw.decode("utf-8")
        except (OSError, UnicodeDecodeError, EOFError):
            continue
        if "\0" in text:
            continue
        yield text
        total += len(raw)
        if total >= limit:
            return


def train(pattern, ignore_merges, normalizer):
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    if normalizer:
        tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(training_text(), trainer=trainer)
    return tok


def write_dir(path, tok_json, config):
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "tokenizer.json"), "w", encoding="utf-8") as f:
        f.write(tok_json)
    with open(os.path.join(path, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=2)
    Tokenizer.from_file(os.path.join(path, "tokenizer.json"))  # the oracle must load what we wrote


def template(name):
    with open(os.path.join(HERE, "templates", name), encoding="utf-8") as f:
        return f.read()


def main():
    out = sys.argv[1]
    # Qwen2/Qwen3: NFC, single digits, merges saved as [a, b] pairs (tokenizers >= 0.20).
    qwen = train(QWEN_RE, False, normalizers.NFC())
    for content, special in QWEN_ADDED:
        t = AddedToken(content, single_word=False, lstrip=False, rstrip=False, normalized=False, special=special)
        (qwen.add_special_tokens if special else qwen.add_tokens)([t])
    qj = json.loads(qwen.to_str())
    assert isinstance(qj["model"]["merges"][0], list), "expected merges as pairs"
    qcfg = {"tokenizer_class": "PreTrainedTokenizerFast", "add_bos_token": False, "bos_token": None,
            "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "unk_token": None,
            "clean_up_tokenization_spaces": False, "model_max_length": 131072}
    write_dir(os.path.join(out, "qwen"), json.dumps(qj, ensure_ascii=False),
              dict(qcfg, chat_template=template("qwen3.jinja")))
    write_dir(os.path.join(out, "qwen-chatml"), json.dumps(qj, ensure_ascii=False),
              dict(qcfg, chat_template=template("chatml.jinja")))
    # Llama 3: no normalizer, digits in groups of up to three, ignore_merges, "a b" merges.
    llama = train(LLAMA3_RE, True, None)
    llama.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in LLAMA3_ADDED])
    lj = json.loads(llama.to_str())
    lj["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m for m in lj["model"]["merges"]]
    assert all(len(m.split(" ")) == 2 for m in lj["model"]["merges"])
    assert lj["model"]["ignore_merges"] is True
    write_dir(os.path.join(out, "llama3"), json.dumps(lj, ensure_ascii=False),
              {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|begin_of_text|>",
               "eos_token": "<|end_of_text|>", "clean_up_tokenization_spaces": False,
               "model_max_length": 131072, "chat_template": template("llama3.jinja")})
    for name in ("qwen", "llama3"):
        j = json.load(open(os.path.join(out, name, "tokenizer.json"), encoding="utf-8"))
        print(f"built {name}: vocab {len(j['model']['vocab'])}, merges {len(j['model']['merges'])}, "
              f"added {len(j['added_tokens'])}", file=sys.stderr)


if __name__ == "__main__":
    main()
