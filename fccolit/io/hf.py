"""Reading Hugging Face ``datasets`` sources for :mod:`fccolit.datamodules.hf`: files (Parquet, Arrow, CSV, JSON),
``save_to_disk`` folders, in-memory ``Dataset`` / ``DatasetDict`` objects or Hub names, their named splits, and
whole columns as numpy.

Caching and memory mapping are ``datasets``' own (no second cache), with one change: ``datasets`` keys a local data
file by its path and modification time, so an edit that keeps both (a ``touch -r``, a copy with ``cp -p``, a
restore from a backup) served the old rows. Here each source is converted in a folder of ``cache_dir`` named by
the SHA-256 of its data files' whole content (:func:`content_cache_dir`, the key of :mod:`fccolit.io.cache`), so
an edited file is always converted again. Hashing reads every byte once per load: 0.075 s for a 100 MB Parquet
file (2-core AMD EPYC with SHA instructions, file in the page cache), so a load from the cache takes 0.085 s
instead of ``datasets``' 0.011 s; the first conversion of that file took 0.75 s.

Every local data file is checked before ``datasets`` reads it (:func:`check_data_file`: an empty or header-only
file, a file that is not Parquet, a link loop or device), and every column that becomes model input after it
(:func:`check_columns`: missing, non-finite or ragged values, relevance grades outside 0..MAX_RELEVANCE): the
errors name the file, the row and the column, where ``datasets`` or a first training step said neither."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from fccolit.io.cache import cache_key
from fccolit.io.paths import data_file_problem

__all__ = [
    "load_hf_dataset", "read_tables", "named_splits", "require_columns", "check_columns", "check_data_file",
    "content_cache_dir", "column", "feature_width", "describe", "as_list",
]

#: split names looked for when ``val_split`` / ``test_split`` is None
SPLIT_NAMES = {"val": ("validation", "valid", "val", "dev"), "test": ("test",)}
#: file suffix → ``datasets`` builder
FILE_BUILDERS = {".parquet": "parquet", ".arrow": "arrow", ".csv": "csv", ".json": "json", ".jsonl": "json"}
#: the folder of ``cache_dir`` holding one ``datasets`` cache per content key
CONTENT_FOLDER = "fccolit-by-content"


def load_hf_dataset(source: Any, config_name: str | None = None, cache_dir: str | os.PathLike | None = None):
    """A ``datasets.DatasetDict`` from ``source``:

    * a ``datasets.Dataset`` (becomes the ``train`` split) or ``DatasetDict``: used as it is;
    * a folder written by ``save_to_disk``: ``datasets.load_from_disk`` (memory-mapped, nothing converted);
    * a data file (``.parquet``, ``.arrow``, ``.csv``, ``.json``, ``.jsonl``; the ``train`` split) or a folder of
      them (splits from the file names, e.g. ``train.parquet`` + ``test.parquet``): ``datasets.load_dataset``,
      converted to Arrow once in ``cache_dir`` (None: ``datasets``' cache), in a folder keyed by the files' content
      (:func:`content_cache_dir`), each file checked first (:func:`check_data_file`);
    * anything else: a Hub name, ``datasets.load_dataset(source, config_name)`` (needs the network, or the Hub
      cache with ``HF_DATASETS_OFFLINE=1``).

    Raises:
        FileNotFoundError: ``source`` looks like a path (it has a data-file suffix or starts with ``.`` or ``/``) but
            nothing is there.
        ValueError: a file with another suffix; a path that is there but no file or folder (a link loop, a device);
            a data file that cannot be read or holds no rows; a Hub name that cannot be loaded (the message keeps
            the cause).
    """
    return _load(source, config_name, cache_dir)[0]


def _load(source: Any, config_name: str | None, cache_dir: str | os.PathLike | None) -> tuple[Any, dict[str, list[Path]]]:
    """:func:`load_hf_dataset`, and the local data files of each split (empty for other sources)."""
    import datasets

    if isinstance(source, datasets.DatasetDict):
        return source, {}
    if isinstance(source, datasets.Dataset):
        return datasets.DatasetDict({"train": source}), {}
    path = Path(os.fspath(source)).expanduser()
    if path.is_dir() and ((path / "dataset_dict.json").is_file() or (path / "state.json").is_file()):
        loaded = datasets.load_from_disk(str(path))
        return (loaded if isinstance(loaded, datasets.DatasetDict) else datasets.DatasetDict({"train": loaded})), {}
    problem = data_file_problem(path)
    if problem is not None and not path.is_dir():
        raise ValueError(f"{path} {problem}: give the data file or folder itself, or a link to it")
    if path.is_file() or path.is_dir():
        builder = None
        if path.is_file():
            builder = FILE_BUILDERS.get(path.suffix.lower())
            if builder is None:
                raise ValueError(f"{path}: unknown data file type {path.suffix!r}; use one of {sorted(FILE_BUILDERS)}")
        files = _data_files(path)
        for listed in files.values():
            for file in listed:
                check_data_file(file)
        cache = content_cache_dir(path, files, cache_dir)
        try:
            if builder is not None:
                loaded = datasets.load_dataset(builder, data_files=str(path), cache_dir=str(cache))
            else:
                loaded = datasets.load_dataset(str(path), cache_dir=str(cache))
        except Exception as error:  # datasets' own report names no file and runs over several lines
            kind = f"{builder.upper()} data" if builder is not None else "a folder of data files"
            raise ValueError(f"{path}: datasets could not read it as {kind} ({_root_cause(error)}); check the file "
                             "(or write it again)") from error
        for split, table in loaded.items():
            if len(table) == 0:
                names = ", ".join(str(f) for f in files.get(str(split), [])) or str(path)
                raise ValueError(f"{names}: the {split} split holds no rows; give it rows, or leave the file out")
        return loaded, files
    text = os.fspath(source)
    if path.suffix.lower() in FILE_BUILDERS or text.startswith((".", "/", "~")):
        raise FileNotFoundError(f"no data file or folder at {path}")
    try:
        return datasets.load_dataset(text, config_name, cache_dir=None if cache_dir is None else str(cache_dir)), {}
    except Exception as error:  # offline, unknown name, private repository ...: say which source failed
        raise ValueError(
            f"{text!r} is neither a local file or folder nor a loadable Hub data set ({type(error).__name__}: {error})"
        ) from error


def _root_cause(error: BaseException) -> str:
    """``Type: first line of the message`` of the innermost cause of ``error``."""
    while (error.__cause__ or error.__context__) is not None:
        error = error.__cause__ or error.__context__
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}".rstrip(": ")


def _data_files(path: Path) -> dict[str, list[Path]]:
    """The local files ``datasets`` reads for the data file or folder ``path``, per split name (a folder's by
    ``datasets``' own resolution: its split name patterns, a README's ``configs``)."""
    if path.is_file():
        return {"train": [path]}
    import datasets

    with tempfile.TemporaryDirectory() as scratch:  # the builder writes a lock file into its cache folder
        try:
            builder = datasets.load_dataset_builder(str(path), cache_dir=scratch)
        except Exception as error:
            raise ValueError(f"{path}: no data files datasets can read in this folder ({_root_cause(error)})") from error
    listed = builder.config.data_files or {}
    files = {str(split): [Path(f) for f in names] for split, names in listed.items()}
    if not all(f.exists() for names in files.values() for f in names):  # inside archives: hash the whole folder
        files = {"": sorted(p for p in path.rglob("*") if p.is_file())}
    return files


def content_cache_dir(path: Path, files: dict[str, list[Path]], cache_dir: str | os.PathLike | None) -> Path:
    """The ``datasets`` cache folder of the source ``path``: ``<cache_dir>/fccolit-by-content/<name>-<key>``, the key
    (:func:`fccolit.io.cache.cache_key`) hashing the whole content of every data file (``files``), their names
    relative to ``path`` and their splits. ``datasets`` keys its conversions inside that folder by path and
    modification time as usual, which can no longer serve other content. ``cache_dir`` None: ``datasets``' cache
    (``datasets.config.HF_DATASETS_CACHE``)."""
    import datasets

    root = Path(cache_dir).expanduser() if cache_dir is not None else Path(datasets.config.HF_DATASETS_CACHE)
    ordered = [(split, f) for split in sorted(files) for f in files[split]]
    base = path if path.is_dir() else path.parent
    names = [[split, os.path.relpath(f, base)] for split, f in ordered]
    key = cache_key([f for _, f in ordered], {"reader": "datasets", "files": names}, prefix=path.name)
    return root / CONTENT_FOLDER / key


def check_data_file(path: str | os.PathLike) -> None:
    """Raise ``ValueError`` naming ``path`` when ``datasets`` cannot read it as data rows: a link loop, a device or
    a folder (:func:`~fccolit.io.paths.data_file_problem`), an empty file, a CSV with a header and no row, a
    Parquet file that is not Parquet (or is damaged) or holds no rows. Reads the Parquet footer, or the first lines
    of a text file; other problems surface when ``datasets`` reads the file (:func:`load_hf_dataset` names the file
    then too)."""
    path = Path(path)
    problem = data_file_problem(path)
    if problem is not None:
        raise ValueError(f"data file {path} {problem}: give the file itself, or a link to it")
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            metadata = pq.read_metadata(path)
        except Exception as error:
            raise ValueError(
                f"{path}: not a Parquet file, or a damaged one ({_root_cause(error)}); write it again (e.g. "
                "pandas.DataFrame.to_parquet)"
            ) from error
        if metadata.num_rows == 0:
            raise ValueError(f"{path}: the Parquet file holds no rows (only its columns {metadata.schema.names}); "
                             "write the rows, or leave the file out")
    elif suffix in (".csv", ".json", ".jsonl"):
        lines = 0
        with open(path, "rb") as f:
            for line in f:
                if line.strip():
                    lines += 1
                    if lines == 2:
                        break
        if lines == 0:
            raise ValueError(f"{path}: the file is empty; write the rows, or leave the file out")
        if lines == 1 and suffix == ".csv":
            raise ValueError(f"{path}: the CSV file has a header line and no rows; write the rows, or leave the file out")


def describe(source: Any) -> str:
    """A short name of ``source`` for error messages: the path or Hub name, or ``"the given Dataset"``."""
    return repr(os.fspath(source)) if isinstance(source, (str, os.PathLike)) else f"the given {type(source).__name__}"


def require_columns(table: Any, columns: Sequence[str], where: str) -> None:
    """Raise ``ValueError`` naming the first of ``columns`` that ``table`` lacks, the columns it has, and any column
    with missing (null) values (and the first row holding one)."""
    for name in columns:
        if name not in table.column_names:
            raise ValueError(f"{where}: no column {name!r}; the columns are {table.column_names}")
        chunked = table.data.column(name)
        if chunked.null_count:
            bad = _rows_of(table, np.concatenate([c.is_null().to_numpy(zero_copy_only=False) for c in chunked.chunks]))
            if bad.size:
                raise ValueError(
                    f"{where}: column {name!r} has {bad.size} missing values, the first in row {bad[0]}; fill or "
                    "drop those rows first (datasets.Dataset.map / filter)"
                )


def _rows_of(table: Any, bad: np.ndarray) -> np.ndarray:
    """The rows of ``table`` (positions in the Dataset, after any ``select``) whose Arrow row is marked in the
    ``[N_arrow]`` bool mask ``bad``, in increasing order."""
    indices = getattr(table, "_indices", None)
    if indices is None:
        return np.flatnonzero(bad)
    arrow_rows = indices.column(0).to_numpy()
    return np.flatnonzero(bad[arrow_rows])


def _leaves(array: Any) -> tuple[Any, Any]:
    """``(leaf values, parent rows)`` of an Arrow array: the array itself and None for a flat one, else its list
    values flattened to the innermost level and, for each, the row of ``array`` holding it (numpy)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    rows = None
    while pa.types.is_list(array.type) or pa.types.is_large_list(array.type) or pa.types.is_fixed_size_list(array.type):
        parents = pc.list_parent_indices(array).to_numpy()
        rows = parents if rows is None else rows[parents]
        array = array.flatten()
    return array, rows


def _nonfinite_mask(chunked: Any) -> np.ndarray | None:
    """``[N_arrow]`` bool: the rows of a numeric (or list of numeric) column holding a NaN, an infinity or a missing
    value inside a list; None when there is none (the common case costs one ``is_finite`` pass, no mask)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    masks, found = [], False
    for chunk in chunked.chunks:
        values, rows = _leaves(chunk)
        floating = pa.types.is_floating(values.type)
        if not (floating or pa.types.is_integer(values.type) or pa.types.is_boolean(values.type)):
            return None  # not numbers: column() and the model's input check say what they are
        bad = None
        if (floating and not pc.all(pc.is_finite(values)).as_py()) or (rows is not None and values.null_count):
            leaf = values.is_null().to_numpy(zero_copy_only=False)
            if floating:
                leaf |= ~pc.fill_null(pc.is_finite(values), True).to_numpy(zero_copy_only=False)
            bad = np.zeros(len(chunk), dtype=bool)
            bad[leaf if rows is None else rows[leaf]] = True
            found = True
        masks.append(bad if bad is not None else np.zeros(len(chunk), dtype=bool))
    return np.concatenate(masks) if found else None


def _length_mask(chunked: Any, width: int) -> np.ndarray | None:
    """``[N_arrow]`` bool: the rows of a variable-length list column whose list does not hold ``width`` values;
    None for another column type or when every row does."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not (pa.types.is_list(chunked.type) or pa.types.is_large_list(chunked.type)):
        return None
    lengths = np.concatenate([pc.fill_null(pc.list_value_length(c), -1).to_numpy(zero_copy_only=False)
                              for c in chunked.chunks]) if chunked.num_chunks else np.zeros(0, np.int64)
    bad = lengths != width
    return bad if bad.any() else None


def _first_nonfinite(value: Any) -> str:
    """What is wrong with one row's cell: ``"nan"`` / ``"inf"``, ``"value k of its list is nan"``, or ``"... is
    missing (null)"``."""
    def text(v: Any) -> str:
        return "missing (null)" if v is None else f"{float(v)!r}"

    if not isinstance(value, (list, tuple)):
        return f"{text(value)}, not a finite number"
    if value and isinstance(value[0], (list, tuple)):  # a list of lists: name the cell only
        return "a value of its lists is not a finite number"
    for k, v in enumerate(value):
        if v is None or not np.isfinite(float(v)):
            return f"value {k} of its list is {text(v)}, not a finite number"
    return "not a finite number"


def _rows(count: int) -> str:
    return f"{count:,} row" + ("" if count == 1 else "s")


def check_columns(
    tables: dict, origins: dict[str, str], finite: Sequence[str] = (), same_length: Sequence[str] = (),
    grades: str | None = None,
) -> None:
    """Raise ``ValueError`` naming the split's file (``origins[split]``), the row and the column of the first bad
    value of the splits ``tables`` (``{split: Dataset or None}``, before any rows are held out):

    * ``finite``: columns of numbers or lists of numbers (model inputs, ratings): a NaN, an infinity, or a
      missing value inside a list (a training step would turn it into a NaN loss, blamed on the learning rate);
    * ``finite`` and ``same_length``: a list column whose rows do not all hold as many values as the training
      split's first row (every batch stacks the rows into one ``[B, D]`` tensor);
    * ``grades``: a relevance column: integers 0..:data:`~fccolit.datasets.ranking.MAX_RELEVANCE` (the gain
      2^y − 1 overflows float32 from y = 128 on, and is inexact from y = 25 on).

    One vectorized pass per column (Arrow compute, no copy of the table)."""
    from fccolit.datasets.ranking import MAX_RELEVANCE

    import pyarrow as pa

    widths: dict[str, int] = {}
    train = tables["train"]
    for name in dict.fromkeys([*finite, *same_length]):
        kind = train.data.column(name).type
        if not (pa.types.is_list(kind) or pa.types.is_large_list(kind)):
            continue  # scalars, or fixed-size lists: one length by their type
        first = column(train.select(range(min(len(train), 1))), name)
        if first.ndim == 2:
            widths[name] = int(first.shape[1])
    for split, table in tables.items():
        if table is None:
            continue
        where = origins[split]
        for name in dict.fromkeys([*finite, *same_length]):
            chunked = table.data.column(name)
            if name in widths:
                bad = _length_mask(chunked, widths[name])
                rows = _rows_of(table, bad) if bad is not None else np.zeros(0, np.int64)
                if rows.size:
                    cell = table[int(rows[0])][name]
                    size = "no list" if cell is None else f"a list of {len(cell)}"
                    raise ValueError(
                        f"{where} row {rows[0]}, column {name!r}: {size} where the first row of the training split "
                        f"holds {widths[name]}; every row's list needs the same length (pad or drop the "
                        f"{_rows(rows.size)} of other lengths)"
                    )
            if name not in finite:
                continue
            bad = _nonfinite_mask(chunked)
            rows = _rows_of(table, bad) if bad is not None else np.zeros(0, np.int64)
            if rows.size:
                raise ValueError(
                    f"{where} row {rows[0]}, column {name!r}: {_first_nonfinite(table[int(rows[0])][name])} "
                    f"(NaN, infinite or missing values in {_rows(rows.size)} of {len(table):,}); model inputs must be "
                    "finite: fix or drop those rows (e.g. datasets.Dataset.filter)"
                )
        if grades is not None:
            values = column(table, grades)
            try:
                numbers = values.astype(np.float64)
            except (TypeError, ValueError):
                raise ValueError(f"{where}, column {grades!r}: relevance labels must be numbers, got {values.dtype} "
                                 f"values such as {values[:3].tolist()}") from None
            with np.errstate(invalid="ignore"):
                bad = ~np.isfinite(numbers) | (numbers < 0) | (numbers > MAX_RELEVANCE) | (numbers != np.round(numbers))
            if bad.any():
                row = int(np.flatnonzero(bad)[0])
                raise ValueError(
                    f"{where} row {row}, column {grades!r}: relevance {values[row]} is not a grade; relevance labels "
                    f"must be finite and >= 0 integers up to {MAX_RELEVANCE} (the gain 2^y - 1 is exact in float32 up "
                    f"to y = {MAX_RELEVANCE} and overflows from 128 on; {int(bad.sum()):,} of the {bad.size:,} labels "
                    "are not): map the labels to grades first (datasets.Dataset.map)"
                )


def column(table: Any, name: str) -> np.ndarray:
    """The whole column ``name`` of ``table`` as numpy (``[N]``, or ``[N, K]`` for a fixed-length list column)."""
    return np.asarray(table.with_format("numpy", columns=[name])[:][name])  # [:]: one batch read, not row by row


def named_splits(tables: Any, source: Any, train_split: str, val_split: str | None, test_split: str | None) -> dict:
    """``{"train": table, "val": table or None, "test": table or None}`` from the split names of ``tables``: the
    names given, and for an evaluation split given as None the first of :data:`SPLIT_NAMES` present and not used
    by another role (None: held out later)."""
    where = describe(source)
    if train_split not in tables:
        raise ValueError(f"{where}: no split {train_split!r} (train_split); the splits are {list(tables)}")
    given = {"val": val_split, "test": test_split}
    for role, name in given.items():
        if name is not None and name not in tables:
            raise ValueError(f"{where}: no split {name!r} ({role}_split); the splits are {list(tables)}")
    used = {train_split, *(n for n in given.values() if n is not None)}
    names = {role: name if name is not None else next((n for n in SPLIT_NAMES[role] if n not in used and n in tables), None)
             for role, name in given.items()}
    return {"train": tables[train_split], **{role: None if n is None else tables[n] for role, n in names.items()}}


def read_tables(
    dataset: Any, config_name: str | None, cache_dir: Any, train_split: str, val_split: str | None,
    test_split: str | None, columns: Sequence[str], finite: Sequence[str] = (), same_length: Sequence[str] = (),
    grades: str | None = None,
) -> tuple[dict, str, dict[str, str]]:
    """The named splits of ``dataset`` (:func:`named_splits`; an absent evaluation split is None), each checked
    to hold ``columns`` without missing values and, by :func:`check_columns`, ``finite`` / ``same_length`` /
    ``grades`` columns without bad values; the source's name for error messages; and how an error names each
    present split's rows (its file, when it has one)."""
    where = describe(dataset)
    loaded, files = _load(dataset, config_name, cache_dir)
    tables = named_splits(loaded, dataset, train_split, val_split, test_split)
    origins = {}
    for split, table in tables.items():
        if table is not None:
            require_columns(table, columns, f"{where} ({split} split)")
            name = next((str(n) for n, t in loaded.items() if t is table), split)
            origins[split] = _origin(where, files.get(name, []), split)
    check_columns(tables, origins, finite, same_length, grades)
    return tables, where, origins


def _origin(where: str, files: list[Path], split: str) -> str:
    """How an error names the rows of a split: its file when it has one, else the source and the split."""
    if len(files) == 1:
        return repr(str(files[0]))
    if files:
        return f"{where} ({split} split, rows counted over its files {[f.name for f in files]} in that order)"
    return f"{where} ({split} split)"


def feature_width(table: Any, features: Sequence[str]) -> int:
    """D: one per scalar column, the list length for a list column (every row the same length)."""
    width = 0
    for name in features:
        values = column(table.select(range(min(len(table), 1))), name)
        width += 1 if values.ndim == 1 else int(values.shape[1])
    return width


def as_list(columns: str | Sequence[str] | None) -> list[str]:
    return [] if columns is None else [columns] if isinstance(columns, str) else list(columns)
