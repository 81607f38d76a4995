"""The experiment configs, shipped with the package as ``fccolit.configs``: ``fccolit fit --config movielens/song``
finds ``movielens/song.yaml`` here (see :mod:`fccolit.resources`). Only the YAML files matter; this file makes the
folder a package so that the wheel and the editable install both carry it."""
