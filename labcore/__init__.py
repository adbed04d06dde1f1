"""labcore: reinforcement learning in JAX, tested and explained.

The numbered notebooks in ``notebooks/`` teach; this package holds the single
tested copy of every algorithm they use. Import cost is kept small on purpose:
``import labcore`` does not import JAX, so a notebook can set ``XLA_FLAGS`` or
``JAX_PLATFORMS`` after importing labcore and before its first JAX import.

``import labcore`` changes no global setting. JAX's persistent compilation cache (a folder in the
user's cache directory, so that a later process skips most compiles) is one call away,
``labcore.compile_cache.configure()``, which the CLI and every notebook's setup cell make.
"""

from __future__ import annotations

import os
from typing import TypeVar

__version__ = "0.2.0"

__all__ = ["__version__", "budget", "is_quick"]

T = TypeVar("T")

QUICK_ENV_VAR = "LABCORE_QUICK"


def is_quick() -> bool:
    """True when ``LABCORE_QUICK=1``: the quick budgets, shorter training that still trains and checks.

    Only the exact value ``"1"`` turns quick mode on; any other value, or the
    variable being unset, means the full budget. A typo such as ``LABCORE_QUICK=yes``
    raises instead of silently running a full-size training where a quick one was asked for.
    """
    value = os.environ.get(QUICK_ENV_VAR, "")
    if value in ("", "0"):
        return False
    if value == "1":
        return True
    raise ValueError(f"{QUICK_ENV_VAR} must be '1' (quick) or '0'/unset (full), got {value!r}")


def budget(full: T, quick: T) -> T:
    """Pick a training budget: ``quick`` under ``LABCORE_QUICK=1``, else ``full``.

    Every notebook sizes its training with this, so that a quick run executes the
    same cells on a small budget and a reader gets the real one::

        total_steps = labcore.budget(full=200_000, quick=5_000)
    """
    return quick if is_quick() else full
