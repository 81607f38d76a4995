"""Readers of raw data-set files, the CSR kernels of the ranking data, and the on-disk array cache shared by the
DataModules."""

from fccolit.io.bdd100k import read_bdd100k_attributes
from fccolit.io.cache import cache_key, cached_arrays, content_sha256, default_cache_dir
from fccolit.io.chexpert import apply_uncertainty, read_chexpert_csv
from fccolit.io.cifar import read_cifar_batch, read_cifar_names
from fccolit.io.fairness import parse_adult, parse_compas
from fccolit.io.jsonstream import iter_json_array
from fccolit.io.letor import LetorFile, group_by_query, parse_letor, read_lightgbm_ranking, read_query_sizes
from fccolit.io.libsvm import LibSVMFile, parse_libsvm, read_libsvm
from fccolit.io.paths import confined_relative_path
from fccolit.io.ratings import Ratings, read_movielens_ratings, read_netflix_probe, read_netflix_ratings

__all__ = [
    "LetorFile", "LibSVMFile", "Ratings", "apply_uncertainty", "cache_key", "cached_arrays", "confined_relative_path",
    "content_sha256", "default_cache_dir", "group_by_query", "iter_json_array", "parse_adult", "parse_compas",
    "parse_letor", "parse_libsvm", "read_bdd100k_attributes", "read_chexpert_csv", "read_cifar_batch",
    "read_cifar_names", "read_libsvm", "read_lightgbm_ranking", "read_movielens_ratings", "read_netflix_probe",
    "read_netflix_ratings", "read_query_sizes",
]
