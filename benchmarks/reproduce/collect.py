"""Assemble benchmarks/REPRODUCTION.md from the per-table files in benchmarks/reproduce/results/.

    python benchmarks/reproduce/collect.py

Every reproduction script writes its own ``results/<name>.md`` (the paper's number, ours and the difference side by
side, the sweeps, the command, the seeds and the machine); this script puts them under one heading, in the order
of ``SCRIPTS`` (others after, alphabetically). ``python benchmarks/run.py --reproduce`` reruns every script first.
"""

from __future__ import annotations

import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE.parent / "REPRODUCTION.md"
SCRIPTS = ["auprc_linear", "sox_pnorm", "ranking_movielens", "ranking_letor", "pauc_range", "pauc_peer",
           "fairness_adult", "gdro", "deep_experiments"]
HEADER = """# Reproducing the papers

One section per table or figure of the five papers that fits a 2-core CPU, each produced by the command it names
(`python benchmarks/run.py --reproduce` reruns them all, then this file is assembled by
`python benchmarks/reproduce/collect.py`). Every section puts the paper's number, ours and the difference side by
side, sweeps the knobs the paper leaves open with the setting the shipped configs use marked, and says where a
claim does not reproduce and why. Tuning reads only the development data in `../shared/data/`.

Papers: Qiu, Hu, Zhong, Zhang, Yang, "Large-scale Stochastic Optimization of NDCG Surrogates for Deep Learning with
Provable Convergence", ICML 2022, arXiv:2202.12183 (SONG, K-SONG, SOLC); Wang & Yang, "Finite-Sum Coupled
Compositional Stochastic Optimization: Theory and Applications", ICML 2022, arXiv:2202.12396 (SOX); Wang, Yang,
Zhang, Yang, "Momentum Accelerates the Convergence of Stochastic AUPRC Maximization", AISTATS 2022, arXiv:2107.01173
(SOAP, MOAP, ADAP); Yao, Lin, Yang, "Large-scale Optimization of Partial AUC in a Range of False Positive Rates",
NeurIPS 2022, arXiv:2203.01505 (AGD-SBCD, SoRR); Chen, Wang, Yang, Lin, Yang, "Stochastic Momentum Methods for
Non-smooth Non-Convex Finite-Sum Coupled Compositional Optimization", NeurIPS 2025, arXiv:2506.02504 (SONEX,
ALEXR2).
"""


def main() -> None:
    files = {p.stem: p for p in (HERE / "results").glob("*.md") if not p.stem.endswith("_quick")}
    names = [n for n in SCRIPTS if n in files] + sorted(n for n in files if n not in SCRIPTS)
    # the sections link their plots relative to results/: from REPRODUCTION.md they are under reproduce/results/
    relink = lambda text: re.sub(r"\]\((?!https?:|/|reproduce/)([^)]+\.png)\)", r"](reproduce/results/\1)", text)  # noqa: E731
    parts = [HEADER] + [relink(files[n].read_text().strip()) + "\n" for n in names]
    OUT.write_text("\n".join(parts))
    print(f"{OUT.name}: {len(names)} sections ({', '.join(names)})")


if __name__ == "__main__":
    main()
