"""Validates grpo-rollout --env's multi-turn rows (src/rollout/episode.c, one_shard_env
in worker.c) against Hugging Face transformers (+ PEFT). Builds, in WORKDIR:

- a small Qwen-style byte-level BPE tokenizer (build_tokenizers.py's Qwen2/Qwen3
  pipeline and added tokens; 1,200 tokens trained in a second on validation/tokenizer's
  chat test files) with validation/tokenizer/templates/qwen3.jinja (Hermes tool calls,
  "tool" messages as <tool_response> blocks, consecutive ones in one user turn);
- a random tiny Qwen2 checkpoint (f32, save_pretrained) with <|im_end|> (the stop id),
  </think> and <|endoftext|> made likely, so that turns end both by the stop id and by
  --max-new-tokens, and some turns make qwen3 rewrite them (</think>: the one-exchange
  fallback); the small vocabulary also gives turns of invalid UTF-8 (U+FFFD);
- a LoRA adapter with random A and B, published as v0 by grpo-train --init-adapter
  --steps 0 (its tensors checked equal to the ones PEFT holds);
- an environment program (env.py, written here) that opens each episode with a system
  and a user message (in one group a different user message per episode, so the
  group's openings share only a prefix) and two tools, answers each non-final turn with
  one or two "tool" messages of varied content (non-ASCII, a newline, long and short),
  the final turn or an "end" with a reward and components, and logs every request it
  got and every answer it sent.

Two grpo-rollout --env runs (2 groups x 3 episodes, --max-turns 3, 6 tokens a turn):
T = 1 with room for every turn, and T = 0.7 with 2 slots for 6 episodes (parked and
reused slots) and a tight --max-episode-tokens (episodes whose tool results no longer fit
get "end"). For every episode of their shards:

a. the behaviour log-prob of every mask-1 token equals transformers + PEFT's
   log_softmax(logits / T) over the full row (prompt + completion): max abs error
   <= 1e-4 (fp32; pail's KV cache kept across turns, with appended prefills, against one
   full forward), and differs from the base model's (the adapter is in use);
b. every mask-0 token has log-prob exactly 0; the group's prompt is the longest common
   prefix of its episodes' openings, and prompt + the leading mask-0 tokens are
   tokenizer.encode(apply_chat_template(opening, tools, add_generation_prompt=True));
   each later mask-0 stretch is exactly encode(D), D the text episode.h's rule gives from
   apply_chat_template: T(H + [assistant] + tool messages) minus T(H) + A, A the turn
   decoded with its special tokens (or the one-exchange fallback when that is not a
   prefix; counted). The equality that holds for the whole row, when no turn needed the
   fallback: decode(prompt + completion) = apply_chat_template(conversation without its
   last assistant turn, add_generation_prompt=True) + A of the last turn. The rendering
   of the whole conversation is not an extension of the row: qwen3 gives the last
   assistant turn after the user's query an empty "<think>\n\n</think>\n\n" (and
   strips its leading newlines), so it is apply_chat_template(without the last turn) +
   that block + the last turn's content + "<|im_end|>\n<|im_start|>assistant\n" (checked);
c. the mask-1 runs are the turns: turns[i] equals the steps the program received for
   the episode, each step's "text" is the run decoded with special tokens skipped,
   "finish" is "stop" exactly when the run ends with the stop id, "final" only on the
   last; rewards, components and finish_reason are what the program and the limits say;
d. grpo-train --replay of the two shards (2 steps) completes, and its metrics'
   completions/mean_turns (> 1) and mean_trained_tokens equal the shards' figures.
Usage: check_episodes.py BIN WORKDIR -> "env-episodes: N passed, N failed"."""
import glob
import json
import os
import subprocess
import sys
import warnings

import h5py
import numpy as np
import torch
from peft import LoraConfig, get_peft_model
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast, Qwen2Config
from transformers.utils import logging as hf_logging

hf_logging.disable_progress_bar()
hf_logging.set_verbosity_error()
warnings.filterwarnings("ignore")
torch.set_num_threads(1)
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "tokenizer"))
from build_tokenizers import QWEN_ADDED, QWEN_RE, template  # noqa: E402
from pail_files import MODULES, base_sha256, write_pail_adapter  # noqa: E402

G, P, R, ALPHA, MAX_TURNS, MAX_NEW = 3, 2, 4, 8.0, 3, 6
STOP = "<|im_end|>"
THINK = "<think>\n\n</think>\n\n"
passed = failed = 0


def report(name, ok, detail=""):
    global passed, failed
    passed += bool(ok)
    failed += not ok
    print(f"  {'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}", flush=True)


# ---------------------------------------------------------------- the environment program
ENV_PY = r'''
import json, sys
log = open(sys.argv[1], "a", encoding="utf-8")
SYSTEM = "You are a careful assistant. Use the tools when they help."
TOOLS = [{"type": "function", "function": {"name": "lookup", "description": "Look a word up in the dictionary",
          "parameters": {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]}}},
         {"type": "function", "function": {"name": "calculator", "description": "Evaluate an arithmetic expression",
          "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}}}}]
RESULTS = ["42", "température : 21,5 °C — très agréable ✓", "first line\nsecond line",
           '{"matches": ["日本語", "Grüße"], "count": 2}',
           "a longer result: " + "lorem ipsum dolor sit amet, " * 5 + "end."]
def say(o):
    log.write(json.dumps({"sent": o}, ensure_ascii=False) + "\n"); log.flush()
    print(json.dumps(o), flush=True)
for line in sys.stdin:
    m = json.loads(line)
    log.write(json.dumps({"got": m}, ensure_ascii=False) + "\n"); log.flush()
    i, t = m["id"], m["type"]
    k = int(i.rsplit(".", 1)[1])
    if t == "cancel":
        continue
    if t == "start":
        user = m["row"]["prompt"] + (" (episode %d)" % k if m["row"].get("vary") else "")
        say({"id": i, "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}],
             "tools": TOOLS})
    elif t == "end" or m["final"]:
        text = m.get("text", "")
        say({"id": i, "reward": (len(text) % 5) / 4.0, "components": {"chars": len(text), "turn": m.get("turn", -1)}})
    else:
        r = [{"role": "tool", "content": RESULTS[(k + m["turn"]) % len(RESULTS)]}]
        if (k + m["turn"]) % 3 == 0:  # two results: one user turn of two <tool_response> blocks
            r.append({"role": "tool", "content": RESULTS[(k + 2 * m["turn"] + 1) % len(RESULTS)]})
        say({"id": i, "messages": r})
'''
ROWS = [{"prompt": "Look up the word 'apple' and tell me how long it is.", "vary": True},
        {"prompt": "What is 17 * 23? Use the calculator.", "answer": "391"}]


# ---------------------------------------------------------------- the model, tokenizer and adapter
def build_tokenizer(d):
    """Qwen2/Qwen3's pipeline (NFC, their Split regex, ByteLevel, the added tokens), a small
    vocabulary: a random model then samples special and partial-UTF-8 tokens now and then."""
    def text():  # files of validation/ that change seldom, so the vocabulary (and the samples) stay put
        for f in ("chat_conversations.py", "chat_templates.py", "templates/qwen3.jinja"):
            yield open(os.path.join(HERE, "..", "tokenizer", f), encoding="utf-8").read()
        yield ENV_PY
        yield "température 21,5 °C — naïve café ✓ 日本語のテキスト Grüße\n" * 40
    tok = Tokenizer(models.BPE(ignore_merges=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_RE), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(text(), trainer=trainers.BpeTrainer(
        vocab_size=1200, min_frequency=2, show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    for content, special in QWEN_ADDED:
        t = AddedToken(content, single_word=False, lstrip=False, rstrip=False, normalized=False, special=special)
        (tok.add_special_tokens if special else tok.add_tokens)([t])
    ft = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=STOP, pad_token="<|endoftext|>",
                                 clean_up_tokenization_spaces=False)
    ft.chat_template = template("qwen3.jinja")
    ft.save_pretrained(d)
    return AutoTokenizer.from_pretrained(d)


def build_model(d, ht):
    V, eos = len(ht), ht.convert_tokens_to_ids(STOP)
    cfg = Qwen2Config(vocab_size=V, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=1024, rms_norm_eps=1e-6,
                      tie_word_embeddings=False, eos_token_id=eos, bos_token_id=None, pad_token_id=ht.pad_token_id)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1 + 0.1 * torch.randn_like(p))
            else:  # matrices and the q/k/v biases
                p.copy_(0.15 * torch.randn_like(p))
        # Hidden dimension 0 is a constant 1 in every token's residual stream (no attention or MLP
        # output writes it), and <|im_end|>'s logit reads it: P(stop) ~ 0.1 a token.
        model.model.embed_tokens.weight[:, 0] = 1.0
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight[0, :] = 0
            layer.mlp.down_proj.weight[0, :] = 0
        model.model.norm.weight[0] = 1.0
        for t, w in ((STOP, 18.0), ("</think>", 12.0), ("<|endoftext|>", 12.0)):
            model.lm_head.weight[ht.convert_tokens_to_ids(t), 0] = w
    model.eval()
    model.save_pretrained(d, safe_serialization=True)
    return model, cfg


def build_adapter(model, cfg, d, path):
    peft = get_peft_model(model, LoraConfig(r=R, lora_alpha=ALPHA, target_modules=MODULES, lora_dropout=0.0))
    with torch.no_grad():
        for name, p in peft.named_parameters():
            if "lora_B" in name:  # PEFT's A is random (kaiming), its B zero
                p.copy_(0.1 * torch.randn_like(p))
    peft.eval()
    write_pail_adapter(peft, path, cfg.num_hidden_layers, R, ALPHA, base_sha256(d))
    return peft


# ---------------------------------------------------------------- what the program saw
def read_log(path):
    """id -> {"start", "opening", "tools", "steps": [step requests], "answers": [messages answers],
    "end", "reward"} from env.py's log."""
    eps = {}
    for line in open(path, encoding="utf-8"):
        e = json.loads(line)
        m = e.get("got") or e.get("sent")
        ep = eps.setdefault(m["id"], {"steps": [], "answers": [], "end": None, "reward": None, "opening": None})
        if "got" in e:
            if m["type"] == "step":
                ep["steps"].append(m)
            elif m["type"] == "end":
                ep["end"] = m
        elif "reward" in m:
            ep["reward"], ep["components"] = m["reward"], m.get("components", {})
        elif ep["opening"] is None:
            ep["opening"], ep["tools"] = m["messages"], m.get("tools")
        else:
            ep["answers"].append(m["messages"])
    return eps


def runs(mask):
    """[(value, start, end)] of the runs of equal values."""
    out, s = [], 0
    for t in range(1, len(mask) + 1):
        if t == len(mask) or mask[t] != mask[s]:
            out.append((int(mask[s]), s, t))
            s = t
    return out


def lcp(a, b):
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


class Checker:
    def __init__(self, ht, peft):
        self.ht, self.peft = ht, peft
        self.eos = ht.convert_tokens_to_ids(STOP)

    def render(self, msgs, tools):
        return self.ht.apply_chat_template(msgs, tools=tools, add_generation_prompt=True, tokenize=False)

    def enc(self, text):
        return self.ht.encode(text, add_special_tokens=False)

    def dec(self, ids, skip):
        return self.ht.decode(list(ids), skip_special_tokens=skip)

    def new_text(self, hist, tools, rendered, a_text, content, new, stop_text):
        """episode.h's rule: (the text the template adds for `new`, whether the fallback was needed)."""
        full = self.render(hist + [{"role": "assistant", "content": content}] + new, tools)
        if full.startswith(rendered + a_text):
            return full[len(rendered + a_text):], full, False
        a = self.render([{"role": "user", "content": "."}], tools) + "."
        c = self.render([{"role": "user", "content": "."}, {"role": "assistant", "content": "."}] + new, tools)
        if not c.startswith(a):
            return None, full, True
        skip = len(a)
        if stop_text and c[skip:].startswith(stop_text):
            skip += len(stop_text)
        return c[skip:], full, True

    def check_shard(self, path, log_path, max_episode_tokens, label):
        """Every check of the docstring (a-c) on one shard and the log of the program that made it; reports
        them and returns the shard's mean turns and mask-1 tokens per completion (None when unusable)."""
        h = h5py.File(path, "r")
        T = float(h.attrs["temperature"])
        po, co = h["prompt_offsets"][:], h["completion_offsets"][:]
        pid, cid, lps, cmask = h["prompt_ids"][:], h["completion_ids"][:], h["logprobs"][:], h["completion_mask"][:]
        turns, rewards, valid, finish = h["turns"][:], h["rewards"][:], h["reward_valid"][:], h["finish_reason"][:]
        comps, names = h["reward_components"][:], [n.decode() for n in h["reward_components"].attrs["names"]]
        worker = h.attrs["worker_id"].decode()
        eps = read_log(log_path)
        N = len(turns)
        ids_of = {}  # completion index -> the program's episode
        for eid, ep in eps.items():
            w, rest = eid.split("/")
            batch, k = rest.split(".")
            if w == worker and batch == "0":
                ids_of[int(k)] = ep
        report(f"{label}: {N} episodes in the shard, each one the program ran",
               N == P * G and set(ids_of) == set(range(N)), f"{len(ids_of)} in the program's log")
        if set(ids_of) != set(range(N)):
            return None
        problems = {k: [] for k in ("zero", "open", "lcp", "stretch", "text", "row", "full", "turns", "steps",
                                    "reward", "finish", "shape")}
        worst = worst_base = 0.0
        n_scored = fallbacks = n_rowchecked = n_end = n_stop_turns = n_len_turns = n_specials = n_think = n_lossy = 0
        for p in range(P):
            prompt = pid[po[p]:po[p + 1]].tolist()
            openings = [self.enc(self.render(ids_of[i]["opening"], ids_of[i]["tools"]))
                        for i in range(p * G, p * G + G)]
            shared = openings[0]
            for o in openings[1:]:
                shared = shared[:lcp(shared, o)]
            if prompt != shared:
                problems["lcp"].append(f"group {p}: prompt of {len(prompt)} tokens, openings share {len(shared)}")
            for j in range(G):
                i = p * G + j
                ep = ids_of[i]
                comp, lp, mask = cid[co[i]:co[i + 1]].tolist(), lps[co[i]:co[i + 1]], cmask[co[i]:co[i + 1]]
                row = prompt + comp
                where = f"episode {i}"
                # b: mask-0 log-probs exactly 0
                if (lp[mask == 0] != 0).any():
                    problems["zero"].append(f"{where}: {int((lp[mask == 0] != 0).sum())} mask-0 tokens with a log-prob")
                # a: behaviour log-probs against transformers + PEFT over the whole row
                x = torch.tensor([row])
                with torch.no_grad():
                    logits = self.peft(input_ids=x).logits[0].float()
                    with self.peft.disable_adapter():
                        base_logits = self.peft(input_ids=x).logits[0].float()
                n0 = len(prompt)
                sel = np.nonzero(mask)[0]
                for lg, is_base in ((logits, False), (base_logits, True)):
                    ref = torch.log_softmax(lg[n0 - 1:n0 - 1 + len(comp)] / T, dim=-1)
                    got = ref.gather(1, torch.tensor(comp)[:, None])[:, 0].numpy()
                    err = float(np.abs(got[sel] - lp[sel]).max()) if len(sel) else 0.0
                    if is_base:
                        worst_base = max(worst_base, err)
                    else:
                        worst = max(worst, err)
                n_scored += len(sel)
                # the runs: [opening rest (0)], turn 1 (1), results (0), turn 2 (1), ...
                rs = runs(mask)
                head = []
                if rs and rs[0][0] == 0:
                    head = comp[rs[0][1]:rs[0][2]]
                    rs = rs[1:]
                if prompt + head != openings[j]:
                    problems["open"].append(f"{where}: prompt + leading mask-0 tokens ({len(prompt) + len(head)}) "
                                            f"are not the opening's {len(openings[j])} tokens")
                turn_runs = [(s, e) for v, s, e in rs if v == 1]
                gaps = [(s, e) for v, s, e in rs if v == 0]
                steps = ep["steps"]
                if not (rs and rs[-1][0] == 1 and len(gaps) == len(turn_runs) - 1):
                    problems["shape"].append(f"{where}: mask runs {[(v, e - s) for v, s, e in rs]}")
                    continue
                if not (turns[i] == len(steps) == len(turn_runs)):
                    problems["turns"].append(f"{where}: turns {turns[i]}, {len(steps)} steps received, "
                                             f"{len(turn_runs)} mask-1 runs")
                    continue
                if [s["turn"] for s in steps] != list(range(1, len(steps) + 1)) or \
                        [s["final"] for s in steps] != [False] * (len(steps) - 1) + [ep["end"] is None]:
                    problems["steps"].append(f"{where}: turns/final {[(s['turn'], s['final']) for s in steps]}")
                # c and b: each turn's text, and each stretch of the program's tokens
                hist, tools = list(ep["opening"]), ep["tools"]
                rendered = self.render(hist, tools)
                had_fallback = False
                last_stopped = True
                for t, (s, e) in enumerate(turn_runs):
                    toks = comp[s:e]
                    content, a_text = self.dec(toks, True), self.dec(toks, False)
                    n_specials += sum(x in self.ht.all_special_ids for x in toks) - (toks[-1] == self.eos)
                    n_think += "</think>" in content
                    n_lossy += "\ufffd" in content
                    stopped = toks[-1] == self.eos
                    last_stopped = stopped
                    n_stop_turns += stopped
                    n_len_turns += not stopped
                    if steps[t]["text"] != content:
                        problems["text"].append(f"{where} turn {t + 1}: the program got {steps[t]['text']!r}, "
                                                f"transformers decodes {content!r}")
                    if steps[t]["finish"] != ("stop" if stopped else "length"):
                        problems["steps"].append(f"{where} turn {t + 1}: finish {steps[t]['finish']}, last token "
                                                 f"{toks[-1]}")
                    if t == len(turn_runs) - 1:
                        break
                    new = ep["answers"][t]
                    want, full, fb = self.new_text(hist, tools, rendered, a_text, content, new,
                                                   STOP if stopped else None)
                    had_fallback |= fb
                    got = comp[gaps[t][0]:gaps[t][1]]
                    if want is None or got != self.enc(want):
                        problems["stretch"].append(
                            f"{where} after turn {t + 1}{' (fallback)' if fb else ''}: row has "
                            f"{self.dec(got, False)!r}, the template adds {want!r}")
                    hist = hist + [{"role": "assistant", "content": content}] + new
                    rendered = full
                fallbacks += had_fallback
                # b: the whole row as text against the conversation's rendering
                last = comp[turn_runs[-1][0]:turn_runs[-1][1]]
                row_text = self.dec(row, False)
                if not had_fallback:
                    n_rowchecked += 1
                    want = self.render(hist, tools) + self.dec(last, False)
                    if row_text != want:
                        at = lcp(row_text, want)
                        problems["row"].append(f"{where}: differs at char {at}: row {row_text[at:at + 40]!r}, "
                                               f"rendering {want[at:at + 40]!r}")
                    last_content = self.dec(last, True)
                    conv = hist + [{"role": "assistant", "content": last_content}]
                    if "</think>" not in last_content:
                        cut = len(self.render(hist, tools))
                        full_want = self.render(hist, tools) + THINK + last_content.lstrip("\n") + STOP + \
                            "\n<|im_start|>assistant\n"
                        if self.render(conv, tools) != full_want:
                            problems["full"].append(f"{where}: the whole conversation renders its end as "
                                                    f"{self.render(conv, tools)[cut - 30:]!r}")
                # rewards and finish
                if ep["end"] is not None:
                    n_end += 1
                want_r = np.float32(ep["reward"]) if ep["reward"] is not None else None
                want_c = [ep["components"].get(n, 0) for n in names] if want_r is not None else None
                if not valid[i] or want_r is None or rewards[i] != want_r or list(comps[i]) != want_c:
                    problems["reward"].append(f"{where}: valid {valid[i]} reward {rewards[i]} components "
                                              f"{dict(zip(names, comps[i]))}, the program's {ep['reward']} "
                                              f"{ep['components']}")
                # length: the episode's tokens ran out (the program got an "end"; fewer than --max-turns),
                # or its last turn was cut at --max-new-tokens (a row's finish is its last turn's)
                limit = ep["end"] is not None or len(steps) < MAX_TURNS or not last_stopped
                if limit and finish[i] != 1 or (not limit and len(comp) < max_episode_tokens - 1 and finish[i] != 0):
                    problems["finish"].append(f"{where}: finish_reason {finish[i]}, {len(steps)} turns, "
                                              f"end {ep['end'] is not None}, {len(comp)} tokens")

        def rep(key, name, detail=""):
            pr = problems[key]
            report(f"{label}: {name}", not pr, "; ".join(pr[:3]) + (f" (+{len(pr) - 3})" if len(pr) > 3 else "")
                   if pr else detail)
        report(f"{label}: behaviour log-probs of the {n_scored} mask-1 tokens vs transformers + PEFT "
               f"log_softmax(logits / {T:g}) of prompt + completion", worst <= 1e-4,
               f"max abs err {worst:.2e} (bound 1e-4)")
        report(f"{label}: ...and not the base model's (the adapter is in use)", worst_base > 1e-3,
               f"{worst_base:.2e} from the base model's")
        rep("zero", "every mask-0 token has log-prob exactly 0")
        rep("lcp", "each group's prompt is the longest common prefix of its openings' tokens")
        rep("open", "prompt + leading mask-0 tokens = encode(apply_chat_template(opening, tools))")
        rep("shape", "mask runs: [opening rest] turn (results turn)*, ending with a turn")
        rep("turns", "turns[i] = steps the program got = mask-1 runs",
            f"{sum(turns)} turns ({n_stop_turns} ended by {STOP}, {n_len_turns} by length), "
            f"{n_specials} other special tokens sampled, {n_think} turns with </think>")
        rep("steps", "steps numbered 1..n, \"final\" only on the last (none when an \"end\" followed), "
                     "\"finish\" stop iff the turn ends with the stop id")
        rep("text", "each step's \"text\" = the turn's tokens decoded by transformers, special tokens skipped",
            f"{n_lossy} turns with invalid UTF-8 (U+FFFD)")
        rep("stretch", "each mask-0 stretch after a turn = encode(what the template adds for the tool messages)",
            f"{fallbacks} episodes needed the one-exchange fallback")
        rep("row", "decode(prompt + completion) = apply_chat_template(conversation up to its last assistant turn, "
                   "add_generation_prompt=True) + that turn's text with its special tokens",
            f"{n_rowchecked} episodes without fallback")
        rep("full", "apply_chat_template(whole conversation) = apply_chat_template(up to its last assistant turn) + "
                    "qwen3's empty think block + that turn's text (special tokens skipped, leading newlines "
                    "stripped) + <|im_end|>\\n<|im_start|>assistant\\n")
        rep("reward", "rewards and reward_components are the program's, all valid")
        rep("finish", "finish_reason length exactly for episodes the limits ended or whose last turn was cut",
            f"{n_end} ended by \"end\"")
        return {"turns": float(np.mean(turns)), "trained": float(cmask.sum()) / N}


def main():
    BIN, WORK = sys.argv[1], sys.argv[2]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    d = os.path.join(WORK, "model")
    ht = build_tokenizer(d)
    model, cfg = build_model(d, ht)
    adapter = os.path.join(WORK, "adapter.h5")
    peft = build_adapter(model, cfg, d, adapter)
    with open(os.path.join(WORK, "env.py"), "w") as f:
        f.write(ENV_PY)
    with open(os.path.join(WORK, "rows.jsonl"), "w") as f:
        for r in ROWS:
            f.write(json.dumps(r) + "\n")
    run = os.path.join(WORK, "run")

    def sh(args, what):
        out = subprocess.run(args, capture_output=True, text=True, env=env, timeout=300)
        if out.returncode != 0:
            report(what, False, f"exit {out.returncode}: {' | '.join(out.stderr.strip().splitlines()[-3:])}")
        return out.returncode == 0

    common = ["--model", d, "--group-size", str(G)]
    lora = ["--lora-rank", str(R), "--lora-alpha", str(ALPHA)]
    if not sh([os.path.join(BIN, "grpo-train")] + common + lora + ["--run", f"file://{run}", "--steps", "0",
                                                                    "--init-adapter", adapter, "--metrics", ""],
              "grpo-train --init-adapter --steps 0 publishes v0"):
        return
    same = True
    with h5py.File(adapter, "r") as a, h5py.File(os.path.join(run, "adapters", "v00000000.h5"), "r") as b:
        for i in range(cfg.num_hidden_layers):
            for m in MODULES:
                for ab in ("lora_A", "lora_B"):
                    same &= np.array_equal(a[f"layers/{i}/{m}/{ab}"][:], b[f"layers/{i}/{m}/{ab}"][:])
    report("the run's v0 holds the adapter's A and B (random, non-zero)", same)

    stats = []
    for label, temp, batch, max_ep in (("T=1", 1.0, P * G, 400), ("T=0.7", 0.7, 2, 48)):
        wid = "t1" if temp == 1.0 else "t07"
        log = os.path.join(WORK, f"env-{wid}.jsonl")
        if not sh([os.path.join(BIN, "grpo-rollout")] + common +
                  ["--run", f"file://{run}", "--dataset", os.path.join(WORK, "rows.jsonl"), "--worker-id", wid,
                   "--groups-per-shard", str(P), "--batch-size", str(batch), "--max-shards", "1", "--max-ahead", "0",
                   "--max-new-tokens", str(MAX_NEW), "--max-turns", str(MAX_TURNS), "--max-episode-tokens",
                   str(max_ep), "--temperature", str(temp), "--seed", "3", "--env-timeout", "60",
                   "--env", f"'{sys.executable}' '{os.path.join(WORK, 'env.py')}' '{log}'"],
                  f"{label}: grpo-rollout --env"):
            continue
        shard = glob.glob(os.path.join(run, "rollouts", "v00000000", f"{wid}-*.h5"))
        if len(shard) != 1:
            report(f"{label}: one shard written", False, f"{shard}")
            continue
        print(f"{label} ({shard[0].split('/run/')[1]}, --batch-size {batch}, --max-episode-tokens {max_ep}):")
        s = Checker(ht, peft).check_shard(shard[0], log, max_ep, label)
        if s:
            stats.append(s)

    # d: the shards train
    metrics = os.path.join(WORK, "metrics.jsonl")
    if len(stats) == 2 and sh([os.path.join(BIN, "grpo-train")] + common + lora +
                              ["--run", f"file://{WORK}/train", "--replay", f"file://{run}", "--init-adapter", adapter,
                               "--steps", "2", "--groups-per-step", str(P), "--lr", "1e-3", "--metrics", metrics],
                              "grpo-train --replay of the two shards"):
        ms = [json.loads(line) for line in open(metrics)]
        ok = len(ms) == 2 and all(m["completions/mean_turns"] > 1 for m in ms)
        # replay in key order: t07-... then t1-...
        ok &= all(abs(m["completions/mean_turns"] - s["turns"]) < 1e-9 and
                  abs(m["completions/mean_trained_tokens"] - s["trained"]) < 1e-9 for m, s in zip(ms, stats[::-1]))
        report("grpo-train --replay: 2 steps on the shards; completions/mean_turns > 1 and mean_trained_tokens "
               "are the shards'", ok,
               ", ".join(f"step {m['step']}: mean_turns {m['completions/mean_turns']:.3f}, trained tokens "
                         f"{m['completions/mean_trained_tokens']:.2f}, loss {m['loss']}" for m in ms))


if __name__ == "__main__":
    main()
    print(f"env-episodes: {passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
