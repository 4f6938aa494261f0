"""TRL's side of bench/vs_trl.sh: GRPOTrainer + PEFT on a Hugging Face model
folder (the one grpo-ctl import-gguf wrote, loaded in fp32 on the CPU) and a
JSON-lines dataset of {"messages": [...], "answer": N} rows, the settings
pail's run uses (bench/vs_trl.sh passes them; doc/performance.md lists where
the two still differ). Conversational prompts: TRL renders them with the
tokenizer's chat template. Reward: 1 if the completion's final answer (the last
\\boxed{} content, else the last number, a '-' after a letter, digit or ')'
being an operator) equals the row's answer, else 0: pail's exact_answer rule
for integer answers (doc/rewards.md). One process, --threads torch threads.

Writes --out (JSON): per step the mean reward, step_time (TRL's own: the
optimizer step including generation), generate_seconds (this script's timer
around _generate_and_score_completions: generation, rewards, advantages),
train_seconds = step_time - generate_seconds, tokens and completion lengths;
and the wall clock of the whole process and of trainer.train(). Not a test."""
import argparse
import json
import os
import re
import time

T_START = time.perf_counter()  # before the heavy imports: the process's own wall clock

import torch  # noqa: E402
import warnings  # noqa: E402

warnings.filterwarnings("ignore")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
from datasets import Dataset  # noqa: E402
from peft import LoraConfig  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

hf_logging.set_verbosity_error()

ap = argparse.ArgumentParser()
ap.add_argument("--model", required=True)
ap.add_argument("--dataset", required=True)
ap.add_argument("--out", required=True)
ap.add_argument("--steps", type=int, required=True)
ap.add_argument("--groups-per-step", type=int, required=True)
ap.add_argument("--group-size", type=int, required=True)
ap.add_argument("--max-new-tokens", type=int, required=True)
ap.add_argument("--lora-rank", type=int, required=True)
ap.add_argument("--lora-alpha", type=float, required=True)
ap.add_argument("--lr", type=float, required=True)
ap.add_argument("--epsilon-low", type=float, default=0.2)
ap.add_argument("--epsilon-high", type=float, default=0.2)
ap.add_argument("--max-grad-norm", type=float, default=1.0)
ap.add_argument("--micro-batch", type=int, default=0,
                help="completions per forward/backward (0: the whole step); gradient accumulation makes up the rest")
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--seed", type=int, default=1)
args = ap.parse_args()
torch.set_num_threads(args.threads)
torch.set_num_interop_threads(1)

NUM = re.compile(r"(?<![A-Za-z0-9)])[-+]?\d+(?:,\d{3})*(?:\.\d+)?")
BOXED = re.compile(r"\\(?:boxed|fbox)\{([^{}]*)\}")


def final_answer(text):
    boxed = BOXED.findall(text)
    if boxed:
        text = boxed[-1]
    nums = NUM.findall(text)
    return float(nums[-1].replace(",", "")) if nums else None


def exact_answer_reward(completions, answer, **_):
    out = []
    for c, a in zip(completions, answer):
        text = c[-1]["content"] if isinstance(c, list) else c  # conversational: the assistant message
        got = final_answer(text)
        out.append(1.0 if got is not None and got == float(a) else 0.0)
    return out


rows = [json.loads(line) for line in open(args.dataset) if line.strip()]
ds = Dataset.from_list([{"prompt": r["messages"], "answer": r["answer"]} for r in rows])

tok = AutoTokenizer.from_pretrained(args.model)
if tok.pad_token is None:
    tok.pad_token = tok.eos_token
model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)

completions_per_step = args.groups_per_step * args.group_size
micro = args.micro_batch or completions_per_step
if completions_per_step % micro or micro % args.group_size:
    raise SystemExit(f"--micro-batch {micro}: must divide {completions_per_step} and be a multiple of the group size")
cfg = GRPOConfig(
    output_dir=os.path.join(os.path.dirname(os.path.abspath(args.out)), "trl-out"),
    use_cpu=True, bf16=False, fp16=False,
    max_steps=args.steps, logging_steps=1, save_strategy="no", report_to=[],
    seed=args.seed, data_seed=args.seed,
    # one optimizer step = groups_per_step prompts x group_size completions, generated at once
    num_generations=args.group_size, per_device_train_batch_size=micro,
    gradient_accumulation_steps=completions_per_step // micro,
    max_completion_length=args.max_new_tokens, temperature=1.0, top_p=1.0, top_k=0,
    loss_type="dapo", beta=0.0, epsilon=args.epsilon_low, epsilon_high=args.epsilon_high,
    scale_rewards="group", num_iterations=1, importance_sampling_level="token",
    learning_rate=args.lr, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0,
    adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8, optim="adamw_torch", max_grad_norm=args.max_grad_norm,
    dataloader_num_workers=0, disable_tqdm=True,
)
peft_cfg = LoraConfig(r=args.lora_rank, lora_alpha=args.lora_alpha, lora_dropout=0.0, bias="none",
                      task_type="CAUSAL_LM", target_modules=["q_proj", "k_proj", "v_proj", "o_proj",
                                                             "gate_proj", "up_proj", "down_proj"])


class TimedGRPOTrainer(GRPOTrainer):
    """Times each generation (+ rewards, advantages) so the trainer's own share can be told apart."""

    gen_seconds = []

    def _generate_and_score_completions(self, inputs):
        t0 = time.perf_counter()
        out = super()._generate_and_score_completions(inputs)
        self.gen_seconds.append(time.perf_counter() - t0)
        return out


steps = []


class Record(TrainerCallback):
    def on_log(self, _args, state, _control, logs=None, **_):
        if logs and "reward" in logs:
            steps.append({"step": state.global_step, **{k: v for k, v in logs.items()
                                                      if isinstance(v, (int, float))}})
            s = steps[-1]
            print(f"trl step {s['step']}/{args.steps}: reward {s['reward']:.3f} step_time {s.get('step_time', 0):.1f} s "
                  f"length {s.get('completions/mean_length', 0):.1f}", flush=True)


trainer = TimedGRPOTrainer(model=model, reward_funcs=exact_answer_reward, args=cfg, train_dataset=ds,
                           processing_class=tok, peft_config=peft_cfg, callbacks=[Record()])
t_train = time.perf_counter()
trainer.train()
t_end = time.perf_counter()

prev_tokens = 0.0
gens = TimedGRPOTrainer.gen_seconds
for i, s in enumerate(steps):
    s["generate_seconds"] = gens[i] if i < len(gens) else None
    if s.get("step_time") is not None and s["generate_seconds"] is not None:
        s["train_seconds"] = s["step_time"] - s["generate_seconds"]
    s["tokens"] = s.get("num_tokens", 0) - prev_tokens  # TRL's num_tokens is cumulative (prompt + completion)
    prev_tokens = s.get("num_tokens", 0)
    s["completion_tokens"] = s.get("completions/mean_length", 0) * completions_per_step
json.dump({"side": "trl", "versions": {"torch": torch.__version__, "trl": __import__("trl").__version__,
                                       "peft": __import__("peft").__version__,
                                       "transformers": __import__("transformers").__version__},
           "threads": args.threads, "micro_batch": micro,
           "gradient_accumulation_steps": completions_per_step // micro,
           "wall_seconds": t_end - T_START, "train_call_seconds": t_end - t_train, "steps": steps},
          open(args.out, "w"), indent=1)
print(f"trl: {len(steps)} steps, wall {t_end - T_START:.1f} s (train() {t_end - t_train:.1f} s)", flush=True)
