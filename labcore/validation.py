"""Config validation shared by every algorithm's config dataclass.

Each config checks itself in ``__post_init__``, before anything compiles, and a bad value fails
with one message that names the class, the field and what it must be:

    def __post_init__(self):
        require = validation.requirer(self)
        require(self.gamma <= 1, "gamma", "in [0, 1]")     # ValueError: DQNConfig.gamma must be in [0, 1], got 1.5
        validation.require_ints(self, "batch_size", "num_envs", minimum=1)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any


def fail(config: Any, field: str, allowed: str) -> None:
    """Raise the ValueError naming ``type(config).field``, what it must be, and its value."""
    raise ValueError(f"{type(config).__name__}.{field} must be {allowed}, got {getattr(config, field)!r}")


def requirer(config: Any) -> Callable[[bool, str, str], None]:
    """``require(ok, field, allowed)``: fail on ``field`` of ``config`` unless ``ok``."""

    def require(ok: bool, field: str, allowed: str) -> None:
        if not ok:
            fail(config, field, allowed)

    return require


def is_int(value: Any) -> bool:
    """An int and not a bool (True is an int to Python, never a count to a config)."""
    return isinstance(value, int) and not isinstance(value, bool)


def require_ints(config: Any, *fields: str, minimum: int = 1) -> None:
    """Each field is an integer >= minimum."""
    for field in fields:
        value = getattr(config, field)
        if not (is_int(value) and value >= minimum):
            fail(config, field, f"an integer >= {minimum}")


def require_positive(config: Any, *fields: str) -> None:
    """Each field is a finite number > 0 (learning rates, clip norms)."""
    for field in fields:
        value = getattr(config, field)
        if not (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0):
            fail(config, field, "a finite number > 0")


def require_unit_interval(config: Any, *fields: str) -> None:
    """Each field is a number in [0, 1] (discounts, probabilities, rates)."""
    for field in fields:
        value = getattr(config, field)
        if not (isinstance(value, (int, float)) and not isinstance(value, bool) and 0.0 <= value <= 1.0):
            fail(config, field, "a number in [0, 1]")


def require_choice(config: Any, field: str, choices: tuple[Any, ...]) -> None:
    """The field is one of ``choices``."""
    if getattr(config, field) not in choices:
        fail(config, field, f"one of {choices}")
