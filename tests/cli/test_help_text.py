"""Every public class's docstring starts with a complete one-line summary (PEP 257).

``fccolit fit --model.help SOX`` (jsonargparse) takes the FIRST LINE of a class's docstring as its heading, so a
first sentence that wraps over two lines shows a cut heading ("SOX: ... (Wang & Yang, ICML 2022,:"). The rule, for
every class in the ``__all__`` of the modules a command line can name: the first line is a whole sentence ending
with ".", at most :data:`MAX_SUMMARY_WIDTH` characters in the source (indentation and opening quotes included),
followed by a blank line (or nothing) before the rest.
"""

import importlib
import inspect

import pytest

#: the modules whose ``__all__`` classes a command line can name (``--model``, ``--data``, ``--trainer.callbacks``, ...)
PUBLIC_MODULES = [
    "fccolit.algorithms",
    "fccolit.objectives",
    "fccolit.models",
    "fccolit.datamodules",
    "fccolit.callbacks",
    "fccolit.optim",
    "fccolit.metrics",
]

#: the longest first docstring line, as written in the source
MAX_SUMMARY_WIDTH = 120


def _public_classes():
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        for name in getattr(module, "__all__", []):
            obj = getattr(module, name)
            if inspect.isclass(obj):
                yield f"{module_name}.{name}", obj


def _summary_problem(cls) -> str | None:
    """What is wrong with the summary line of ``cls``'s docstring, or None."""
    doc = inspect.getdoc(cls)
    if not doc:
        return "no docstring"
    lines = doc.split("\n")
    if not lines[0].rstrip().endswith("."):
        return f"first line is not a whole sentence ending with '.': {lines[0][:80]!r}"
    if len(lines) > 1 and lines[1].strip():
        return f"first sentence wraps onto a second line: {lines[0][:60]!r} / {lines[1].strip()[:40]!r}"
    own = cls.__dict__.get("__doc__")
    if own:  # the class's own docstring (not inherited): check the source width of its first line
        try:
            source = inspect.getsource(cls)
        except (OSError, TypeError):
            return None
        first = next((line for line in source.splitlines() if '"""' in line or "'''" in line), None)
        if first is not None and len(first) > MAX_SUMMARY_WIDTH:
            return f"first line is {len(first)} characters wide in the source (at most {MAX_SUMMARY_WIDTH})"
    return None


def test_public_modules_list_classes():
    assert sum(1 for _ in _public_classes()) > 50  # the check below would pass vacuously on an empty walk


def test_every_public_class_docstring_starts_with_a_one_line_summary():
    offenders = [f"  {path}: {problem}" for path, cls in _public_classes()
                 if (problem := _summary_problem(cls)) is not None]
    if offenders:
        pytest.fail(
            f"{len(offenders)} public class docstring(s) do not start with a one-line summary; "
            "`fccolit fit --model.help CLASS` shows the first docstring line as the class's heading, so a wrapped "
            "first sentence prints cut off:\n" + "\n".join(offenders) + "\n"
            f"Fix: make the first line one complete sentence ending with '.' (at most {MAX_SUMMARY_WIDTH} "
            "characters including indentation and the opening quotes; keep the method name and the citation, "
            "e.g. 'SOX: ... (Wang & Yang, ICML 2022).'), then a blank line, then the details (equation numbers, "
            "sections, protocol notes) in the next paragraph.",
            pytrace=False,
        )
