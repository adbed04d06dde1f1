"""Pieces of the behaviour checks: exercises whose convention is free are judged by what an answer does.

A key-handling answer may split its key in any order, fold in a step counter, or draw its coins with
``uniform`` or ``bernoulli``; the checks here accept all of those and reject what is wrong whatever
the convention: a key consumed twice (JAX's own key-reuse checker finds it, inside ``scan`` too), draws
that repeat from one step to the next, one draw shared where each entry needs its own, frequencies
far from the probabilities asked for, and an answer that ignores its key.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

# A frequency more than this many standard deviations from its probability is rejected: a right
# answer fails one such test with probability below 2e-9, and the wrong answers these checks name
# are tens of standard deviations away with the sample sizes used.
SIGMAS = 6.0


def copy_key(key: jax.Array) -> jax.Array:
    """A new key object holding the same key data: the same draws, but not yet consumed (JAX's
    key-reuse checker tracks each key object, so a check that calls an answer twice with one key
    hands it a copy)."""
    return jax.random.wrap_key_data(jax.random.key_data(key))


def key_reuse_problem(fn: Callable[..., Any], *args: Any) -> tuple[str | None, Any]:
    """Call ``fn(*args)`` with JAX's key-reuse checker on: (None, the output), or (what is reused, None)."""
    try:
        with jax.debug_key_reuse(True):
            return None, jax.block_until_ready(fn(*args))
    except jax.errors.KeyReuseError as err:
        first_line = str(err).strip().splitlines()[0]
        if "scan body" in first_line or "while_loop" in first_line or "repeatedly" in first_line:
            return ("a key is consumed at every step of the loop but never replaced, so every step makes the "
                    f"same draws (JAX's key-reuse checker: {first_line})"), None
        return ("a PRNG key is consumed twice, so two draws that should be independent come from one key "
                f"(JAX's key-reuse checker: {first_line})"), None


def frequency_problem(count: int, n: int, probability: float, what: str) -> str | None:
    """None if ``count`` successes in ``n`` trials fit ``probability``; else a sentence naming ``what``."""
    observed = count / n
    spread = SIGMAS * math.sqrt(probability * (1.0 - probability) / n) + 1e-9
    if abs(observed - probability) <= spread:
        return None
    return f"{what} is {observed:.3f} over {n} draws, where it should be {probability:.3f} (+- {spread:.3f})"


def dispersion_problem(counts: np.ndarray, group_size: int, probability: float, what: str) -> str | None:
    """None if the successes ``counts`` of several groups of ``group_size`` trials vary as independent
    trials would; else a sentence naming ``what``. One draw shared by a whole group (one coin for a
    batch) makes the counts swing between all and few, far beyond the binomial spread."""
    counts = np.asarray(counts, np.float64)
    variance = group_size * probability * (1.0 - probability)
    statistic = float(np.sum((counts - group_size * probability) ** 2) / variance)  # chi-square, len(counts) dof
    limit = len(counts) + SIGMAS * math.sqrt(2.0 * len(counts))
    if statistic <= limit:
        return None
    return (f"{what} varies from group to group far more than independent draws would (chi-square {statistic:.0f} "
            f"over {len(counts)} groups, where up to {limit:.0f} is expected)")


def shape_problem(output: Any, shape: tuple[int, ...], kind: str, what: str = "the output") -> str | None:
    """None if ``output`` is an array of ``shape`` whose dtype kind is in ``kind`` ('f', 'iu', ...)."""
    if not hasattr(output, "shape") or not hasattr(output, "dtype"):
        return f"{what} is {type(output).__name__}, not an array"
    if tuple(output.shape) != tuple(shape):
        return f"{what} has shape {tuple(output.shape)}, where it should be {tuple(shape)}"
    if np.dtype(output.dtype).kind not in kind:
        return f"{what} has dtype {output.dtype}"
    return None
