"""benchmarks/gpu.py, the prepared GPU benchmark, in its ``--quick`` mode on the CPU: every workload, both
precisions and the LibAUC rows run end to end (tiny shapes, a few steps), so the command a GPU machine runs cannot
rot between the times one is lent."""

import doctest
import importlib
import math
import sys
from pathlib import Path

import pytest
import torch

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def gpu():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        yield importlib.import_module("gpu")
    finally:
        sys.path.remove(str(BENCHMARKS))


@pytest.mark.slow
def test_quick_mode_runs_every_workload_and_writes_the_table(gpu, tmp_path, one_thread, no_downloads):
    out = tmp_path / "gpu_cpu.md"
    gpu.main(["--quick", "--out", str(out)])
    text = out.read_text()
    assert text.startswith("## GPU:") and "python benchmarks/gpu.py --quick" in text
    rows = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line]
    ratio_rows = [r for r in rows if r.count("|") == 9 and not r.startswith("| workload")]
    # 2 image workloads × 2 cases + NeuMF × 2 + CLIP × 1, each in fp32 and bf16
    assert len(ratio_rows) == 2 * (2 + 2 + 2 + 1), ratio_rows
    for row in ratio_rows:
        ratio = float(row.split("|")[6])
        assert math.isfinite(ratio) and ratio > 0, row
    assert {"32-true", "bf16-mixed"} <= {r.split("|")[3].strip() for r in ratio_rows}
    libauc_rows = [r for r in rows if r.count("|") == 7 and not r.startswith("| workload")]
    assert len(libauc_rows) == 2 * (2 + 2)  # SOAP for each image model, SONG and K-SONG for NeuMF, both precisions


def test_ranking_batches_follow_the_ranking_schema(gpu):
    from fccolit.datamodules.synthetic_ranking import SyntheticRankingDataModule

    reference = SyntheticRankingDataModule(num_queries=30, num_items=60, ratings_per_query=(6, 12), num_positives=2,
                                           num_negatives=5, queries_per_batch=4, top_k=10)
    reference.setup("fit")
    expected = next(iter(reference.train_dataloader()))
    data = gpu.ranking_batches(30, 60, 6, queries=4, positives=2, negatives=5, count=2, top_k=10)
    batch = data.batches[0]
    assert {k: (v.dtype, v.dim()) for k, v in batch.items()} == {k: (v.dtype, v.dim()) for k, v in expected.items()}
    assert set(data.sizes) == set(reference.sizes)
    relevant = batch["pair_index"] >= 0
    assert relevant[:, :2].all() and not relevant[:, 2:].any() and (batch["relevance"][relevant] >= 1).all()
    assert int(batch["pair_index"].max()) < data.sizes["num_pairs"]
    # each query's relevant rows are its own: q · pairs_per_user + j
    assert torch.equal(batch["pair_index"][:, :2] // 6, batch["query"][:, None].expand(-1, 2))


def test_full_run_models_are_the_named_ones(gpu, no_downloads):
    from transformers import CLIPVisionConfig

    vision = CLIPVisionConfig(**gpu.clip_config(quick=False, image_size=224)["vision_config"])
    assert (vision.hidden_size, vision.num_hidden_layers, vision.num_attention_heads, vision.patch_size,
            vision.image_size) == (768, 12, 12, 32, 224)  # ViT-B/32
    densenet = gpu.densenet_backbone(quick=False)
    assert densenet.name == "densenet121" and sum(p.numel() for p in densenet.parameters()) == 6_954_881
    assert gpu.device_slug("NVIDIA H200") == "nvidia_h200"


def test_docstring_examples(gpu):
    result = doctest.testmod(gpu, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
