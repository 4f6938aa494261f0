"""Validates pail's GRPO advantages, loss and gradient (src/grpo/loss.c, through
build/tools/grpo_loss_driver) against (1) a PyTorch autograd reference written
from TRL's formulas and (2) TRL's own GRPOTrainer._compute_loss, called on the
same padded batch with the model's log-probs patched in (TRL's loss code runs
unchanged). Every loss variant x ratio type x KL x cap x reward scaling x
micro-batching. Pass: max relative error <= 1e-3 per tensor (loss, gradient,
advantages) — float32 arithmetic in both, so the real errors are ~1e-6.
Usage: check_loss.py DRIVER  -> prints "grpo-loss: N passed, N failed"."""
import itertools
import json
import subprocess
import sys
import types
from collections import defaultdict

import torch

torch.set_num_threads(1)
DRIVER = sys.argv[1]


def rel_err(a, b):
    a, b = torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64)
    return ((a - b).abs().max() / b.abs().max().clamp(min=1e-12)).item()


def make_case(seed, P, G):
    g = torch.Generator().manual_seed(seed)
    N = P * G
    lens = torch.randint(1, 9, (N,), generator=g)
    T = int(lens.sum())
    old = -torch.rand(T, generator=g) * 3 - 0.01
    new = old + torch.randn(T, generator=g) * 0.3      # ratios both inside and outside the clip range
    ref = old + torch.randn(T, generator=g) * 0.2
    rewards = torch.randint(0, 3, (N,), generator=g).float()
    rewards[:G] = 1.0                                   # group 0 has zero spread
    valid = torch.ones(N, dtype=torch.int64)
    valid[G + 1] = 0                                    # one reward that failed
    return dict(P=P, G=G, lens=lens.tolist(), new=new.tolist(), old=old.tolist(), ref=ref.tolist(),
                rewards=rewards.tolist(), valid=valid.tolist())


def advantages_ref(case, scale):
    P, G = case["P"], case["G"]
    r = torch.tensor(case["rewards"], dtype=torch.float32)
    v = torch.tensor(case["valid"]).bool()
    r = torch.where(v, r, torch.nan).view(P, G)
    mean = torch.nanmean(r, dim=1, keepdim=True)
    def nanstd(x, dim=None, keepdim=False):  # unbiased, as TRL's nanstd
        m = torch.nanmean(x, dim=dim, keepdim=True)
        n = (~torch.isnan(x)).sum(dim=dim, keepdim=True) if dim is not None else (~torch.isnan(x)).sum()
        var = torch.nansum((x - m) ** 2, dim=dim, keepdim=True) / (n - 1)
        return var.sqrt() if keepdim or dim is None else var.sqrt().squeeze(dim)
    std = nanstd(r, dim=1, keepdim=True)
    a = r - mean
    if scale == "group":
        a = a / (std + 1e-4)
    elif scale == "batch":
        a = a / (nanstd(r.flatten()) + 1e-4)
    nvalid = (~torch.isnan(r)).sum(dim=1, keepdim=True)
    a = torch.where((std == 0) | (nvalid < 2), torch.zeros_like(a), a)  # no signal in the group
    return torch.nan_to_num(a.flatten(), nan=0.0)


def padded(case, key, requires_grad=False):
    lens, N = case["lens"], len(case["lens"])
    Tmax = max(lens)
    x = torch.zeros(N, Tmax)
    mask = torch.zeros(N, Tmax)
    flat = torch.tensor(case[key])
    o = 0
    for i, n in enumerate(lens):
        x[i, :n] = flat[o:o + n]
        mask[i, :n] = 1
        o += n
    if requires_grad:
        x.requires_grad_(True)
    return x, mask


def unpad(x, lens):
    return torch.cat([x[i, :n] for i, n in enumerate(lens)])


def loss_ref(case, cfg, adv):
    """Autograd reference written from TRL's formulas (delta = pail's tis_cap)."""
    new, mask = padded(case, "new", True)
    old, _ = padded(case, "old")
    ref, _ = padded(case, "ref")
    mask = mask * torch.tensor(case["valid"]).float().unsqueeze(1)
    A = adv.unsqueeze(1)
    log_ratio = new - old
    if cfg["ratio"] == "sequence":
        log_ratio = ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)
    c1 = torch.exp(log_ratio)
    c2 = torch.clamp(c1, 1 - cfg["eps_low"], 1 + cfg["eps_high"])
    if cfg["tis_cap"] > 0:
        c1 = torch.clamp(c1, max=cfg["tis_cap"])
    ptl = -torch.min(c1 * A, c2 * A)
    if cfg["beta"] > 0:
        ptl = ptl + cfg["beta"] * (torch.exp(ref - new) - (ref - new) - 1)
    ptl = ptl.expand_as(mask)
    if cfg["loss_type"] == "grpo":
        # mean over the completions that count (pail leaves failed rewards out of the mean)
        per_seq = (ptl * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
        loss = per_seq.sum() / mask.any(-1).sum()
    elif cfg["loss_type"] == "dr_grpo":
        loss = (ptl * mask).sum() / (mask.any(-1).sum() * cfg["max_new_tokens"])
    else:
        loss = (ptl * mask).sum() / mask.sum()
    loss.backward()
    return loss.item(), unpad(new.grad, case["lens"])


def loss_trl(case, cfg, adv):
    """TRL's own _compute_loss on the same batch (all completions valid)."""
    from trl import GRPOTrainer
    t = GRPOTrainer.__new__(GRPOTrainer)
    new, mask = padded(case, "new", True)
    old, _ = padded(case, "old")
    ref, _ = padded(case, "ref")
    t.top_entropy_quantile = 1.0
    t.off_policy_mask_threshold = None
    t.importance_sampling_level = cfg["ratio"]
    t.beta = cfg["beta"]
    t.loss_type = cfg["loss_type"]
    t.epsilon_low, t.epsilon_high = cfg["eps_low"], cfg["eps_high"]
    t.args = types.SimpleNamespace(delta=cfg["tis_cap"] or None, use_bias_correction_kl=False, steps_per_generation=1)
    t.use_vllm = False
    t.vllm_importance_sampling_correction = False
    t.model = types.SimpleNamespace(training=True)
    t.current_gradient_accumulation_steps = 1
    t.max_completion_length = cfg["max_new_tokens"]
    t._entropy_bonus_enabled = False
    t.aux_loss_enabled = False
    t._metrics = defaultdict(lambda: defaultdict(list))
    t.accelerator = types.SimpleNamespace(num_processes=1, gather=lambda x: x, reduce=lambda x, reduction="sum": x,
                                          sync_gradients=True)
    t._get_per_token_logps_and_entropies = lambda *a, **k: (new, torch.zeros_like(new), None)
    N = new.shape[0]
    inputs = {"prompt_ids": torch.zeros(N, 1, dtype=torch.long), "prompt_mask": torch.ones(N, 1),
              "completion_ids": torch.zeros(N, new.shape[1], dtype=torch.long), "completion_mask": mask,
              "advantages": adv, "old_per_token_logps": old, "ref_per_token_logps": ref,
              "num_items_in_batch": mask.sum()}
    try:
        loss = t._compute_loss(None, inputs)
    except (AttributeError, KeyError, TypeError) as e:   # TRL internals we did not stub (metrics logging)
        raise RuntimeError(f"TRL _compute_loss could not run: {e!r}")
    loss.backward()
    return loss.item(), unpad(new.grad, case["lens"])


def run_pail(case, cfg, micro):
    req = dict(case, **cfg, micro=micro)
    out = subprocess.run([DRIVER], input=json.dumps(req), capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


passed = failed = 0
trl_ran = 0
combos = itertools.product(["dapo", "grpo", "dr_grpo"], ["token", "sequence"], [0.0, 0.04], [0.0, 2.0],
                           ["group", "batch", "none"])
for k, (lt, ratio, beta, cap, scale) in enumerate(combos):
    eps = (3e-4, 4e-4) if ratio == "sequence" else (0.2, 0.28)
    cfg = dict(loss_type=lt, ratio=ratio, beta=beta, tis_cap=cap, eps_low=eps[0], eps_high=eps[1],
               scale_rewards=scale, max_new_tokens=8)
    case = make_case(k, P=4, G=4)
    adv = advantages_ref(case, scale)
    ref_loss, ref_grad = loss_ref(case, cfg, adv)
    name = f"{lt}/{ratio}/beta={beta}/cap={cap}/{scale}"
    errs = []
    for micro in (1, 3):
        got = run_pail(case, cfg, micro)
        errs.append(("adv", rel_err(got["adv"], adv)))
        errs.append((f"loss(micro={micro})", rel_err([got["loss"]], [ref_loss])))
        errs.append((f"grad(micro={micro})", rel_err(got["grad"], ref_grad)))
    # TRL itself, where its API matches: every completion's reward valid (TRL has
    # no per-completion reward-failure mask in the loss) and grpo/dr_grpo
    # normalised over the same completions.
    case_v = dict(case, valid=[1] * len(case["valid"]))
    adv_v = advantages_ref(case_v, scale)
    trl_loss, trl_grad = loss_trl(case_v, cfg, adv_v)
    trl_ran += 1
    got = run_pail(case_v, cfg, 1)
    errs.append(("loss vs TRL", rel_err([got["loss"]], [trl_loss])))
    errs.append(("grad vs TRL", rel_err(got["grad"], trl_grad)))
    worst = max(errs, key=lambda e: e[1])
    if worst[1] <= 1e-3:
        passed += 1
    else:
        failed += 1
        print(f"FAIL {name}: {worst[0]} rel err {worst[1]:.2e}")
print(f"grpo-loss: {trl_ran} cases also checked against TRL's GRPOTrainer._compute_loss")
print(f"grpo-loss: {passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
