"""The README's code blocks work as written."""

import re
from pathlib import Path

import torch

from fccolit.algorithms import SOX
from fccolit.datamodules import SyntheticBinaryDataModule
from fccolit.models import MLP

README = Path(__file__).resolve().parents[2] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_custom_objective_example_trains_with_an_existing_algorithm():
    namespace: dict = {}
    exec(python_blocks()[0], namespace)
    objective = namespace["SoftTopPush"]()
    data = SyntheticBinaryDataModule(num_samples=600, num_features=5, pos_fraction=0.2, batch_size=32, num_positives=8)
    data.setup("fit")
    torch.manual_seed(0)
    module = SOX(MLP(hidden=[8]), objective, data_sizes=data.sizes, ema_weight=0.5)
    opt = torch.optim.SGD(module.parameters(), lr=0.01)
    for batch in list(data.train_dataloader())[:5]:
        opt.zero_grad()
        loss, estimate = module.compositional_loss(module(batch), batch)
        loss.backward()
        opt.step()
    assert module.state.num_rows == data.sizes["num_positives"]
    assert module.state.visited().sum() > 0 and torch.isfinite(estimate).all()


def test_readme_names_the_commands_ci_runs():
    text = README.read_text()
    assert "make demo" in text and "make test" in text
    assert "make test" in (README.parent / ".ci" / "run").read_text()


def test_the_demos_length_is_one_measured_figure_everywhere():
    """The README's set-up line and the quickstart config's header state the same figure, the one
    benchmarks/results/startup.md measured (median of whole `fccolit fit --config quickstart` runs)."""
    root = README.parent
    readme = re.search(r"trains the quickstart \((\d+) s on a 2-core CPU, (\d+) s of it start-up\)", README.read_text())
    header = re.search(r"(\d+) s on a 2-core x86_64 CPU, (\d+) s of it start-up", (root / "configs" / "quickstart.yaml").read_text())
    measured = re.search(r"`fccolit fit --config quickstart` \(the demo[^|]*\| ([\d.]+) \|",
                         (root / "benchmarks" / "results" / "startup.md").read_text())
    startup = re.search(r"--print_config` \(everything before the first step\) \| ([\d.]+) \|",
                        (root / "benchmarks" / "results" / "startup.md").read_text())
    assert readme and header and measured and startup
    assert readme.groups() == header.groups()
    assert int(readme.group(1)) == round(float(measured.group(1))) and int(readme.group(2)) == round(float(startup.group(1)))
