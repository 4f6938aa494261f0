"""Reference for bench/bench_model.c's policy figure: transformers + PEFT on
PyTorch doing the same step as pail at the bench shape (llama, C 512, L 8, H 8,
Hkv 2, F 1408, V 32000, untied; LoRA rank 16 on all seven projections), fp32,
batch 8 x 256 tokens, loss = sum of the per-token log-probs of the next tokens,
backward to the LoRA parameters only (base frozen by PEFT), same thread count.
Prints the best (least disturbed) step time of --iters timed steps after a
warm-up, as bench_model does, and a line
"torch_policy_tok_s X" for bench/bench_model.sh. Not a test."""
import argparse
import os
import time
import warnings

import torch
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.utils import logging as hf_logging

warnings.filterwarnings("ignore")
hf_logging.set_verbosity_error()
ap = argparse.ArgumentParser()
ap.add_argument("--iters", type=int, default=5)
ap.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "2")))
args = ap.parse_args()
torch.set_num_threads(args.threads)
torch.manual_seed(0)
B, S, R = 8, 256, 16
cfg = LlamaConfig(vocab_size=32000, hidden_size=512, intermediate_size=1408, num_hidden_layers=8,
                  num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=2048,
                  rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False)
model = LlamaForCausalLM(cfg).float()
model = get_peft_model(model, LoraConfig(r=R, lora_alpha=32, lora_dropout=0.0, target_modules=[
    "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]))
with torch.no_grad():  # non-zero B, as in pail's bench (B = 0 changes no cost, but keeps it honest)
    for n, p in model.named_parameters():
        if "lora_B" in n:
            p.uniform_(-0.01, 0.01)
model.train()
ids = torch.randint(0, cfg.vocab_size, (B, S))


def step():
    logits = model(input_ids=ids).logits[:, :-1]
    # sum of the log-probs of the targets: -cross_entropy(sum) = sum log_softmax[target]
    loss = -torch.nn.functional.cross_entropy(logits.reshape(-1, cfg.vocab_size), ids[:, 1:].reshape(-1),
                                              reduction="sum")
    model.zero_grad(set_to_none=True)
    loss.backward()
    return float(loss)


step()  # warm-up
times = []
for _ in range(args.iters):
    t0 = time.perf_counter()
    step()
    times.append(time.perf_counter() - t0)
ntrain = sum(p.numel() for p in model.parameters() if p.requires_grad)
t = min(times)
print(f"torch {torch.__version__}, {args.threads} threads, attention {model.config._attn_implementation}, "
      f"{ntrain / 1e6:.2f}M trainable: step {t:.3f} s (best of {args.iters}), {B * S / t:.0f} tok/s")
print(f"torch_policy_tok_s {B * S / t:.1f}")
