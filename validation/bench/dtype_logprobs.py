"""Log-prob distances for base weights held as bf16 (issue 14), run by
bench/run.sh: a random bf16 checkpoint (grpo-ctl init-model --dtype bf16, the
bench shape unless --shape says otherwise) and a few sequences of 100-200 ids.
pail holds the weights as stored (bf16) and computes in fp32 after converting
them exactly, so its log-probs should equal transformers' on the same weights
upcast to fp32 (torch_dtype=float32) up to fp32 rounding; transformers running
natively in bf16 (torch_dtype=bfloat16, activations in bf16; the logits
upcast to fp32 before the log-softmax) is the distance users accept today.
Prints, each as max abs over every token:
- pail grpo-ctl logprobs --dtype auto on the exact path
  (PAIL_KERNELS_GEMM=exact) vs transformers fp32 (target <= 1e-3);
- pail's decode path (KV cache, one token a step: bench_model_dtype
  decode-logprobs), its prefill exact too, vs transformers fp32 (target <= 1e-3);
- transformers bf16 vs transformers fp32;
- on a CPU whose default bf16 GEMM rounds activations (AMX tiles, or
  AVX-512 BF16 on AMD: the default path then differs from the exact one): the
  default grpo-ctl logprobs (activations rounded to bf16 at the GEMMs) and the
  default decode path (its prefill on that GEMM) vs transformers fp32, and the
  former vs transformers bf16;
and whether pail's distances are no larger than transformers' own. A figure,
not a test: it exits 0 either way unless a tool fails.
Usage: dtype_logprobs.py --ctl bin/grpo-ctl --decode build/bench/bench_model_dtype
       --tokenizer data/tokenizers/bytes [--shape bench] [--threads 2]"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import warnings

import torch
from transformers import AutoModelForCausalLM
from transformers.utils import logging as hf_logging

warnings.filterwarnings("ignore")
hf_logging.set_verbosity_error()
hf_logging.disable_progress_bar()
ap = argparse.ArgumentParser()
ap.add_argument("--ctl", required=True)
ap.add_argument("--decode", required=True, help="bench_model_dtype (its decode-logprobs mode)")
ap.add_argument("--tokenizer", required=True)
ap.add_argument("--shape", default="bench")
ap.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "2")))
ap.add_argument("--lens", default="100,137,168,200", help="sequence lengths (ids)")
ap.add_argument("--prefill", type=int, default=16, help="decode path: ids prefilled in one call")
args = ap.parse_args()
torch.set_num_threads(args.threads)
LENS = [int(x) for x in args.lens.split(",")]


def run(cmd, env=None):
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        sys.exit(f"dtype_logprobs: {' '.join(cmd[:2])} failed ({out.returncode}): {out.stderr.strip()}")
    return out, time.perf_counter() - t0


def torch_logprobs(model, seqs):
    out = []
    with torch.no_grad():
        for s in seqs:
            ids = torch.tensor([s])
            logits = model(input_ids=ids).logits[0, :-1].float()  # bf16 logits upcast, as TRL does
            out.append(torch.log_softmax(logits, -1).gather(1, ids[0, 1:, None])[:, 0].double().tolist())
    return out


def max_dist(a, b, first=1):
    """max |a - b| over every sequence's tokens t >= first (lists indexed from t = 1)."""
    return max(abs(x - y) for p, q in zip(a, b) for x, y in zip(p[first - 1:], q[first - 1:]))


work = tempfile.mkdtemp(prefix="pail-dtype-lp-")
try:
    m = os.path.join(work, "model")
    _, t_init = run([args.ctl, "init-model", "--out", m, "--shape", args.shape, "--dtype", "bf16",
                     "--tokenizer", args.tokenizer])
    cfg = json.load(open(os.path.join(m, "config.json")))
    V = cfg["vocab_size"]
    rng = random.Random(7)
    seqs = [[rng.randrange(V) for _ in range(n)] for n in LENS]
    ids_path = os.path.join(work, "ids.jsonl")
    with open(ids_path, "w") as f:
        for s in seqs:
            f.write(json.dumps({"ids": s}) + "\n")
    print(f"checkpoint: grpo-ctl init-model --shape {args.shape} --dtype bf16 ({t_init:.1f} s; "
          f"C {cfg['hidden_size']} L {cfg['num_hidden_layers']} V {V}, torch_dtype {cfg.get('torch_dtype')}); "
          f"{len(seqs)} sequences of {', '.join(map(str, LENS))} random ids; {args.threads} threads")

    # the exact path (W converted to fp32), then the default one: on a CPU with
    # AMX or (AMD) AVX-512 BF16 the GEMMs round their activations to bf16
    # (kernels/gemm_bf16.h)
    exact_env = dict(os.environ, PAIL_KERNELS_GEMM="exact")
    out, t_ctl = run([args.ctl, "logprobs", "--model", m, "--input", ids_path, "--dtype", "auto"], exact_env)
    pail = [json.loads(line)["logprobs"] for line in out.stdout.splitlines()]
    out, t_amx = run([args.ctl, "logprobs", "--model", m, "--input", ids_path, "--dtype", "auto"])
    pail_def = [json.loads(line)["logprobs"] for line in out.stdout.splitlines()]
    amx = pail_def != pail  # the default took another path: AMX or AVX-512 BF16
    def decode_run(env):
        out, t = run([args.decode, "decode-logprobs", "--model", m, "--input", ids_path,
                      "--prefill", str(args.prefill)], env)
        held = out.stderr.rsplit("weights held as ", 1)[-1].strip() if "weights held as " in out.stderr else "?"
        dec = []
        for line in out.stdout.splitlines():
            j = json.loads(line)
            dec.append([float("nan")] * (j["from"] - 1) + j["logprobs"])  # indexed from t = 1 like the others
        return dec, t, held

    # the decode path with fp32 activations: its prefill (a GEMM of 4 x 16
    # rows) exact too; then as the worker runs it (the prefill on the fast bf16 GEMM where it is the default)
    dec, t_dec, held = decode_run(exact_env)
    dec_def, t_dec_def, _ = decode_run(None)
    assert [len(x) for x in pail] == [len(x) for x in dec] == [n - 1 for n in LENS]

    ref32 = AutoModelForCausalLM.from_pretrained(m, torch_dtype=torch.float32).eval()
    t0 = time.perf_counter()
    t32 = torch_logprobs(ref32, seqs)
    t_t32 = time.perf_counter() - t0
    del ref32
    ref16 = AutoModelForCausalLM.from_pretrained(m, torch_dtype=torch.bfloat16).eval()
    t0 = time.perf_counter()
    t16 = torch_logprobs(ref16, seqs)
    t_t16 = time.perf_counter() - t0
    del ref16

    d_ctl = max_dist(pail, t32)
    d_dec = max_dist(dec, t32, first=args.prefill)
    d_t16 = max_dist(t16, t32)
    d_t16_dec = max_dist(t16, t32, first=args.prefill)
    print(f"  pail (weights held as {held}) computes in fp32; transformers {torch.__version__.split('+')[0]} "
          f"fp32 on the same weights upcast (torch_dtype=float32) is the reference")
    print(f"  pail grpo-ctl logprobs --dtype auto, PAIL_KERNELS_GEMM=exact ({t_ctl:.1f} s) vs transformers fp32 "
          f"({t_t32:.1f} s): max abs {d_ctl:.2e} (target <= 1e-3)")
    print(f"  pail decode path, PAIL_KERNELS_GEMM=exact (bench_model_dtype decode-logprobs: prefill {args.prefill}, then one token a step, "
          f"each sequence in its own slot of one KvCache, stepped together; {t_dec:.1f} s) vs transformers fp32, tokens t >= {args.prefill}: "
          f"max abs {d_dec:.2e} (target <= 1e-3)")
    print(f"  transformers bf16 (torch_dtype=bfloat16, {t_t16:.1f} s) vs transformers fp32: max abs {d_t16:.2e} "
          f"({d_t16_dec:.2e} over t >= {args.prefill})")
    if amx:
        d_dec_amx = max_dist(dec_def, t32, first=args.prefill)
        print(f"  pail decode path as the worker runs it (the prefill's GEMM rounding to bf16, the decode's mat-vecs exact; "
              f"{t_dec_def:.1f} s) vs transformers fp32, t >= {args.prefill}: max abs {d_dec_amx:.2e} "
              f"(transformers bf16: {d_t16_dec:.2e})")
        d_amx, d_amx16 = max_dist(pail_def, t32), max_dist(pail_def, t16)
        print(f"  pail grpo-ctl logprobs --dtype auto, the default bf16 GEMM (activations rounded to bf16 at the "
              f"GEMMs; {t_amx:.1f} s) vs transformers fp32: max abs {d_amx:.2e}; vs transformers bf16: "
              f"{d_amx16:.2e}")
        print(f"  pail's default bf16 GEMM no farther from fp32 than transformers' own bf16: "
              f"{'yes' if d_amx <= d_t16 else 'NO'} ({d_amx:.2e} vs {d_t16:.2e})")
    else:
        print("  (the default path here is the exact one above)")
    ok = d_ctl <= d_t16 and d_dec <= d_t16_dec
    print(f"  pail's distances no larger than transformers' own bf16 vs fp32: {'yes' if ok else 'NO'} "
          f"({d_ctl:.2e} and {d_dec:.2e} vs {d_t16:.2e})")
finally:
    shutil.rmtree(work, ignore_errors=True)
