"""Argument checks shared across fccolit (optimizers, algorithms, objectives, metrics, data).

A check here is one a plain Python caller needs: the ``fccolit`` command already checks ``Literal`` choices and
types through jsonargparse, but a direct call ``SOX(ema_weight=2.0)`` or ``Momentum(params, lr, 0)`` would
otherwise misbehave silently.
"""

from __future__ import annotations

from typing import Any, Iterable

__all__ = ["is_number", "check_weight", "check_choice"]


def is_number(value: Any) -> bool:
    """Whether ``value`` is a plain real number (an ``int`` or a ``float``, not a ``bool``)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_weight(name: str, value: Any, symbol: str, note: str = "") -> None:
    """Refuse a moving-average weight outside ``(0, 1]``.

    A weight here is the paper's weight of the **new** sample in ``new = (1 - w) * old + w * sample``.

    Args:
        name: the argument's name, as the caller wrote it (``"momentum_weight"``, ``"ema_weight"``).
        value: the value given.
        symbol: the paper's symbol (``"β"``, ``"γ"``), used in the message.
        note: an extra sentence for the message (e.g. how torch writes the same weight).

    Raises:
        ValueError: ``value`` is not a number in ``(0, 1]``.

    Example:
        >>> check_weight("ema_weight", 0.1, "γ")
        >>> check_weight("ema_weight", 0.0, "γ")
        Traceback (most recent call last):
        ...
        ValueError: Invalid ema_weight: 0.0. It is the paper's γ, the weight of the NEW sample in 'new = (1 - γ) * old + γ * sample', and must satisfy 0 < γ <= 1.
    """
    if not is_number(value) or not (0.0 < value <= 1.0):
        message = (
            f"Invalid {name}: {value!r}. It is the paper's {symbol}, the weight of the NEW sample in "
            f"'new = (1 - {symbol}) * old + {symbol} * sample', and must satisfy 0 < {symbol} <= 1."
        )
        raise ValueError(f"{message} {note}" if note else message)


def check_choice(name: str, value: Any, choices: Iterable[Any]) -> None:
    """Refuse a value that is not one of ``choices`` (for the string options typed ``Literal[...]``).

    Args:
        name: the argument's name.
        value: the value given.
        choices: the accepted values.

    Raises:
        ValueError: ``value`` is not in ``choices``.

    Example:
        >>> check_choice("second_moment", "adam", ("adam", "amsgrad"))
        >>> check_choice("second_moment", "adamw", ("adam", "amsgrad"))
        Traceback (most recent call last):
        ...
        ValueError: second_moment must be one of 'adam', 'amsgrad', got 'adamw'
    """
    choices = tuple(choices)
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(repr(c) for c in choices)}, got {value!r}")
