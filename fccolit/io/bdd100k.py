"""Reader of BDD100K's frame attributes (weather, scene, time of day) from its labels JSON.

Both label files, the 2018 "Labels" package (``labels/bdd100k_labels_images_{train,val}.json``) and the 2020
detection labels (``labels/det_20/det_{train,val}.json``), are a JSON list of frames in the Scalabel format,
``{"name": "<id>.jpg", "attributes": {"weather": ..., "scene": ..., "timeofday": ...}, "labels": [...boxes...],
...}``; only ``name`` and ``attributes`` are read, and the list is streamed
(:func:`~fccolit.io.jsonstream.iter_json_array`).
A value outside the documented ones (:data:`ATTRIBUTE_VALUES`) is an error naming the file, the frame and the field.

Why not ``json.load`` or a BDD100K toolkit: see :mod:`fccolit.io.jsonstream` for the memory of the whole list as
Python objects (``benchmarks/handwritten.py`` times this reader against ``json.load``); the official ``bdd100k``
package is not a dependency and only its three attributes and the frame name are read here.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from fccolit.io.jsonstream import iter_json_array
from fccolit.io.paths import confined_relative_path

__all__ = ["ATTRIBUTES", "ATTRIBUTE_VALUES", "LABEL_FILES", "read_bdd100k_attributes"]

ATTRIBUTES = ("weather", "scene", "timeofday")
#: Attribute values documented by BDD100K (doc/format.rst), in the documentation's order.
ATTRIBUTE_VALUES = {
    "weather": ("rainy", "snowy", "clear", "overcast", "undefined", "partly cloudy", "foggy"),
    "scene": ("tunnel", "residential", "parking lot", "undefined", "city street", "gas stations", "highway"),
    "timeofday": ("daytime", "night", "dawn/dusk", "undefined"),
}
#: labels version → (training, validation) labels file, relative to the release folder
LABEL_FILES = {
    "2018": ("labels/bdd100k_labels_images_train.json", "labels/bdd100k_labels_images_val.json"),
    "2020": ("labels/det_20/det_train.json", "labels/det_20/det_val.json"),
}


def read_bdd100k_attributes(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Names and attributes of the frames of a BDD100K labels file (2018 or 2020 layout).

    Returns:
        ``name`` ``[n]`` str, and for each of ``weather``, ``scene``, ``timeofday`` an ``[n]`` int8 index into
        :data:`ATTRIBUTE_VALUES` (``undefined`` included).
    """
    path = Path(path)
    names: list[str] = []
    codes: dict[str, list[int]] = {a: [] for a in ATTRIBUTES}
    lookup = {a: {v: i for i, v in enumerate(vals)} for a, vals in ATTRIBUTE_VALUES.items()}
    for k, frame in iter_json_array(path):
        if not isinstance(frame, dict):
            raise ValueError(f"{path}: frame {k} is a {type(frame).__name__}, expected an object with 'name' and 'attributes'")
        name = frame.get("name")
        if not isinstance(name, str) or not name:
            raise ValueError(f"{path}: frame {k}: field 'name' is missing or not a string ({name!r})")
        confined_relative_path(name, "images/100k/<split>/", f"{path}: frame {k}, field 'name'")
        attributes = frame.get("attributes")
        if not isinstance(attributes, dict):
            raise ValueError(f"{path}: frame {k} ({name}): field 'attributes' is missing or not an object")
        for a in ATTRIBUTES:
            value = attributes.get(a)
            if value not in lookup[a]:
                raise ValueError(
                    f"{path}: frame {k} ({name}): field 'attributes.{a}' is {value!r}; documented values are "
                    f"{list(ATTRIBUTE_VALUES[a])}"
                )
            codes[a].append(lookup[a][value])
        names.append(name)
    out: dict[str, np.ndarray] = {"name": np.asarray(names, dtype=str) if names else np.zeros(0, dtype="U1")}
    for a in ATTRIBUTES:
        out[a] = np.asarray(codes[a], dtype=np.int8)
    return out
