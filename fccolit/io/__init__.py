"""Readers of raw data-set files and the on-disk array cache shared by the DataModules."""

from fccolit.io.cache import cache_key, cached_arrays, content_sha256, default_cache_dir
from fccolit.io.letor import LetorFile, group_by_query, parse_letor, read_lightgbm_ranking, read_query_sizes
from fccolit.io.libsvm import LibSVMFile, parse_libsvm, read_libsvm
from fccolit.io.paths import confined_relative_path
from fccolit.io.ratings import Ratings, read_movielens_ratings, read_netflix_probe, read_netflix_ratings

__all__ = [
    "LetorFile", "LibSVMFile", "Ratings", "cache_key", "cached_arrays", "confined_relative_path", "content_sha256",
    "default_cache_dir", "group_by_query",
    "parse_letor", "parse_libsvm", "read_libsvm", "read_lightgbm_ranking", "read_movielens_ratings",
    "read_netflix_probe", "read_netflix_ratings", "read_query_sizes",
]
