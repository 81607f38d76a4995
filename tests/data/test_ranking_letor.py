"""Learning-to-rank data: the LETOR / LightGBM readers, allRank's normalization and MSLRDataModule.

Fixtures are generated in the exact formats (MSLR fold layout with 136 features, LETOR 4.0 ``#docid`` comments,
CRLF, queries split over the file, queries without a relevant document); the LightGBM lambdarank example in
../shared/data is checked against counts computed from its own files.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch
from builders import SHARED_DATA

import fccolit.io.text as text_module
from fccolit.datamodules.mslr import ALLRANK_NEGATIVE_FEATURES, ALLRANK_NO_LOG_FEATURES, MSLRDataModule
from fccolit.io.letor import group_by_query, parse_letor, read_lightgbm_ranking, read_query_sizes
from fccolit.metrics.ranking import NDCGScore
from fccolit.testing import write_letor

LIGHTGBM = SHARED_DATA / "letor-lightgbm-lambdarank"


def _letor_docs(num_queries, num_features, seed, empty_query=None, sparse=False):
    """(qid, label, {index: value}) per document; qids are sparse integers, lists of 1..30 documents."""
    rng = np.random.default_rng(seed)
    docs = []
    for q in range(num_queries):
        qid = 10 + 7 * q
        for _ in range(int(rng.integers(1, 30))):
            label = 0 if q == empty_query else int(rng.choice([0, 0, 0, 1, 2, 3, 4]))
            values = np.abs(rng.normal(size=num_features)) * rng.choice([1, 10, 1000], size=num_features)
            if num_features == 136:  # MSLR-like: the first 6 features of allRank's "negative" list are negative
                values[list(ALLRANK_NEGATIVE_FEATURES)[:6]] *= -1
            feats = {j + 1: float(v) for j, v in enumerate(values) if not sparse or rng.random() < 0.5}
            docs.append((qid, label, feats))
    return docs


def _dense(docs, width):
    x = np.zeros((len(docs), width), dtype=np.float32)
    for r, (_, _, feats) in enumerate(docs):
        for j, v in feats.items():
            x[r, j - 1] = np.float32(float(f"{v:.6g}"))
    return x


# ---------------------------------------------------------------------------------------------- readers
@pytest.mark.parametrize("eol", ["\n", "\r\n"])
def test_parse_letor_with_comments_and_crlf(tmp_path, eol):
    docs = _letor_docs(6, 46, seed=0, sparse=True)
    write_letor(tmp_path / "train.txt", docs, eol=eol, comments=True)
    parsed = parse_letor(tmp_path / "train.txt", num_features=46)
    np.testing.assert_array_equal(parsed.qid, [d[0] for d in docs])
    np.testing.assert_array_equal(parsed.relevance, [d[1] for d in docs])
    np.testing.assert_array_equal(parsed.features, _dense(docs, 46))
    np.testing.assert_array_equal(parsed.lines, np.arange(1, len(docs) + 1))
    slow = parse_letor(tmp_path / "train.txt", num_features=46, _force_slow=True)
    for field in ("qid", "relevance", "features", "lines"):
        np.testing.assert_array_equal(getattr(parsed, field), getattr(slow, field))


def test_parse_letor_chunks_and_string_qids(tmp_path, monkeypatch):
    docs = _letor_docs(20, 10, seed=1)
    write_letor(tmp_path / "a.txt", docs)
    whole = parse_letor(tmp_path / "a.txt")
    monkeypatch.setattr(text_module, "CHUNK_BYTES", 300)
    chunked = parse_letor(tmp_path / "a.txt")
    np.testing.assert_array_equal(whole.features, chunked.features)
    np.testing.assert_array_equal(whole.qid, chunked.qid)
    (tmp_path / "s.txt").write_text("1 qid:q-7 1:1\n0 qid:q-7 2:1\n2 qid:abc 1:3\n")
    parsed = parse_letor(tmp_path / "s.txt")
    assert parsed.qid.tolist() == [b"q-7", b"q-7", b"abc"] and parsed.features.shape == (3, 2)


def test_parse_letor_pieces_keep_rows_and_line_numbers(tmp_path, monkeypatch):
    """Parsing in small whole-line pieces (PARSE_BYTES) inside the read chunks gives the same arrays, and an error
    deep in the file still names its line."""
    docs = _letor_docs(20, 10, seed=2)
    write_letor(tmp_path / "a.txt", docs, comments=True)
    whole = parse_letor(tmp_path / "a.txt")
    monkeypatch.setattr(text_module, "CHUNK_BYTES", 1000)
    monkeypatch.setattr(text_module, "PARSE_BYTES", 170)  # several pieces per chunk, some lines longer than a piece
    pieces = parse_letor(tmp_path / "a.txt")
    for field in ("qid", "relevance", "features", "lines"):
        np.testing.assert_array_equal(getattr(whole, field), getattr(pieces, field))
    lines = (tmp_path / "a.txt").read_text().splitlines()
    lines[len(lines) - 3] = "1 qid:4 1:abc"
    (tmp_path / "b.txt").write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=rf"b.txt line {len(lines) - 2}: feature '1:abc' is not <index>:<value>"):
        parse_letor(tmp_path / "b.txt")


def test_group_by_query_first_appearance_and_non_contiguous():
    order, indptr, ids = group_by_query(np.array([30, 10, 30, 20, 10, 30]))
    assert ids.tolist() == [30, 10, 20] and indptr.tolist() == [0, 3, 5, 6]
    assert order.tolist() == [0, 2, 5, 1, 4, 3]


@pytest.mark.parametrize(
    "line, message",
    [
        ("2 1:0.5 2:1", r"line 3: expected 'qid:<query id>' as the second token, found '1:0.5'"),
        ("2 qid: 1:0.5", r"line 3: token 'qid:' has an empty query id"),
        ("-1 qid:4 1:0.5", r"line 3: relevance label '-1' is negative"),
        ("x qid:4 1:0.5", r"line 3: relevance label 'x' is not a finite number"),
        ("1 qid:4 1:abc", r"line 3: feature '1:abc' is not <index>:<value>"),
        ("1 qid:4 0:1.0", r"line 3: feature '0:1.0' has index 0 < 1"),
        ("1 qid:4 3:1 3:2", r"line 3: feature '3:2' repeats index 3"),
        ("1 qid:4 1:1 qid:5", r"line 3: 'qid:5' is a second qid"),
        ("1 qid:4 9:1", r"line 3: feature '9:1' has index 9, beyond num_features=5"),
    ],
)
def test_letor_bad_lines_name_file_line_field(tmp_path, line, message):
    path = tmp_path / "train.txt"
    path.write_bytes(b"0 qid:4 1:1 # fine\r\n1 qid:4 2:1\r\n" + line.encode())  # last line without newline
    with pytest.raises(ValueError, match=re.escape(str(path)) + " " + message):
        parse_letor(path, num_features=5)


def test_lightgbm_layout_errors(tmp_path):
    (tmp_path / "rank.train").write_text("1 1:0.5\n0 2:1\n2 1:1\n")
    (tmp_path / "rank.train.query").write_text("2\n2\n")
    mismatch = r"rank.train.query: the 2 group sizes add up to 4 documents, but .*rank.train holds 3"
    with pytest.raises(ValueError, match=mismatch):
        read_lightgbm_ranking(tmp_path / "rank.train")
    (tmp_path / "rank.train.query").write_text("2\n\nx\n")
    with pytest.raises(ValueError, match=r"rank.train.query line 3: group size 'x' is not a positive integer"):
        read_query_sizes(tmp_path / "rank.train.query")
    (tmp_path / "rank.train.query").write_text("2\n1\n")
    parsed = read_lightgbm_ranking(tmp_path / "rank.train")
    assert parsed.qid.tolist() == [0, 0, 1] and parsed.features.shape == (3, 2)


@pytest.mark.skipif(not (LIGHTGBM / "rank.train").is_file(), reason="shared LightGBM lambdarank example not present")
def test_real_lightgbm_lambdarank_counts(tmp_path):
    for name, (queries, documents) in {"rank.train": (201, 3005), "rank.test": (50, 768)}.items():
        lines = [l for l in (LIGHTGBM / name).read_text().splitlines() if l.strip()]
        sizes = [int(l) for l in (LIGHTGBM / f"{name}.query").read_text().split()]
        assert (len(sizes), sum(sizes), len(lines)) == (queries, documents, documents)  # the files agree
        parsed = read_lightgbm_ranking(LIGHTGBM / name)
        assert parsed.features.shape == (documents, 300) and np.unique(parsed.qid).size == queries
        labels = np.array([float(l.split()[0]) for l in lines])
        np.testing.assert_array_equal(parsed.relevance, labels)
    dm = MSLRDataModule(LIGHTGBM, normalize="standard", cache_dir=tmp_path / "cache")
    assert dm.layout == "lightgbm" and dm.val_is_test
    relevant_docs = int((read_lightgbm_ranking(LIGHTGBM / "rank.train").relevance > 0).sum())
    assert dm.sizes == {"num_queries": 201, "num_features": 300, "num_pairs": relevant_docs}
    assert dm.num_documents == {"train": 3005, "val": 768, "test": 768}
    sizes = np.array([int(l) for l in (LIGHTGBM / "rank.train.query").read_text().split()])
    groups = np.split(read_lightgbm_ranking(LIGHTGBM / "rank.train").relevance, np.cumsum(sizes)[:-1])
    assert dm.empty_queries["train"] == sum(int((g == 0).all()) for g in groups)
    dm.setup()
    batch = next(iter(dm.test_dataloader()))
    assert batch["features"].shape[0] == 50 and int(batch["mask"].sum()) == 768  # all of it in one batch


# ---------------------------------------------------------------------------------------------- MSLRDataModule
def _mslr_fold(root: Path, seed=0, eol="\n"):
    docs = {
        "train": _letor_docs(12, 136, seed, empty_query=3),
        "vali": _letor_docs(5, 136, seed + 1, empty_query=0),
        "test": _letor_docs(6, 136, seed + 2),
    }
    for split, d in docs.items():
        write_letor(root / "Fold2" / f"{split}.txt", d, eol=eol, shuffle_queries=(split == "train"))
    return docs


def _allrank_reference(docs):
    """allRank's normalize_features.py in float64 on the same float32 inputs (independent of the module)."""
    xs = {s: _dense(d, 136).astype(np.float64) for s, d in docs.items()}
    out = {s: np.zeros_like(x) for s, x in xs.items()}
    for i in range(136):
        cols = {s: x[:, i].copy() for s, x in xs.items()}
        if i in ALLRANK_NEGATIVE_FEATURES:
            cols = {s: -c for s, c in cols.items()}
        if i not in ALLRANK_NO_LOG_FEATURES and all((c >= 0).all() for c in cols.values()):
            cols = {s: np.log(c + 0.01) for s, c in cols.items()}
        mean, std = cols["train"].mean(), cols["train"].std()
        for s in cols:
            out[s][:, i] = (cols[s] - mean) / (std + 1e-6)
    return out


def test_mslr_fold_allrank_normalization_and_grouping(tmp_path):
    docs = _mslr_fold(tmp_path / "web30k")
    dm = MSLRDataModule(tmp_path / "web30k", fold=2, cache_dir=tmp_path / "cache", queries_per_batch=4, slate_length=16)
    assert dm.layout == "fold" and not dm.val_is_test
    train = docs["train"]
    relevant = sum(1 for d in train if d[1] > 0)
    assert dm.sizes == {"num_queries": 12, "num_features": 136, "num_pairs": relevant}
    assert dm.empty_queries == {"train": 1, "val": 1, "test": 0}
    ref = _allrank_reference(docs)
    for split, name in (("train", "train"), ("val", "vali"), ("test", "test")):
        qids = np.array([d[0] for d in docs[name]])
        if name == "train":  # the file interleaves the queries' documents: grouped back, first appearance first
            order = np.r_[1 : len(docs[name]) : 2, 0 : len(docs[name]) : 2]
        else:
            order = np.arange(len(docs[name]))
        qids_file = qids[order]
        perm, indptr, ids = group_by_query(qids_file)
        np.testing.assert_array_equal(dm.query_ids(split), ids)
        np.testing.assert_array_equal(dm._split(split, "indptr"), indptr)
        np.testing.assert_allclose(dm._split(split, "features"), ref[name][order][perm], rtol=1e-5, atol=1e-5)
        labels = np.array([d[1] for d in docs[name]], dtype=np.float32)[order][perm]
        np.testing.assert_array_equal(dm._split(split, "relevance"), labels)
    # logged: all but the no-log list and the 7 listed "negative" features that are positive here (negated: < 0)
    assert dm._arrays["norm_log"].sum() == 136 - len(ALLRANK_NO_LOG_FEATURES) - (len(ALLRANK_NEGATIVE_FEATURES) - 6)


def test_mslr_batches_and_empty_query_policy(tmp_path):
    _mslr_fold(tmp_path / "web30k", seed=3, eol="\r\n")
    dm = MSLRDataModule(tmp_path / "web30k", fold=2, cache_dir=tmp_path / "cache", queries_per_batch=4,
                        slate_length=8, num_positives=2, top_k=3, eval_batch_size=2)
    dm.setup("fit")
    indptr = dm._arrays["train_indptr"]
    assert 3 not in dm.eligible_queries.tolist() and len(dm.eligible_queries) == 11
    batches = list(dm.train_dataloader())
    assert len(batches) == 3  # ⌈11 / 4⌉
    for b in batches:
        assert b["features"].shape == (4, 8, 136) and b["relevance"].shape == (4, 8)
        lengths = torch.from_numpy(np.diff(indptr))[b["query"]]
        assert torch.equal(b["num_items"], lengths.float())
        assert torch.equal(b["mask"].sum(1), lengths.clamp(max=8))
        assert ((b["pair_index"] >= 0) == (b["relevance"] > 0)).all()
        assert (b["ideal_dcg_at_k"] <= b["ideal_dcg"] + 1e-5).all() and (b["ideal_dcg_at_k"] > 0).all()
    metric = NDCGScore(top_k=5)
    seen = 0
    for batch in dm.val_dataloader():
        seen += batch["query"].numel()
        metric.update(batch["relevance"].double(), batch["relevance"], batch["mask"])  # ideal order
        assert batch["features"].shape[1] == int(batch["mask"].sum(1).max())
    empty = dm.empty_queries["val"]
    assert seen == 5 and empty >= 1  # query 0 of the validation file has no relevant document
    assert metric.compute().item() == pytest.approx((5 - empty) / 5)  # empty queries score 0 (empty="zero")
    dropped = MSLRDataModule(tmp_path / "web30k", fold=2, cache_dir=tmp_path / "cache", empty_queries="drop")
    dropped.setup()
    assert len(dropped.val_dataset) == 5 - empty and len(dropped.test_dataset) == 6 - dm.empty_queries["test"]


def test_mslr_options_errors_and_cache(tmp_path, monkeypatch):
    _mslr_fold(tmp_path / "web30k")
    missing = r"no learning-to-rank data .*Fold1/train.txt.*Files in .*web30k: Fold2"
    with pytest.raises(FileNotFoundError, match=missing):
        MSLRDataModule(tmp_path / "web30k", fold=1, cache_dir=tmp_path / "cache")
    small = tmp_path / "small"
    write_letor(small / "train.txt", _letor_docs(4, 10, 0))
    write_letor(small / "test.txt", _letor_docs(3, 10, 1))
    with pytest.raises(ValueError, match="allRank's MSLR feature lists, which need 136 features, but the data has 10"):
        MSLRDataModule(small, cache_dir=tmp_path / "c1")
    dm = MSLRDataModule(small, normalize=None, cache_dir=tmp_path / "c1")
    assert dm.layout == "flat" and dm.val_is_test and dm.num_features == 10
    x = dm._split("train", "features")
    own = MSLRDataModule(small, no_log_features=[], negative_features=[1], cache_dir=tmp_path / "c1")
    assert own._arrays["norm_negate"].tolist() == [False, True] + [False] * 8
    np.testing.assert_allclose(np.asarray(own._split("train", "features")).mean(0), 0, atol=1e-5)
    assert np.asarray(x).min() >= 0  # raw features kept with normalize=None

    import fccolit.datamodules.mslr as mslr

    monkeypatch.setattr(mslr, "parse_letor", lambda *a, **k: (_ for _ in ()).throw(AssertionError("parsed again")))
    again = MSLRDataModule(small, normalize=None, cache_dir=tmp_path / "c1")  # cached: no parse
    np.testing.assert_array_equal(again._split("train", "features"), x)
    monkeypatch.undo()

    bad = tmp_path / "bad"
    write_letor(bad / "train.txt", _letor_docs(3, 5, 0))
    with open(bad / "train.txt", "a") as f:
        f.write("1 qid:9 1:0.5 2:oops\n")
    write_letor(bad / "test.txt", _letor_docs(2, 5, 1))
    with pytest.raises(ValueError, match=r"train.txt line \d+: feature '2:oops' is not <index>:<value>"):
        MSLRDataModule(bad, normalize=None, cache_dir=tmp_path / "c2")
    assert not (tmp_path / "c2").exists() or list((tmp_path / "c2").iterdir()) == []


def test_yahoo_layout_widths_differ_between_splits(tmp_path):
    """Yahoo writes only the defined features: the splits' widest indices differ; they are padded to the widest."""
    root = tmp_path / "ltrc_yahoo"
    root.mkdir()
    (root / "set1.train.txt").write_text("2 qid:1 1:0.5 3:0.25\n0 qid:1 2:1\n1 qid:2 1:0.75\n")
    (root / "set1.valid.txt").write_text("1 qid:5 7:0.5\n0 qid:5 1:1\n")
    (root / "set1.test.txt").write_text("0 qid:9 2:0.5\n3 qid:9 1:1\n")
    dm = MSLRDataModule(root, normalize=None, cache_dir=tmp_path / "cache", queries_per_batch=2, slate_length=4)
    assert dm.layout == "yahoo" and dm.num_features == 7 and dm.num_queries == 2 and dm.num_pairs == 2
    np.testing.assert_array_equal(dm._split("train", "features")[:, 3:], 0)
    assert dm._split("val", "features")[0, 6] == np.float32(0.5)
    wide = MSLRDataModule(root, normalize=None, num_features=700, cache_dir=tmp_path / "cache")
    assert wide.num_features == 700
    with pytest.raises(FileNotFoundError, match=r"set2.train.txt"):
        MSLRDataModule(root, yahoo_set=2, normalize=None, cache_dir=tmp_path / "cache")
