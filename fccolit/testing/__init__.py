"""Small data sets written in the exact file formats of the real ones, for tests, examples and benchmarks.

Every writer produces files that the readers (:mod:`fccolit.io`) and the DataModules (:mod:`fccolit.datamodules`)
read exactly as they read the released data, so a test, an example or a loader benchmark runs the real code path
without the (large, often licensed) data sets:

========================  ==========================================================================================
data set                  writers
========================  ==========================================================================================
LIBSVM                    :func:`write_libsvm` (a small a9a-like pair), :func:`write_large_libsvm` (several MiB)
UCI Adult, COMPAS         :func:`write_adult_files`, :func:`write_compas_file`
MovieLens                 :func:`write_movielens_csv` (random ratings), :func:`write_movielens_ratings` (given rows,
                          any of the three formats), :func:`write_large_movielens_csv` (ML-20M-sized),
                          :func:`zip_bytes` (a release zip)
Netflix Prize             :func:`write_netflix`, :func:`write_netflix_quirks` (CRLF, blank lines, ``probe.txt``)
LETOR / MSLR-WEB          :func:`write_letor` (given documents), :func:`write_mslr_fold` (a random ``Fold<k>``)
CIFAR-10 / 100            :func:`cifar_arrays` (random images), :func:`write_cifar` (the python pickles)
CheXpert                  :func:`write_chexpert` (CSVs and JPEGs), :func:`write_chexpert_csv` (a large CSV alone)
BDD100K                   :func:`bdd_frames` (frame attributes), :func:`write_bdd100k` (labels JSON and JPEGs)
CSV                       :func:`write_csv` (given rows), :func:`write_binary_csv` (a toy binary problem)
========================  ==========================================================================================

Example::

    from fccolit.datamodules import MovieLensDataModule
    from fccolit.testing import write_movielens_csv

    write_movielens_csv(tmp / "ml")                       # 60 users, ``ratings.csv`` as in ml-20m
    dm = MovieLensDataModule(tmp / "ml", num_negatives=20)
"""

from fccolit.testing.images import (
    bdd_frames, cifar_arrays, noise_image, write_bdd100k, write_chexpert, write_chexpert_csv, write_cifar,
)
from fccolit.testing.ranking import (
    write_large_movielens_csv, write_letor, write_movielens_csv, write_movielens_ratings, write_mslr_fold,
    write_netflix, write_netflix_quirks, zip_bytes,
)
from fccolit.testing.tabular import (
    write_adult_files, write_binary_csv, write_compas_file, write_csv, write_large_libsvm, write_libsvm,
)

__all__ = [
    "bdd_frames", "cifar_arrays", "noise_image", "write_adult_files", "write_bdd100k", "write_binary_csv",
    "write_chexpert", "write_chexpert_csv", "write_cifar", "write_compas_file", "write_csv", "write_large_libsvm",
    "write_large_movielens_csv", "write_letor", "write_libsvm", "write_movielens_csv", "write_movielens_ratings",
    "write_mslr_fold", "write_netflix", "write_netflix_quirks", "zip_bytes",
]
