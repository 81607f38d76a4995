"""Readers of raw data-set files and the on-disk array cache shared by the DataModules."""

from fccolit.io.cache import cache_key, cached_arrays, default_cache_dir
from fccolit.io.libsvm import LibSVMFile, parse_libsvm, read_libsvm

__all__ = ["LibSVMFile", "cache_key", "cached_arrays", "default_cache_dir", "parse_libsvm", "read_libsvm"]
