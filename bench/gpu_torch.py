"""transformers + PEFT on the GPU, the reference figures for bench/gpu.sh: the
same checkpoint (bf16 weights), LoRA rank 16 on every projection, the same
SFT rows (64 a step: completion tokens a second of forward + backward +
AdamW, the median over the steps after the first) and the same generation (32 prompts x 4 samples x 48
new tokens, temperature 1, one batch): wall seconds. Run only where torch,
transformers and peft import and torch sees a GPU.
Usage: python3 bench/gpu_torch.py MODEL_DIR SFT_JSONL"""
import json, statistics, sys, time

import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM


def main():
    model_dir, sft = sys.argv[1], sys.argv[2]
    dev = "cuda"
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.bfloat16).to(dev)
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules=targets, lora_dropout=0.0))
    rows = [json.loads(l) for l in open(sft)]
    # the bytes tokenizer: one id per byte (data/tokenizers/bytes)
    seqs = [list((r["prompt"] + r["completion"]).encode()) for r in rows]
    plen = [len(r["prompt"].encode()) for r in rows]
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    tps = []
    for step in range(12):
        first = (step * 64) % len(seqs)
        batch, pl = seqs[first:first + 64], plen[first:first + 64]
        L = max(map(len, batch))
        ids = torch.tensor([s + [0] * (L - len(s)) for s in batch], device=dev)
        mask = torch.tensor([[1] * len(s) + [0] * (L - len(s)) for s in batch], device=dev)
        # the loss on the completions only, as pail's SFT
        keep = torch.tensor([[0] * p + [1] * (len(s) - p) + [0] * (L - len(s)) for s, p in zip(batch, pl)], device=dev)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = model(input_ids=ids, attention_mask=mask, labels=ids.masked_fill(keep == 0, -100)).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        torch.cuda.synchronize()
        tps.append(int(keep.sum()) / (time.perf_counter() - t0))
    print(f"transformers + PEFT LoRA SFT tokens/s (completion tokens): {statistics.median(tps[1:]):.0f}")
    prompts = [list(r["prompt"].encode()) for r in rows[:32]]
    L = max(map(len, prompts))
    ids = torch.tensor([[0] * (L - len(p)) + p for p in prompts], device=dev).repeat_interleave(4, 0)
    mask = torch.tensor([[0] * (L - len(p)) + [1] * len(p) for p in prompts], device=dev).repeat_interleave(4, 0)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with torch.no_grad():
        model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=48, do_sample=True, temperature=1.0,
                       top_k=0, top_p=1.0, pad_token_id=0)
    torch.cuda.synchronize()
    print(f"transformers + PEFT generate 32 prompts x 4 samples x <=48 tokens, seconds: {time.perf_counter() - t0:.2f}")


if __name__ == "__main__":
    main()
