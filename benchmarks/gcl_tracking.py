"""Why SONEX tracks the global contrastive loss (the "modified SONEX" of Chen et al., NeurIPS 2025, App. F.3): the
bias of the contrastive term's gradient estimator at fixed parameters, mini-batch plug-in versus tracked inner means,
against the contrast set size.

    python benchmarks/gcl_tracking.py [--quick]

Problem: :class:`fccolit.objectives.ContinualLearningObjective`'s objective term ``g_0(w) = mean_a f_0(g_{0,a}(w))``, the
two-way global contrastive loss with τ = 0.05: ``g_{0,a}`` are the means over the anchor's n contrast samples of
``e^{z − z_pos}`` (image → texts and text → images) and ``f_0(u) = τ Σ_k log(1 + n u_k)``. Generated data: 6
classes × 200 samples of 16 features (class means 1.5·N(0, 1) apart, unit noise), target class 5 (200 anchors,
n = 1000 contrast samples). Model: a linear image encoder (16 → 8) and 6 learned text embeddings, cosine scores (as
``CLIPClassifier(logit_scale=1)``), float64, at a fixed random initialization: the parameters never move, so the
exact gradient ``∇g_0(w)`` (from all the data) is one vector to compare against.

Each step draws 8 anchors and N contrast samples at random, the same batches for every estimator:

* plug-in: the gradient of the batch's ``mean_a f_0(ĝ_{0,a})`` (what an algorithm without state steps on: biased,
  since ``E log(1 + nĝ) < log(1 + n E ĝ)``);
* tracked: SONEX's step (``SONEX.direct_estimate``: the per-anchor state ``u_0`` updated with γ = 0.8 or 0.1, the
  gradient ``mean_a ⟨∇f_0(u_{0,a}), ∇ĝ_{0,a}⟩``), after a burn-in of 30 visits per anchor;
* oracle: the same with ``u = g_{0,a}(w)`` exactly: unbiased, so its entry is the Monte-Carlo noise floor.

Entry: ``‖mean_t G_t − ∇g_0‖ / ‖∇g_0‖`` with its standard error (from 10 block means). The SONEX modules run this
exact code path (the constraints' part is left out: it does not depend on the contrastive term).

Writes ``benchmarks/results/gcl_tracking.md`` (and ``gcl_tracking.png`` when matplotlib is installed).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fccolit.algorithms.sonex import SONEX  # noqa: E402
from fccolit.objectives import ContinualLearningObjective  # noqa: E402
from timing import RESULTS_DIR, machine, write_result  # noqa: E402

CLASSES, PER_CLASS, FEATURES, TARGET, TAU, ANCHORS = 6, 200, 16, 5, 0.05, 8


class CosineScorer(nn.Module):
    """``s_ic = cos(E_I(x_i), E_T(c))``: a linear image encoder and one learned embedding per class prompt."""

    def __init__(self, features: int, embedding: int, classes: int) -> None:
        super().__init__()
        self.image = nn.Linear(features, embedding)
        self.text = nn.Parameter(torch.randn(classes, embedding))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.image(x), dim=-1) @ F.normalize(self.text, dim=-1).t()


def make_data(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    means = 1.5 * torch.randn(CLASSES, FEATURES, generator=g, dtype=torch.float64)
    y = torch.arange(CLASSES).repeat_interleave(PER_CLASS)
    x = means[y] + torch.randn(y.numel(), FEATURES, generator=g, dtype=torch.float64)
    return {"x": x, "y": y, "index": torch.arange(y.numel())}


def flat_grad(value: torch.Tensor, params: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat([g.reshape(-1) for g in torch.autograd.grad(value, params, retain_graph=True)])


ESTIMATORS = ("plug-in", "tracked γ = 0.8", "tracked γ = 0.1", "oracle u = g")


def measure(contrast: int, steps: int, seed: int, data: dict[str, torch.Tensor]) -> dict[str, tuple[float, float]]:
    """``{estimator: (relative error of its mean over the steps, standard error)}`` for N = ``contrast``; every
    estimator sees the same batches."""
    torch.manual_seed(seed)
    model = CosineScorer(FEATURES, 8, CLASSES).double()
    sizes = {"num_samples": data["y"].numel(), "num_classes": CLASSES, "num_outputs": CLASSES,
             f"num_class_{TARGET}": PER_CLASS}  # n = 1000 contrast samples per anchor

    def sonex(gamma: float) -> SONEX:
        objective = ContinualLearningObjective(target=TARGET, protected=list(range(TARGET)), temperature=TAU)
        return SONEX(model, objective, data_sizes=sizes, ema_weight=gamma, correction_weight=0.0,
                     state_dtype="float64").double()

    modules = {"tracked γ = 0.8": sonex(0.8), "tracked γ = 0.1": sonex(0.1)}
    objective = modules["tracked γ = 0.8"].objective
    params = list(model.parameters())
    whole = objective.contrastive.inner(model(data["x"]), data)  # every anchor against all 1000 others: exact g_{0,a}
    exact = flat_grad(objective.contrastive.outer(whole.value, {}).mean(), params)
    oracle = torch.full((data["y"].numel(), 2), float("nan"), dtype=torch.float64)
    oracle[whole.index] = whole.value.detach()

    anchors = (data["y"] == TARGET).nonzero().flatten()
    others = (data["y"] != TARGET).nonzero().flatten()
    g = torch.Generator().manual_seed(1000 + seed)
    burn_in = 30 * anchors.numel() // ANCHORS  # 30 visits per anchor: the first visit's weight in u (γ = 0.1) < 5%
    blocks = 10  # standard errors from block means (u carries each anchor's history: the steps are correlated)
    block_sums = {name: torch.zeros(blocks, exact.numel(), dtype=exact.dtype) for name in ESTIMATORS}
    for step in range(burn_in + steps):
        rows = torch.cat([anchors[torch.randperm(anchors.numel(), generator=g)[:ANCHORS]],
                          others[torch.randperm(others.numel(), generator=g)[:contrast]]])
        batch = {k: v[rows] for k, v in data.items()}
        scores = model(batch["x"])
        values = {name: module.direct_estimate(scores, batch, None, synced=False)[0] for name, module in modules.items()}
        if step < burn_in:
            continue
        inner = objective.contrastive.inner(scores, batch)
        values["plug-in"] = objective.direct(scores, batch)
        values["oracle u = g"] = (objective.contrastive.outer_grad(oracle[inner.index], {}) * inner.value).sum(-1).mean()
        block = (step - burn_in) * blocks // steps
        for name in ESTIMATORS:
            block_sums[name][block] += flat_grad(values[name], params)
    out, norm = {}, float(exact.norm())
    for name, sums in block_sums.items():
        means = sums / (steps / blocks)
        error = float(means.var(0).sum().sqrt()) / blocks ** 0.5
        out[name] = (float((means.mean(0) - exact).norm()) / norm, error / norm)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    contrasts = [2, 20] if args.quick else [2, 5, 20, 100]
    steps = 500 if args.quick else 6000
    data = make_data()
    start = time.perf_counter()
    rows = {}
    for n in contrasts:
        rows[n] = measure(n, steps, seed=0, data=data)
        print(f"N = {n}: " + ", ".join(f"{k} {v[0]:.4f} ± {v[1]:.4f}" for k, v in rows[n].items()), file=sys.stderr,
              flush=True)
    minutes = (time.perf_counter() - start) / 60
    command = "python benchmarks/gcl_tracking.py" + (" --quick" if args.quick else "")
    lines = [
        "## Global contrastive loss: plug-in versus tracked inner means (the modified SONEX of Chen et al., NeurIPS "
        "2025, App. F.3)",
        "",
        f"Command: `{command}`. Machine: {machine()}. {minutes:.1f} min.",
        "",
        f"The contrastive term of `ContinualLearningObjective` (τ = {TAU}, n = {CLASSES - 1} × {PER_CLASS} contrast samples per "
        f"anchor) on generated data ({CLASSES} classes × {PER_CLASS} samples of {FEATURES} features, target class "
        f"{TARGET}: {PER_CLASS} anchors), a linear cosine scorer at a fixed initialization, float64. Each step draws "
        f"{ANCHORS} anchors and N contrast samples; every estimator sees the same {steps} batches (after a burn-in of "
        "30 visits per anchor). Entries: ‖mean of the estimator over the steps − ∇g_0‖ / ‖∇g_0‖ (∇g_0 exact, from all "
        "the data), ± its standard error from 10 block means. Plug-in: the gradient of the batch's mean_a f_0(ĝ_{0,a}) "
        "(no state). Tracked: `SONEX.direct_estimate`, the step SONEX takes (u_0 per anchor, weight γ; γ' = 0, since w "
        "does not move). Oracle: the same estimator with u = the exact g_{0,a}, unbiased, so its entry is the "
        "Monte-Carlo noise of this many steps: the floor under which no difference is visible.",
        "",
        "| N (contrast samples per step) | " + " | ".join(ESTIMATORS) + " |",
        "|---:|" + "---:|" * len(ESTIMATORS),
    ]
    for n, r in rows.items():
        lines.append(f"| {n} | " + " | ".join(f"{r[k][0]:.3f} ± {r[k][1]:.3f}" for k in ESTIMATORS) + " |")
    lines += [
        "",
        "With τ = 0.05 the terms e^{(s_j − s_a)/τ} are heavy-tailed, so a few contrast samples estimate each mean "
        "poorly: the plug-in's f_0(ĝ) is biased (E log(1 + nĝ) < log(1 + n E ĝ)), and its bias shrinks only as N "
        "grows. The tracked estimator replaces ĝ in ∇f_0 by u, an average over the anchor's visits: at fixed w its "
        "bias shrinks with γ. At γ = 0.8, the paper's value, u averages little and the error here is slightly above "
        "the plug-in's (the plug-in's negative correlation between ∇ĝ and 1/(1 + nĝ) partly offsets its Jensen gap); "
        "γ = 0.1 removes a third to two thirds of the error. While w moves, a small γ lags behind g(w), which the MSVR "
        "correction γ' offsets: γ trades this bias against that lag.",
    ]
    if not args.quick:
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt

            fig, ax = plt.subplots(figsize=(6, 4))
            for name, marker in zip(ESTIMATORS, "soD^"):
                ax.errorbar(contrasts, [rows[n][name][0] for n in contrasts], yerr=[rows[n][name][1] for n in contrasts],
                            marker=marker, capsize=3, label=name)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("contrast samples per step N")
            ax.set_ylabel("relative error of the mean gradient")
            ax.set_title(f"GCL gradient at fixed w ({steps} steps)")
            ax.legend()
            fig.tight_layout()
            RESULTS_DIR.mkdir(exist_ok=True)
            fig.savefig(RESULTS_DIR / "gcl_tracking.png", dpi=120)
            lines += ["", "![relative error of the mean gradient against N](gcl_tracking.png)"]
        except ImportError:
            pass
    text = "\n".join(lines)
    print(text)
    if not args.quick:
        write_result("gcl_tracking", text)


if __name__ == "__main__":
    main()
