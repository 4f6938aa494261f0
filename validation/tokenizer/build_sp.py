# Builds tokenizer.json files for the SentencePiece-derived and Tekken pipelines from
# Mistral's real vocabularies (the files PyPI's mistral-common wheel ships): the same
# tokenizer.model turned into the pipelines the families publish, as transformers'
# LlamaConverter / GemmaConverter write them, and tekken.json through transformers'
# MistralConverter. The .model is read with the protobuf schema transformers bundles and
# its merges come from transformers' generate_merges, so sentencepiece is not needed.
# Usage: build_sp.py OUTDIR MODEL_V1 MODEL_V3 TEKKEN_JSON
#   writes OUTDIR/{llama2-legacy,mistral-v3-metaspace,gemma-style,tekken}/tokenizer.json
import json, os, sys

from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers
from transformers.convert_slow_tokenizer import generate_merges, import_protobuf

SP = "\u2581"


def read_model(path):
    m = import_protobuf().ModelProto()
    with open(path, "rb") as f:
        m.ParseFromString(f.read())
    if m.trainer_spec.model_type != 2:
        raise SystemExit(f"{path}: not a BPE sentencepiece model (type {m.trainer_spec.model_type})")
    return m


def sp_bpe(proto):
    """BPE model and added tokens as LlamaConverter writes them (byte_fallback, fuse_unk)."""
    vocab = {p.piece: i for i, p in enumerate(proto.pieces)}
    merges = generate_merges(vocab)
    unk = proto.pieces[proto.trainer_spec.unk_id].piece
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token=unk, fuse_unk=True, byte_fallback=True))
    # control (3) and user-defined (4) pieces are added tokens; unk (2) too, as the converter does
    added = [AddedToken(p.piece, normalized=False, special=p.type in (2, 3))
             for p in proto.pieces if p.type in (2, 3, 4)]
    tok.add_special_tokens([a for a in added if a.special])
    tok.add_tokens([a for a in added if not a.special])
    return tok


def sp_decoder(strip):
    seq = [decoders.Replace(SP, " "), decoders.ByteFallback(), decoders.Fuse()]
    return decoders.Sequence(seq + ([decoders.Strip(content=" ", left=1, right=0)] if strip else []))


def save(tok, out, name):
    d = os.path.join(out, name)  # no tokenizer_config.json: these carry no chat template
    os.makedirs(d, exist_ok=True)
    tok.save(os.path.join(d, "tokenizer.json"))


def main():
    out, v1, v3, tekken = sys.argv[1:5]
    # Llama-2 / TinyLlama / Mistral v0.1 / Phi-3: legacy, the normalizer adds the dummy prefix.
    tok = sp_bpe(read_model(v1))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend(SP), normalizers.Replace(" ", SP)])
    tok.decoder = sp_decoder(True)
    save(tok, out, "llama2-legacy")
    # Mistral v0.3 / Llama-2 legacy=False: Metaspace adds the prefix to the first piece only.
    tok = sp_bpe(read_model(v3))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=SP, prepend_scheme="first", split=False)
    tok.decoder = decoders.Metaspace(replacement=SP, prepend_scheme="first", split=False)
    save(tok, out, "mistral-v3-metaspace")
    # Gemma: no dummy prefix, spaces replaced by the normalizer, nothing stripped on decode.
    tok = sp_bpe(read_model(v3))
    tok.normalizer = normalizers.Replace(" ", SP)
    tok.pre_tokenizer = pre_tokenizers.Split(" ", "merged_with_previous")  # as GemmaConverter: a no-op after the Replace
    tok.decoder = sp_decoder(False)
    save(tok, out, "gemma-style")
    # Mistral Nemo / Small: tekken.json as transformers converts it.
    # The wheel's tekken files predate the "special_tokens" key (the published Nemo file has
    # it); without it the converter needs mistral-common itself, so the key is written here
    # with Tekken's first specials (the rest are <SPECIAL_i> fillers, as the converter pads).
    from transformers.integrations.mistral.tokenizer import MistralConverter
    with open(tekken, encoding="utf-8") as f:
        raw = json.load(f)
    if "special_tokens" not in raw:
        names = ["<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
                 "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[TOOL_CALLS]"]
        raw["special_tokens"] = [{"rank": i, "token_str": t, "is_control": True} for i, t in enumerate(names)]
        tekken = os.path.join(out, "tekken.json")
        with open(tekken, "w", encoding="utf-8") as f:
            json.dump(raw, f)
    save(MistralConverter(tekken).converted(), out, "tekken")


if __name__ == "__main__":
    main()
