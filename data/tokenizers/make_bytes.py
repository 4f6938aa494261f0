"""Writes data/tokenizers/bytes/: a byte-level BPE tokenizer.json with no
merges (one token per byte, 256 tokens, GPT-2's byte-to-unicode alphabet) and
<|endoftext|> = 256, built with the Hugging Face tokenizers library, plus a
tokenizer_config.json naming it as eos. Small vocabularies suit the tiny demo
and test models (digits are single tokens). Deterministic: rerunning rewrites
the same bytes. Run with the project venv: $(bash mk/venv.sh)/bin/python ..."""
import json
import os

from tokenizers import Tokenizer, decoders, models, pre_tokenizers

here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bytes")
alphabet = pre_tokenizers.ByteLevel.alphabet()
# GPT-2 order: the byte values' printable stand-ins sorted by byte value.
bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b)
        cs.append(256 + n)
        n += 1
byte_to_char = dict(zip(bs, (chr(c) for c in cs)))
vocab = {byte_to_char[b]: b for b in range(256)}
assert set(vocab) == set(alphabet)
tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
tok.decoder = decoders.ByteLevel()
tok.add_special_tokens(["<|endoftext|>"])
os.makedirs(here, exist_ok=True)
tok.save(os.path.join(here, "tokenizer.json"))
cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|endoftext|>", "bos_token": None,
       "model_max_length": 1024, "clean_up_tokenization_spaces": False}
with open(os.path.join(here, "tokenizer_config.json"), "w") as f:
    json.dump(cfg, f, indent=2, sort_keys=True)
    f.write("\n")
print(f"wrote {here}: vocab {tok.get_vocab_size()}")
