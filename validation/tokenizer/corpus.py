# The comparison corpus: >= 2,000 varied strings, deterministic for a given machine
# (prose and code are drawn from local files with a fixed seed), and the chat
# conversations. Imported by validate.py; `python corpus.py OUT.jsonl` writes it alone.
import glob, gzip, json, os, random, sys

SEED = 20261130


def _local_text(pattern, limit, rnd):
    files = sorted(f for f in glob.glob(pattern, recursive=True) if os.path.isfile(f) and not os.path.islink(f))
    rnd.shuffle(files)
    out = []
    for f in files[:limit]:
        try:
            raw = gzip.open(f).read() if f.endswith(".gz") else open(f, "rb").read()
            t = raw.decode("utf-8")
        except (OSError, UnicodeDecodeError, EOFError):
            continue
        if t.strip() and "\0" not in t:
            out.append(t)
    return out


def _slice(rnd, texts, lo, hi):
    t = rnd.choice(texts)
    n = rnd.randint(lo, hi)
    a = rnd.randint(0, max(0, len(t) - n))
    return t[a:a + n]


# Code points assigned in Unicode 13 or earlier (utf8proc 2.6 and PCRE2 10.42 know them).
RANGES = [(0x20, 0x7e), (0xa0, 0x24f), (0x370, 0x3ff), (0x400, 0x4ff), (0x591, 0x5f4), (0x600, 0x6ff),
          (0x900, 0x97f), (0xe01, 0xe5b), (0x1100, 0x11ff), (0x1e00, 0x1eff), (0x2000, 0x206f),
          (0x20a0, 0x20bf), (0x2100, 0x218b), (0x2190, 0x23ff), (0x2460, 0x24ff), (0x2500, 0x27bf),
          (0x3000, 0x303f), (0x3041, 0x3096), (0x30a0, 0x30ff), (0x4e00, 0x9fa5), (0xac00, 0xd7a3),
          (0xff01, 0xff5e), (0x1d400, 0x1d7ff), (0x1f300, 0x1f64f), (0x1f680, 0x1f6d2), (0x1f900, 0x1f9ff)]
SPACES = [" ", "  ", "\t", "\n", "\n\n", "\r\n", "\r", "\u00a0", "\u3000", "\u2009", "\u0085", "\u2028",
          "\u180e", "\u200b", "\u000b", "\u000c", " \n ", "\n\t\t", "    "]
EMOJI = ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🧑🏿‍💻", "❤️", "🇫🇷", "🇯🇵", "👩‍❤️‍💋‍👨", "✋🏻", "🙂‍↔️",
         "🐈‍⬛", "1️⃣", "#️⃣", "🫠", "🏴‍☠️", "👁️‍🗨️"]
COMBINING = ["e\u0301", "a\u0308", "o\u0302\u0323", "n\u0303", "\u1100\u1161\u11a8", "\u1112\u1161\u11ab",
             "A\u030a", "Z\u0335\u0336\u0337", "\u0915\u094d\u0937", "\u0627\u064e\u0644\u0652", "\u05e9\u05c1\u05b8",
             "ạ\u0306", "\u0041\u0300\u0301\u0302", "\u212b", "\u2126", "\u1e9b\u0323", "\u0344", "i\u0307"]
CJK = ["你好，世界！", "机器学习是人工智能的一个分支。", "東京都は日本の首都です。", "ひらがなとカタカナ",
       "한국어 텍스트입니다.", "中文（简体）和中文（繁體）", "こんにちは、世界", "「引用」と『二重引用』",
       "数字１２３と123", "漢字かな交じり文"]
QWEN_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>",
                "</tool_call>", "<|fim_prefix|>", "<|vision_pad|>", "<tool_response>"]
LLAMA_SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                 "<|eot_id|>", "<|reserved_special_token_3|>"]
SP_SPECIAL = ["<s>", "</s>", "<unk>", "[INST]", "[/INST]", "[TOOL_CALLS]", "<0x0A>", "<0xFF>", "▁", "▁▁",
              "<SPECIAL_20>", "<s", "[INST"]
WORDS = ["the", "The", "don't", "DON'T", "I'm", "you're", "we've", "she'll", "it'd", "'s", "'S", "ſ", "'ſ",
         "hello", "world", "naïve", "café", "Straße", "ǅungla", "ΑΒΓ", "Москва", "مرحبا", "שלום", "नमस्ते",
         "ไทย", "x86_64", "foo_bar", "CamelCase", "snake-case", "e.g.", "U.S.A.", "$100", "3.14", "1,000,000",
         "https://example.com/a?b=c", "user@example.org", "C++", "->", "=>", "!==", "...", "—", "«»", "½",
         "²", "Ⅻ", "①", "٣", "߁", "𝟘"]


def texts():
    rnd = random.Random(SEED)
    prose = _local_text("/usr/share/doc/**/*", 400, rnd) + _local_text("/usr/share/common-licenses/*", 20, rnd)
    code = _local_text("/usr/lib/python3*/**/*.py", 200, rnd) or prose
    out = ["", " ", "\n", "a", "0", "<", "<|", "<|im_start", "im_end|>", "\t", "\r\n", "\0", "a\0b", "''", "'"]
    for _ in range(400):
        out.append(_slice(rnd, prose, 1, 400))
    for _ in range(300):
        out.append(_slice(rnd, code, 1, 600))
    for _ in range(150):  # digit runs
        d = "".join(rnd.choice("0123456789") for _ in range(rnd.randint(1, 60)))
        out.append(rnd.choice(["", "x", "abc ", "$", " ", "v", "١٢"]) + d + rnd.choice(["", ".5", " apples", "th", "٣٤", "\n", "%"]))
    for _ in range(200):  # whitespace and newline runs
        parts = []
        for _ in range(rnd.randint(1, 8)):
            parts.append(rnd.choice(SPACES) * rnd.randint(1, 6))
            if rnd.random() < 0.6:
                parts.append(rnd.choice(WORDS))
        out.append("".join(parts))
    for _ in range(200):  # CJK
        s = "".join(chr(rnd.randint(0x4e00, 0x9fa5)) for _ in range(rnd.randint(1, 30)))
        out.append(rnd.choice(CJK) + rnd.choice(["", " ", "\n"]) + s + rnd.choice(["", "。", "abc", "123"]))
    for _ in range(150):  # emoji and ZWJ sequences
        out.append(rnd.choice(["", "hi ", "ok"]) + "".join(rnd.choice(EMOJI) + rnd.choice(["", " ", "x"]) for _ in range(rnd.randint(1, 6))))
    for _ in range(200):  # combining marks (NFC changes many of these)
        out.append("".join(rnd.choice(COMBINING + WORDS[:20]) + rnd.choice(["", " ", "\u0301", "\u0327"]) for _ in range(rnd.randint(1, 8))))
    for _ in range(150):  # special tokens inside text, whole and partial
        sp = QWEN_SPECIAL + LLAMA_SPECIAL
        parts = []
        for _ in range(rnd.randint(1, 6)):
            t = rnd.choice(sp)
            if rnd.random() < 0.15:
                t = t[:rnd.randint(1, len(t) - 1)]
            parts.append(t + rnd.choice(["", "user\n", " hello", "\n\n", "assistant", "<", "|>"]))
        out.append("".join(parts))
    for _ in range(150):  # contractions, case, punctuation soup
        out.append(" ".join(rnd.choice(WORDS) for _ in range(rnd.randint(1, 12))))
    for _ in range(300):  # random code points from many scripts
        s = []
        for _ in range(rnd.randint(1, 40)):
            lo, hi = rnd.choice(RANGES)
            s.append(chr(rnd.randint(lo, hi)))
        out.append("".join(s))
    for _ in range(5):  # long strings
        out.append("".join(_slice(rnd, prose + code, 200, 2000) for _ in range(8)))
    out.append(" " * 5000)
    out.append("9" * 3000)
    out.append("\n" * 1000 + "x")
    out.append("".join(chr(c) for c in range(0, 0x250)))  # every control character and Latin
    rnd = random.Random(SEED + 1)  # SentencePiece / Tekken specials and markers (appended: the draws above stay)
    for _ in range(120):
        parts = []
        for _ in range(rnd.randint(1, 5)):
            parts.append(rnd.choice(SP_SPECIAL) + rnd.choice(["", " ", "  ", "hello", " hello", "\n", "▁", "▁x"]))
        out.append(rnd.choice(["", " ", "x", "  y"]) + "".join(parts))
    return out


def conversations():
    """(messages) lists: multi-turn, with and without a system message."""
    rnd = random.Random(SEED + 1)
    pieces = ["What is 2+2?", "4", "Explain BPE in one line.", "It merges frequent pairs.", "你好！", "Bonjour 😀",
              "  padded  ", "\nnewlines\n\n", "code:\n```py\nprint('x')\n```", "<think>\nI should add.\n</think>\n\nThe answer is 4.",
              "Thanks.", "line1\nline2", "", "A caf\u0065\u0301 near the Stra\u00dfe.", "tabs\tand\u00a0spaces "]
    convs = []
    for k in range(60):
        msgs = []
        if k % 2 == 0:
            msgs.append({"role": "system", "content": rnd.choice(["You are a helpful assistant.", "Be brief.", "  Answer in French.\n", "系统提示"])})
        turns = rnd.randint(1, 4)
        for t in range(turns):
            msgs.append({"role": "user", "content": rnd.choice(pieces)})
            if t < turns - 1 or k % 5 == 0:
                msgs.append({"role": "assistant", "content": rnd.choice(pieces)})
        convs.append(msgs)
    return convs


if __name__ == "__main__":
    with open(sys.argv[1], "w", encoding="utf-8") as f:
        for s in texts():
            f.write(json.dumps(s, ensure_ascii=False) + "\n")
