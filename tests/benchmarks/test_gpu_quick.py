"""benchmarks/gpu.py, the prepared GPU benchmark, in its ``--quick`` mode on the CPU: every workload, both
precisions and the LibAUC rows run end to end (tiny shapes, a few steps), so the command a GPU machine runs cannot
rot between the times one is lent."""

import doctest
import math
import sys

import pytest
import torch

from builders import BENCHMARKS, import_benchmark


@pytest.fixture(scope="module")
def gpu():
    return import_benchmark("gpu")


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


@pytest.mark.slow
def test_profile_mode_writes_device_host_and_wait_tables(gpu, tmp_path, one_thread, no_downloads):
    """``--profile`` (the mode that found where the host waits for the GPU) runs on the CPU too: one table file per
    case, side and precision, each with the host-time table and the waits section."""
    gpu.main(["--quick", "--profile", "neumf", "--precision", "32-true", "--out", str(tmp_path / "x")])
    files = sorted(p.name for p in tmp_path.glob("profile_*.txt"))
    assert files == [f"profile_neumf_{case}_{side}_32-true.txt" for case in (0, 1) for side in ("fcco", "plain")]
    text = (tmp_path / "profile_neumf_0_fcco_32-true.txt").read_text()
    assert text.startswith("SONG vs listwise CE, fcco, 32-true") and "host time:" in text
    assert "aten::" in text and "host waits for the device" in text


@pytest.mark.slow
def test_ab_mode_imports_each_tree_and_tabulates_both(tmp_path, no_downloads):
    """``gpu_ab.py`` runs each tree's library in its own process (checked by the file it imported) and tabulates the
    ratios of both; here the same checkout twice, quick, on the CPU."""
    import subprocess

    root = BENCHMARKS.parent
    done = subprocess.run([sys.executable, str(BENCHMARKS / "gpu_ab.py"), str(root), str(root), "--quick",
                           "--rounds", "1", "--only", "neumf"], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| NeuMF")]
    assert len(rows) == 4  # SONG and K-SONG, fp32 and bf16
    for row in rows:
        a, b, change = (float(c) for c in row.split("|")[4:7])
        assert a > 0 and b > 0 and change == pytest.approx(b / a, rel=1e-2)
    bad = subprocess.run([sys.executable, str(BENCHMARKS / "gpu_ab.py"), str(tmp_path), str(root), "--quick"],
                         capture_output=True, text=True, cwd=tmp_path)
    assert bad.returncode != 0 and "holds no fccolit/ package" in bad.stderr


def test_host_wait_mode_loads_each_trees_state_and_tabulates(tmp_path):
    """``gpu_host_wait.py`` (run on a GPU machine to compare the state update of two revisions) on the CPU: a row per
    tree and the two step-tensor rows, every time a positive number; a folder without the library is refused."""
    host_wait = import_benchmark("gpu_host_wait")
    root = BENCHMARKS.parent
    text = host_wait.main([str(root), "--quick"])
    rows = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert len(rows) == 3 and f"`IndexedState.update` of {root}" in rows[0]
    assert all(float(c) > 0 for r in rows for c in r.split("|")[2:4])
    with pytest.raises(SystemExit, match="holds no fccolit/state.py"):
        host_wait.main([str(tmp_path), "--quick"])
