"""Recommendation data: rating readers (MovieLens, Netflix), the split protocols, the DataModules, the cache.

Fixtures are generated in the exact file formats (with the awkward cases); the real ml-latest-small ratings are
checked against the counts its README publishes when ../shared/data is present.
"""

from __future__ import annotations

import hashlib
import io
import re
from collections import defaultdict

import numpy as np
import pytest
import torch
from builders import SHARED_DATA

import fccolit.io.text as text_module
from fccolit.datamodules.movielens import MovieLensDataModule, detect_movielens
from fccolit.datamodules.netflix import NetflixDataModule
from fccolit.datasets.recommendation import build_recommendation_arrays
from fccolit.io.csr import ideal_dcg
from fccolit.io.ratings import Ratings, read_movielens_ratings, read_netflix_probe, read_netflix_ratings
from fccolit.metrics.functional import ndcg_at_k
from fccolit.metrics.ranking import FullRankingNDCGScore
from fccolit.testing import write_movielens_ratings, write_netflix_quirks, zip_bytes

ML_SMALL = SHARED_DATA / "movielens-ml-latest-small"


# ---------------------------------------------------------------------------------------------- fixtures
def _ratings(num_users=40, num_items=60, seed=0, min_count=1, max_count=25, half_stars=True):
    """(user, item, rating, time) tuples in MovieLens order (by user, then item); times tie often."""
    rng = np.random.default_rng(seed)
    rows = []
    for u in range(num_users):
        count = int(rng.integers(min_count, max_count + 1))
        for i in np.sort(rng.choice(num_items, size=count, replace=False)):
            r = (rng.integers(1, 11) / 2) if half_stars else float(rng.integers(1, 6))
            rows.append((u * 7 + 1, int(i) * 3 + 2, r, int(978300000 + rng.integers(0, 8) * 1000)))
    return rows


def _reference_split(rows, num_test, num_val, min_ratings=1):
    """Brute force of the time split: latest duplicate wins, (time, file order) per user, first rating trains."""
    latest = {}
    for order, (u, i, r, t) in enumerate(rows):
        if (u, i) not in latest or (t, order) >= (latest[(u, i)][1], latest[(u, i)][2]):
            latest[(u, i)] = (r, t, order)
    per_user = defaultdict(list)
    for (u, i), (r, t, order) in latest.items():
        per_user[u].append((t, order, i, r))
    split = {"train": {}, "val": {}, "test": {}}
    for u, entries in per_user.items():
        if len(entries) < min_ratings:
            continue
        entries.sort()
        n = len(entries)
        tests = min(num_test, n - 1)
        vals = min(num_val, n - 1 - tests)
        for k, (_, _, i, r) in enumerate(entries):
            part = "test" if k >= n - tests else "val" if k >= n - tests - vals else "train"
            split[part][(u, i)] = r
    return split


def _pairs(dm, split):
    a = dm._arrays
    indptr, items = np.asarray(a[f"{split}_indptr"]), np.asarray(a[f"{split}_items"])
    rel = np.asarray(a["pos_relevance"] if split == "train" else a[f"{split}_relevance"])
    if split == "train":
        indptr, items = np.asarray(a["pos_indptr"]), np.asarray(a["pos_items"])
    out = {}
    for u in range(indptr.size - 1):
        for k in range(indptr[u], indptr[u + 1]):
            out[(int(dm.user_ids[u]), int(dm.item_ids[items[k]]))] = float(rel[k])
    return out


def _dm(root, tmp_path, **kw):
    kw.setdefault("cache_dir", tmp_path / "cache")
    kw.setdefault("queries_per_batch", 4)
    kw.setdefault("num_negatives", 5)
    return MovieLensDataModule(root, **kw)


# ---------------------------------------------------------------------------------------------- MovieLens reader
@pytest.mark.parametrize("fmt", ["u.data", "ratings.dat", "ratings.csv"])
@pytest.mark.parametrize("eol", ["\n", "\r\n"])
def test_movielens_formats_parse_identically(tmp_path, fmt, eol):
    rows = _ratings(half_stars=False)
    path = write_movielens_ratings(tmp_path / fmt, fmt, rows, eol=eol, final_eol=(eol == "\n"))
    parsed = read_movielens_ratings(path)
    np.testing.assert_array_equal(parsed.user, [r[0] for r in rows])
    np.testing.assert_array_equal(parsed.item, [r[1] for r in rows])
    np.testing.assert_array_equal(parsed.rating, [r[2] for r in rows])
    np.testing.assert_array_equal(parsed.time, [r[3] for r in rows])
    slow = read_movielens_ratings(path, _force_slow=True)
    assert all(np.array_equal(getattr(parsed, f), getattr(slow, f)) for f in Ratings._fields)


def test_movielens_chunk_boundaries_and_blank_lines(tmp_path, monkeypatch):
    rows = _ratings(num_users=200, seed=3)
    path = write_movielens_ratings(tmp_path, "ratings.csv", rows)
    text = path.read_bytes().replace(b"\n1", b"\n\n1", 3)  # a few blank lines
    path.write_bytes(text)
    whole = read_movielens_ratings(path)
    monkeypatch.setattr(text_module, "CHUNK_BYTES", 997)  # many chunks, cut mid-line
    chunked = read_movielens_ratings(path)
    assert len(whole) == len(rows)
    assert all(np.array_equal(getattr(whole, f), getattr(chunked, f)) for f in Ratings._fields)


@pytest.mark.parametrize(
    "fmt, bad, line, message",
    [
        ("ratings.csv", "5,33,abc,978300000", 4, r"line 4: field 'rating' = 'abc' is not a number"),
        ("ratings.csv", "5,3.5,4.0,978300000", 4, r"line 4: field 'item' = '3.5' is not a non-negative integer"),
        ("ratings.csv", "5,33,-1,978300000", 4, r"line 4: field 'rating' = '-1' must be a finite number >= 0"),
        ("ratings.csv", "5,33,4.0,978300000,7", 4, r"line 4: expected 4 fields .* found 5"),
        ("ratings.dat", "5::33", 3,
         r"line 3: expected 4 fields separated by '::' .* found 2: '5::33' \(is the file truncated\?\)"),
        ("u.data", "5\t33\t4", 3, r"line 3: expected 4 fields .* found 3: .*truncated"),
        ("u.data", "x\t33\t4\t978300000", 3, r"line 3: field 'user' = 'x'"),
    ],
)
def test_movielens_bad_lines_name_file_line_field(tmp_path, fmt, bad, line, message):
    rows = _ratings(num_users=1, max_count=2, min_count=2, half_stars=False)
    path = write_movielens_ratings(tmp_path, fmt, rows, eol="\r\n")
    path.write_bytes(path.read_bytes() + bad.encode())  # truncated / malformed last line, no final newline
    with pytest.raises(ValueError, match=re.escape(str(path)) + " " + message):
        read_movielens_ratings(path)


def test_movielens_error_line_numbers_across_chunks(tmp_path, monkeypatch):
    rows = _ratings(num_users=100, seed=1)
    path = write_movielens_ratings(tmp_path, "ratings.csv", rows)
    lines = path.read_text().splitlines()
    lines[700] = "1,2,3.0"
    path.write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(text_module, "CHUNK_BYTES", 1500)
    with pytest.raises(ValueError, match=r"ratings.csv line 701: expected 4 fields"):
        read_movielens_ratings(path)


def test_movielens_header_is_checked(tmp_path):
    path = tmp_path / "ratings.csv"
    path.write_text("1,2,3.0,4\n")
    with pytest.raises(ValueError, match=r"ratings.csv line 1: expected the header 'userId,movieId,rating,timestamp'"):
        read_movielens_ratings(path)
    path.write_bytes(b"\xef\xbb\xbfuserId,movieId,rating,timestamp\r\n1,2,3.0,4\r\n")  # BOM + CRLF
    assert read_movielens_ratings(path).item.tolist() == [2]


# ---------------------------------------------------------------------------------------------- split protocols
@pytest.mark.parametrize("protocol, num_test, num_val", [("paper", 1, 1), ("libauc", 5, 5)])
def test_time_split_matches_brute_force(tmp_path, protocol, num_test, num_val):
    rows = _ratings(seed=5)
    rows += [(rows[0][0], rows[0][1], 1.5, rows[0][3] + 10**6)]  # a duplicate rating, later: it wins
    write_movielens_ratings(tmp_path / "ml", "ratings.csv", rows)
    kw = {"eval_negatives": 0} if protocol == "libauc" else {}
    dm = _dm(tmp_path / "ml", tmp_path, protocol=protocol, **kw)
    ref = _reference_split(rows, num_test, num_val)
    for split in ("train", "val", "test"):
        assert _pairs(dm, split) == ref[split], split
    assert dm.num_duplicates == 1
    assert dm.sizes == {
        "num_users": 40,
        "num_items": len({r[1] for r in rows}),
        "num_queries": 40,
        "num_pairs": len(ref["train"]),
    }
    assert dm.num_pairs == dm.sizes["num_pairs"] and dm.num_users == 40  # sizes are attributes too


def test_users_with_fewer_ratings_than_held_out(tmp_path):
    """3 ratings under 5 + 5 held out: 1 train (the first), 2 test, 0 validation; 'drop' and 'train' policies."""
    rows = [(1, 10 + k, 4.0, 100 + k) for k in range(3)] + [(2, 10 + k, 3.0, 200 + k) for k in range(12)]
    rows += [(3, 10, 5.0, 7)]  # a single rating: training only
    root = tmp_path / "ml"
    write_movielens_ratings(root, "ratings.csv", rows)
    dm = _dm(root, tmp_path, protocol="libauc", eval_negatives=3)
    counts = {s: np.diff(dm._arrays[f"{s}_indptr"]).tolist() for s in ("train", "val", "test")}
    assert counts == {"train": [1, 2, 1], "val": [0, 5, 0], "test": [2, 5, 0]}
    assert dm._arrays["pos_items"][0] == np.flatnonzero(dm.item_ids == 10)[0]  # the first rating trains
    dm.setup()
    assert len(dm.test_dataset) == 2 and len(dm.val_dataset) == 1
    drop = _dm(root, tmp_path, protocol="libauc", eval_negatives=3, short_users="drop")
    assert drop.num_users == 1 and drop.num_dropped_users == 2
    train = _dm(root, tmp_path, protocol="libauc", eval_negatives=3, short_users="train")
    assert np.diff(train._arrays["test_indptr"]).tolist() == [0, 5, 0]


def test_relevance_binary_threshold_and_ideal_dcg(tmp_path):
    rows = _ratings(seed=9)
    root = tmp_path / "ml"
    write_movielens_ratings(root, "ratings.csv", rows)
    graded = _dm(root, tmp_path, top_k=3)
    binary = _dm(root, tmp_path, relevance="binary", relevance_threshold=3.5)
    ref = _reference_split(rows, 1, 1)
    assert _pairs(binary, "train") == {k: 1.0 for k, r in ref["train"].items() if r >= 3.5}
    test_rel = {k: float(r >= 3.5) for k, r in ref["test"].items()}
    assert _pairs(binary, "test") == test_rel  # held-out items below the threshold stay, with relevance 0
    # rated-but-irrelevant training items are not positives, and are excluded from negatives and from the ranking
    assert binary.num_ratings["train"] == graded.num_ratings["train"] > binary.num_pairs
    graded.setup()
    for u in range(5):
        rels = sorted((r for (uu, _), r in ref["train"].items() if uu == graded.user_ids[u]), reverse=True)
        full = sum((2**r - 1) / np.log2(k + 2) for k, r in enumerate(rels))
        at3 = sum((2**r - 1) / np.log2(k + 2) for k, r in enumerate(rels[:3]))
        batch = graded.train_dataset.__getitems__([u])
        assert batch["ideal_dcg"][0].item() == pytest.approx(full, rel=1e-6)
        assert batch["ideal_dcg_at_k"][0].item() == pytest.approx(at3, rel=1e-6)
        assert batch["num_relevant"][0] == len(rels)
    # the ideal DCG is the NDCG normaliser of the metric: the ideal order scores 1
    y = torch.tensor([[3.0, 1.0, 2.0, 0.0]])
    assert ideal_dcg(np.array([0, 4]), np.array([3.0, 2.0, 1.0, 0.0]))[0] == pytest.approx(7 + 3 / np.log2(3) + 1 / 2)
    assert ndcg_at_k(y, y)[0].item() == pytest.approx(1.0)


def test_full_ranking_eval_batches(tmp_path):
    rows = _ratings(seed=4, min_count=3)
    root = tmp_path / "ml"
    write_movielens_ratings(root, "ratings.csv", rows)
    dm = _dm(root, tmp_path, eval_batch_size=16)
    dm.setup()
    ref = _reference_split(rows, 1, 1)
    metric = FullRankingNDCGScore(top_ks=(1, 10))
    for split, ds in (("val", dm.val_dataset), ("test", dm.test_dataset)):
        assert len(ds) == 40
        for batch in dm.val_dataloader() if split == "val" else dm.test_dataloader():
            U = batch["query"].numel()
            for r in range(U):
                raw_user = int(dm.user_ids[batch["query"][r]])
                held = {int(dm.item_ids[i]) for i in batch["heldout_items"][r].tolist() if i >= 0}
                assert held == {i for (u, i) in ref[split] if u == raw_user}
                excl = [int(dm.item_ids[i]) for i in batch["exclude_items"][r].tolist() if i >= 0]
                known = {i for (u, i) in ref["train"] if u == raw_user}
                # the other held-out split is known too: validation items in test, test items in validation
                known |= {i for (u, i) in ref["val" if split == "test" else "test"] if u == raw_user}
                assert len(excl) == len(set(excl)) and set(excl) == known
            scores = torch.randn(U, dm.num_items)
            best = batch["heldout_items"].clamp_min(0)
            scores.scatter_(1, best, 100.0)  # the held-out items on top: NDCG 1
            metric.update(scores, batch["heldout_items"], batch["heldout_relevance"], batch["exclude_items"])
    assert all(v.item() == pytest.approx(1.0) for v in metric.compute().values())


def test_libauc_sampled_candidates(tmp_path):
    rows = _ratings(num_items=60, seed=6, min_count=12, max_count=50)
    root = tmp_path / "ml"
    write_movielens_ratings(root, "ratings.csv", rows)
    dm = _dm(root, tmp_path, protocol="libauc", eval_negatives=20, eval_batch_size=8)
    dm.setup()
    rated = defaultdict(set)
    for u, i, _, _ in rows:
        rated[u].add(i)
    for loader in (dm.val_dataloader(), dm.test_dataloader()):
        for batch in loader:
            assert batch["items"].shape[1] == 5 + 20
            for r in range(batch["query"].numel()):
                user = int(dm.user_ids[batch["query"][r]])
                negatives = [int(dm.item_ids[i]) for i in batch["items"][r, 5:][batch["mask"][r, 5:]].tolist()]
                unrated = dm.num_items - len(rated[user])
                assert len(negatives) == min(20, unrated) == len(set(negatives))  # distinct
                assert not set(negatives) & rated[user]  # never rated, in any split
                assert (batch["relevance"][r, 5:] == 0).all()
                assert (batch["relevance"][r, :5][batch["mask"][r, :5]] > 0).all()
    again = _dm(root, tmp_path / "other", protocol="libauc", eval_negatives=20)
    np.testing.assert_array_equal(again._arrays["test_negatives"], dm._arrays["test_negatives"])  # fixed by the seed


# ---------------------------------------------------------------------------------------------- DataModule mechanics
def test_version_detection_and_layouts(tmp_path):
    rows = _ratings(num_users=5, half_stars=False)
    write_movielens_ratings(tmp_path / "a" / "ml-1m", "ratings.dat", rows)
    assert detect_movielens(tmp_path / "a")[0] == "ml-1m"
    write_movielens_ratings(tmp_path / "b" / "ml-10M100K", "ratings.dat", rows)
    assert detect_movielens(tmp_path / "b")[0] == "ml-10m"
    assert detect_movielens(tmp_path / "b" / "ml-10M100K")[0] == "ml-10m"
    write_movielens_ratings(tmp_path / "c", "u.data", rows)
    assert detect_movielens(tmp_path / "c")[0] == "ml-100k"
    write_movielens_ratings(tmp_path / "a" / "ml-20m", "ratings.csv", rows)
    with pytest.raises(ValueError, match="several MovieLens releases"):
        detect_movielens(tmp_path / "a")
    assert _dm(tmp_path / "a", tmp_path, version="ml-20m").ratings_file.parent.name == "ml-20m"
    missing = r"no MovieLens ratings file .* Files in .*empty: \(none\).*download=True"
    with pytest.raises(FileNotFoundError, match=missing):
        (tmp_path / "empty").mkdir()
        _dm(tmp_path / "empty", tmp_path)
    with pytest.raises(FileNotFoundError, match=r"MovieLens ml-25m not found: expected .*ml-25m/ratings.csv"):
        _dm(tmp_path / "empty", tmp_path, version="ml-25m")


def _zip_bytes(rows) -> bytes:
    body = "".join(f"{u},{i},{r},{t}\n" for u, i, r, t in rows)
    return zip_bytes({"ml-latest-small/ratings.csv": "userId,movieId,rating,timestamp\n" + body,
                      "ml-latest-small/README.txt": "readme"})


def test_zip_in_root_is_extracted_and_download_fetches_the_grouplens_zip(tmp_path, monkeypatch):
    rows = _ratings(num_users=6)
    (tmp_path / "z").mkdir()
    (tmp_path / "z" / "ml-latest-small.zip").write_bytes(_zip_bytes(rows))
    dm = _dm(tmp_path / "z", tmp_path)
    assert dm.version == "ml-latest-small" and dm.ratings_file == tmp_path / "z" / "ml-latest-small" / "ratings.csv"

    import fccolit.datamodules.movielens as ml

    requested = []

    payload = _zip_bytes(rows)  # once: a zip's bytes hold the time it was written

    def fake_urlopen(url, timeout):  # no network in tests: serve the zip (and its published MD5) from memory
        requested.append(url)
        if url.endswith(".md5"):
            return io.BytesIO(f"MD5 (ml-latest-small.zip) = {hashlib.md5(payload).hexdigest()}\n".encode())
        return io.BytesIO(payload)

    monkeypatch.setattr(ml.urllib.request, "urlopen", fake_urlopen)
    with pytest.raises(FileNotFoundError, match="download=True"):
        _dm(tmp_path / "d", tmp_path, version="ml-latest-small")
    assert requested == []  # never without download=True
    dm = _dm(tmp_path / "d", tmp_path, version="ml-latest-small", download=True)
    assert requested == ["https://files.grouplens.org/datasets/movielens/ml-latest-small.zip",
                         "https://files.grouplens.org/datasets/movielens/ml-latest-small.zip.md5"]
    assert dm.num_users == 6 and not [p for p in (tmp_path / "d").iterdir() if p.name.startswith(".ml")]


def test_cache_loads_without_parsing_and_bad_input_leaves_nothing(tmp_path, monkeypatch):
    rows = _ratings(seed=2)
    root = tmp_path / "ml"
    path = write_movielens_ratings(root, "ratings.csv", rows)
    first = _dm(root, tmp_path)
    import fccolit.datamodules.movielens as ml

    def boom(*a, **k):
        raise AssertionError("parsed again")

    monkeypatch.setattr(ml, "read_movielens_ratings", boom)
    second = _dm(root, tmp_path)  # loads the cache: no parse
    assert second.sizes == first.sizes and second.cache_key == first.cache_key
    assert isinstance(second._arrays["pos_items"], np.memmap)
    monkeypatch.undo()
    other = _dm(root, tmp_path, protocol="libauc", eval_negatives=0)  # another option: another entry
    assert other.cache_key != first.cache_key

    path.write_bytes(path.read_bytes() + b"7,9,4.0\n")  # truncated line: a new key, a parse, an error
    cache = tmp_path / "cache2"
    with pytest.raises(ValueError, match=r"ratings.csv line \d+: expected 4 fields"):
        _dm(root, tmp_path, cache_dir=cache)
    assert not cache.exists() or list(cache.iterdir()) == []  # no entry, no temporary folder


def test_training_loader_and_state_dict_resume(tmp_path):
    rows = _ratings(seed=11)
    root = tmp_path / "ml"
    write_movielens_ratings(root, "ratings.csv", rows)
    dm = _dm(root, tmp_path, queries_per_batch=8, num_positives=3, num_negatives=7, top_k=5, seed=3)
    dm.setup("fit")
    assert dm.sizes["top_k"] == 5  # lets K-SONG check that its K is the K of ideal_dcg_at_k
    batches = list(dm.train_dataloader())
    assert len(batches) == 5  # 40 users with a training item / 8
    for b in batches:
        assert set(b) == {"query", "items", "relevance", "pair_index", "mask", "num_items", "ideal_dcg",
                          "ideal_dcg_at_k", "num_relevant"}
        assert b["items"].shape == (8, 10) and b["ideal_dcg_at_k"].shape == (8,)
        assert (b["pair_index"][b["relevance"] > 0] < dm.num_pairs).all()
    fresh = _dm(root, tmp_path, queries_per_batch=8, num_positives=3, num_negatives=7, top_k=5, seed=3)
    fresh.setup("fit")
    fresh.load_state_dict({"train_sampler": {"seed": 3, "epoch": 0, "batches_consumed": 2}})
    loader = fresh.train_dataloader()
    loader.batch_sampler.set_epoch(0)
    tail = list(loader)
    assert len(tail) == 3 and all(torch.equal(x["items"], y["items"]) for x, y in zip(tail, batches[2:]))


@pytest.mark.skipif(not (ML_SMALL / "ratings.csv").is_file(), reason="shared ml-latest-small not present")
def test_real_ml_latest_small_matches_its_readme(tmp_path):
    readme = (ML_SMALL / "README.txt").read_text()
    m = re.search(
        r"contains (\d+) ratings and (\d+) tag applications across (\d+) movies\. "
        r"These data were created by (\d+) users",
        readme,
    )
    ratings, _, movies, users = (int(g) for g in m.groups())
    assert (ratings, users, movies) == (100836, 610, 9742)
    parsed = read_movielens_ratings(ML_SMALL / "ratings.csv")
    assert len(parsed) == ratings and np.unique(parsed.user).size == users
    # 9,724 movies have a rating; the README's 9,742 counts movies.csv, which also lists movies with tags only
    assert np.unique(parsed.item).size == 9724 <= movies
    assert parsed.rating.min() == 0.5 and parsed.rating.max() == 5.0
    dm = MovieLensDataModule(ML_SMALL, cache_dir=tmp_path / "cache")
    assert dm.sizes == {"num_users": 610, "num_items": 9724, "num_queries": 610, "num_pairs": ratings - 2 * 610}
    assert sum(dm.num_ratings.values()) == ratings and dm.num_duplicates == 0
    libauc = MovieLensDataModule(ML_SMALL, protocol="libauc", cache_dir=tmp_path / "cache")
    assert libauc.num_ratings == {"train": ratings - 10 * 610, "val": 3050, "test": 3050}  # every user has >= 20
    libauc.setup()
    batch = libauc.test_dataset.__getitems__(list(range(4)))
    assert batch["items"].shape == (4, 1005) and batch["mask"].all()


# ---------------------------------------------------------------------------------------------- Netflix
def test_netflix_reader_quirks(tmp_path, monkeypatch):
    rows, probe = write_netflix_quirks(tmp_path / "nf")
    files = [tmp_path / "nf" / "combined_data_1.txt", tmp_path / "nf" / "combined_data_2.txt"]
    parsed = read_netflix_ratings(files)
    np.testing.assert_array_equal(parsed.user, [r[0] for r in rows])
    np.testing.assert_array_equal(parsed.item, [r[1] for r in rows])
    np.testing.assert_array_equal(parsed.rating, [r[2] for r in rows])
    days = (np.array([r[3] for r in rows], dtype="datetime64[D]") - np.datetime64("1970-01-01")).astype(np.int64)
    np.testing.assert_array_equal(parsed.time, days)
    slow = read_netflix_ratings(files, _force_slow=True)
    assert all(np.array_equal(getattr(parsed, f), getattr(slow, f)) for f in Ratings._fields)
    monkeypatch.setattr(text_module, "CHUNK_BYTES", 50)  # blocks continue across chunks
    chunked = read_netflix_ratings(files)
    assert all(np.array_equal(getattr(parsed, f), getattr(chunked, f)) for f in Ratings._fields)
    users, items = read_netflix_probe(tmp_path / "nf" / "probe.txt")
    assert sorted(zip(users.tolist(), items.tolist())) == sorted(probe)


@pytest.mark.parametrize(
    "text, line, message",
    [
        ("1:\n5,3,2005-01-01\n6,4,2005-02-30\n", 3, "field 'Date' = '2005-02-30' is not a valid date"),
        ("5,3,2005-01-01\n", 1, "rating line '5,3,2005-01-01' before any '<MovieID>:' header"),
        ("1:\n5,3,2005-01-01\n2:\n6,4", 4,
         r"expected '<CustomerID>,<Rating>,<YYYY-MM-DD>', found '6,4' \(is the file truncated\?\)"),
        ("1:\r\n5,3.5,2005-01-01\r\n", 2, "field 'Rating' = '3.5' is not an integer"),
        ("x1:\n5,3,2005-01-01\n", 1, "movie header 'x1:' is not '<MovieID>:'"),
    ],
)
def test_netflix_bad_input(tmp_path, text, line, message):
    path = tmp_path / "combined_data_1.txt"
    path.write_bytes(text.encode())
    with pytest.raises(ValueError, match=re.escape(f"{path} line {line}: ") + message):
        read_netflix_ratings([path])


def test_netflix_datamodule_filter_and_probe(tmp_path):
    rows, probe = write_netflix_quirks(tmp_path / "nf", num_movies=16, num_users=25)
    counts = defaultdict(int)
    for c, *_ in rows:
        counts[c] += 1
    dm = NetflixDataModule(
        tmp_path / "nf", min_ratings=8, cache_dir=tmp_path / "cache", queries_per_batch=2, num_negatives=4
    )
    kept = {c for c, n in counts.items() if n >= 8}
    assert set(dm.user_ids.tolist()) == kept and dm.num_dropped_users == len(counts) - len(kept)
    assert dm.num_items == len({m for c, m, _, _ in rows if c in kept})
    ordered = [(c, m, r, np.datetime64(d).astype(np.int64)) for c, m, r, d in rows]
    ref = _reference_split(ordered, 1, 1, min_ratings=8)
    for split in ("train", "val", "test"):
        assert _pairs(dm, split) == ref[split]
    pr = NetflixDataModule(
        tmp_path / "nf", min_ratings=8, holdout="probe", cache_dir=tmp_path / "cache", queries_per_batch=2
    )
    test = set(_pairs(pr, "test"))
    assert test and test <= {p for p in probe if p[0] in kept}
    assert not test & set(_pairs(pr, "train")) and not test & set(_pairs(pr, "val"))
    with pytest.raises(FileNotFoundError, match="combined_data_1.txt"):
        NetflixDataModule(tmp_path / "nothing")


def test_build_arrays_ids_are_sorted_raw_order():
    r = Ratings(np.array([50, 7, 50, 900]), np.array([3, 3, 1, 2]), np.ones(4, np.float32), np.arange(4))
    a = build_recommendation_arrays(r, num_test=0, num_val=0)
    np.testing.assert_array_equal(a["user_raw"], [7, 50, 900])
    np.testing.assert_array_equal(a["item_raw"], [1, 2, 3])
    np.testing.assert_array_equal(a["pos_indptr"], [0, 1, 3, 4])


# ---------------------------------------------------------------------------------------------- Lightning
class _Recorder:
    """A tiny LightningModule (embedding dot products) that records the training batches it sees."""

    @staticmethod
    def build(num_users, num_items, seen):
        from lightning.pytorch import LightningModule

        class Module(LightningModule):
            def __init__(self):
                super().__init__()
                self.user = torch.nn.Embedding(num_users, 4)
                self.item = torch.nn.Embedding(num_items, 4)

            def training_step(self, batch, _):
                seen.append((batch["query"].clone(), batch["items"].clone()))
                scores = (self.user(batch["query"])[:, None, :] * self.item(batch["items"])).sum(-1)
                target = (batch["relevance"] > 0).float()
                loss = torch.nn.functional.binary_cross_entropy_with_logits(scores, target, reduction="none")
                return (loss * batch["mask"]).sum() / batch["mask"].sum()

            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.1)

        return Module()


@pytest.mark.filterwarnings("ignore:.*validation_step:UserWarning", "ignore:Be aware that when using:UserWarning",
                            "ignore:You're resuming from a checkpoint:UserWarning")
def test_lightning_resume_mid_epoch_continues_the_stream(tmp_path):
    from lightning.pytorch import Trainer
    from lightning.pytorch.callbacks import ModelCheckpoint

    rows = _ratings(seed=12)
    root = tmp_path / "ml"
    write_movielens_ratings(root, "ratings.csv", rows)

    def run(seen, ckpt_path=None, callbacks=()):
        dm = _dm(root, tmp_path, queries_per_batch=4, num_positives=2, num_negatives=3, seed=5)
        module = _Recorder.build(dm.num_users, dm.num_items, seen)
        trainer = Trainer(max_epochs=2, use_distributed_sampler=False, logger=False, enable_progress_bar=False,
                          enable_model_summary=False, num_sanity_val_steps=0, limit_val_batches=0,
                          enable_checkpointing=bool(callbacks), callbacks=list(callbacks), accelerator="cpu",
                          default_root_dir=tmp_path)
        trainer.fit(module, dm, ckpt_path=ckpt_path)

    full: list = []
    ckpt = ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=3, save_top_k=-1, filename="{step}")
    run(full, callbacks=[ckpt])
    assert len(full) == 20  # 2 epochs × ⌈40 users / 4⌉
    resumed: list = []
    run(resumed, ckpt_path=tmp_path / "ckpt" / "step=3.ckpt")
    assert len(resumed) == 17
    for (q1, i1), (q2, i2) in zip(full[3:], resumed):
        assert torch.equal(q1, q2) and torch.equal(i1, i2)
