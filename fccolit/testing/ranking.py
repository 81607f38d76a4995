"""Small files in the real formats of the ranking data sets: MovieLens (every ratings format, release zips), the
Netflix Prize, LETOR / MSLR-WEB."""

from __future__ import annotations

import io
import zipfile
from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd

__all__ = [
    "write_large_movielens_csv", "write_letor", "write_movielens_csv", "write_movielens_ratings", "write_mslr_fold",
    "write_netflix", "write_netflix_quirks", "zip_bytes",
]


def write_movielens_ratings(root: Path, fmt: str, rows, eol: str = "\n", final_eol: bool = True) -> Path:
    """``root/<fmt>`` in a MovieLens format (``"u.data"``, ``"ratings.dat"`` or ``"ratings.csv"`` with its header) of
    ``rows``, ``(user, item, rating, timestamp)`` tuples; ``eol`` and ``final_eol`` choose the line ends."""
    root.mkdir(parents=True, exist_ok=True)
    if fmt == "u.data":
        lines = [f"{u}\t{i}\t{int(r)}\t{t}" for u, i, r, t in rows]
    elif fmt == "ratings.dat":
        lines = [f"{u}::{i}::{r:g}::{t}" for u, i, r, t in rows]
    else:
        lines = ["userId,movieId,rating,timestamp"] + [f"{u},{i},{r:.1f},{t}" for u, i, r, t in rows]
    path = root / fmt
    path.write_bytes((eol.join(lines) + (eol if final_eol else "")).encode())
    return path


def write_movielens_csv(folder: Path, num_users: int = 60, num_items: int = 120, seed: int = 0) -> Path:
    """``ratings.csv`` in the ml-20m / ml-latest format (header, ``userId,movieId,rating,timestamp``, half stars),
    15 to 40 ratings per user."""
    rng = np.random.default_rng(seed)
    rows = []
    for user in range(1, num_users + 1):
        items = np.sort(rng.choice(num_items, size=int(rng.integers(15, 41)), replace=False))
        for item in items:
            rows.append((user, int(item) * 3 + 1, rng.integers(1, 11) / 2, 978300000 + int(rng.integers(0, 10**6))))
    return write_movielens_ratings(folder, "ratings.csv", rows)


def write_large_movielens_csv(path: Path, rows: int, users: int, items: int, seed: int = 0) -> None:
    """A ``ratings.csv`` in ML-20M's format with exactly ``rows`` ratings of ``users`` users (every one with at
    least 20, lognormal activity) on ``items`` movies (Zipf-like popularity, ids drawn from ML-20M's range), half
    stars: the data of the loading and step benchmarks (millions of rows: written by pandas in chunks)."""
    rng = np.random.default_rng(seed)
    extra = rng.lognormal(mean=0.0, sigma=1.3, size=users)
    counts = 20 + np.floor(extra / extra.sum() * (rows - 20 * users)).astype(np.int64)
    counts[np.argsort(-extra)[: rows - int(counts.sum())]] += 1
    counts = np.minimum(counts, items)
    counts[np.argmin(counts)] += rows - int(counts.sum())
    popularity = 1.0 / np.arange(1, items + 1) ** 0.8
    popularity /= popularity.sum()
    user_of = np.repeat(np.arange(users, dtype=np.int64), counts)
    item_of = rng.choice(items, size=rows, p=popularity)
    for _ in range(50):  # make each user's items distinct: redraw duplicates uniformly
        key = user_of * items + item_of
        order = np.argsort(key, kind="stable")
        dup = np.zeros(rows, dtype=bool)
        dup[order[1:]] = key[order[1:]] == key[order[:-1]]
        if not dup.any():
            break
        item_of[dup] = rng.integers(0, items, size=int(dup.sum()))
    order = np.lexsort((item_of, user_of))
    user_of, item_of = user_of[order], item_of[order]
    movie_ids = np.sort(rng.choice(131_262, size=items, replace=False)) + 1
    frame = pd.DataFrame(
        {
            "userId": user_of + 1,
            "movieId": movie_ids[item_of],
            "rating": rng.integers(1, 11, size=rows) / 2,
            "timestamp": rng.integers(789_652_009, 1_427_784_002, size=rows),
        }
    )
    frame.to_csv(path, index=False, float_format="%.1f", chunksize=1_000_000)


def zip_bytes(members: dict[str, str]) -> bytes:
    """The bytes of a zip archive of ``{member path: text}`` (e.g. a MovieLens release,
    ``{"ml-latest-small/ratings.csv": ...}``), every member dated 2000-01-01 so equal arguments give equal bytes."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, text in members.items():
            z.writestr(zipfile.ZipInfo(name, date_time=(2000, 1, 1, 0, 0, 0)), text)
    return buf.getvalue()


def write_netflix(folder: Path, num_users: int = 50, num_movies: int = 80, seed: int = 0) -> Path:
    """``combined_data_1.txt`` and ``combined_data_2.txt`` in the Kaggle format: a ``<movie>:`` line, then
    ``<customer>,<rating>,<YYYY-MM-DD>`` lines."""
    rng = np.random.default_rng(seed)
    customers = rng.choice(2_649_429, size=num_users, replace=False) + 1
    blocks = []
    for movie in range(1, num_movies + 1):
        raters = rng.choice(customers, size=int(rng.integers(5, num_users // 2)), replace=False)
        lines = [f"{c},{int(rng.integers(1, 6))},2005-{int(rng.integers(1, 13)):02d}-{int(rng.integers(1, 29)):02d}"
                 for c in raters]
        blocks.append(f"{movie}:\n" + "\n".join(lines) + "\n")
    folder.mkdir(parents=True, exist_ok=True)
    half = len(blocks) // 2
    (folder / "combined_data_1.txt").write_text("".join(blocks[:half]))
    (folder / "combined_data_2.txt").write_text("".join(blocks[half:]))
    return folder


def write_netflix_quirks(root: Path, seed: int = 0, num_movies: int = 12, num_users: int = 30):
    """``combined_data_{1,2}.txt`` in the Kaggle format with the quirks: sparse ids, same-day ties, CRLF in one file, a blank line, a
    block continuing across a chunk boundary, no final newline; plus ``probe.txt`` (every fifth rating).

    Returns:
        ``(rows, probe)``: the ratings as written, ``(customer, movie, rating, date)``, and the probe pairs
        ``(customer, movie)``.
    """
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    customer = rng.choice(2_649_429, size=num_users, replace=False) + 1
    rows, blocks = [], {}
    for movie in range(1, num_movies + 1):
        lines = []
        for c in rng.choice(customer, size=int(rng.integers(3, num_users)), replace=False):
            day = f"2005-0{int(rng.integers(1, 4))}-{int(rng.integers(10, 13))}"  # few distinct days: ties
            r = int(rng.integers(1, 6))
            lines.append(f"{c},{r},{day}")
            rows.append((int(c), movie, float(r), day))
        blocks[movie] = lines
    half = num_movies // 2
    text1 = "".join(f"{m}:\r\n" + "".join(l + "\r\n" for l in blocks[m]) for m in range(1, half + 1))
    text2 = "".join(f"{m}:\n" + "\n".join(blocks[m]) + "\n" for m in range(half + 1, num_movies + 1))
    text2 = text2.replace("\n", "\n\n", 1).rstrip("\n")
    (root / "combined_data_1.txt").write_bytes(text1.encode())
    (root / "combined_data_2.txt").write_bytes(text2.encode())
    probe = [(c, m) for (c, m, _, _) in rows[::5]]
    by_movie = defaultdict(list)
    for c, m in probe:
        by_movie[m].append(c)
    (root / "probe.txt").write_text("".join(f"{m}:\n" + "".join(f"{c}\n" for c in cs) for m, cs in by_movie.items()))
    return rows, probe


def write_letor(path: Path, docs, eol: str = "\n", comments: bool = False, shuffle_queries: bool = False) -> list[str]:
    """A LETOR / SVMlight file with ``qid`` of ``docs``, ``(qid, label, {index: value})`` per document (values as
    ``%.6g``); ``comments`` ends each line with a LETOR 4.0 ``#docid`` comment, ``shuffle_queries`` splits each
    query's documents over the file. Returns the lines written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = []
    for n, (qid, label, feats) in enumerate(docs):
        line = f"{label} qid:{qid} " + " ".join(f"{j}:{v:.6g}" for j, v in sorted(feats.items()))
        if comments:
            line += f" #docid = GX{n:03d}-00-0000000 inc = 1 prob = 0.0{n}"
        lines.append(line)
    if shuffle_queries:  # a query's documents split over the file
        lines = lines[1::2] + lines[::2]
    path.write_bytes((eol.join(lines) + eol).encode())
    return lines


def write_mslr_fold(folder: Path, fold: int = 1, num_features: int = 136, seed: int = 0) -> Path:
    """``Fold<k>/{train,vali,test}.txt`` in the MSLR-WEB format: ``<label> qid:<q> 1:<v> ... 136:<v>``, labels 0-4,
    5 to 30 documents per query."""
    rng = np.random.default_rng(seed)
    base = folder / f"Fold{fold}"
    base.mkdir(parents=True, exist_ok=True)
    qid = 1
    for split, num_queries in (("train", 30), ("vali", 8), ("test", 8)):
        lines = []
        for _ in range(num_queries):
            for _ in range(int(rng.integers(5, 31))):
                values = np.abs(rng.normal(size=num_features)) * 10
                label = int(rng.choice([0, 0, 0, 1, 2, 3, 4]))
                lines.append(f"{label} qid:{qid} " + " ".join(f"{j + 1}:{v:.4g}" for j, v in enumerate(values)))
            qid += 1
        (base / f"{split}.txt").write_text("\n".join(lines) + "\n")
    return base
