"""A sequential loop's per-step outputs written as one array: ``scan_packed``, and ``scan``, which uses it on a GPU.

    runner, rollout = scan(env_step, runner, length=128)   # as jax.lax.scan(env_step, runner, None, 128)

``jax.lax.scan`` stacks each leaf of a step's output into its own ``[length, ...]`` buffer, one
in-place write (a dynamic-update-slice) per leaf per step. A rollout step that returns a dozen
small leaves (the observation, the action, the reward, flags, the value, episode statistics) makes a
dozen writes of a few bytes each. On a CPU each costs its few bytes; on a GPU each can be a kernel
launch of its own, a few microseconds at every step of a loop that cannot be batched.
``scan_packed`` writes one row per step instead: every leaf's bits, flattened and concatenated into
one ``uint32`` vector, and after the loop the ``[length, F]`` stack is cut back into the leaves,
batched over all steps. Only bits move (32-bit leaves are bitcast, narrower ones widened and
narrowed back exactly), so the result is the scan's, bit for bit.

Measured with ``benchmarks/ppo_speed.py`` on NVIDIA H200s (JAX 0.11.2; recorded 2026-11-28 in
docs/results/history.md, each figure a ratio to the baseline run beside it), the default PPO on CartPole (a dozen leaves per step) went from 0.83x, 0.90x and 0.87x of its
stripped baseline (fewer leaves) at 4, 64 and 2048 envs to 0.86x, 0.92x and 0.94x packed. On a
2-core CPU packing made it slower (0.99x to 0.74x at 4 envs): there a write costs its few bytes,
and gathering the leaves into one row costs more. ``scan`` therefore packs on a GPU only
(``labcore.devices.launch_bound``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from labcore import devices


def _to_words(leaf: jax.Array) -> jax.Array:
    """leaf [...] -> uint32 [leaf.size]: its exact bits, one 32-bit word per element."""
    flat = leaf.reshape(-1)
    if flat.dtype == jnp.bool_:
        return flat.astype(jnp.uint32)
    if flat.dtype.itemsize == 4:
        return jax.lax.bitcast_convert_type(flat, jnp.uint32)
    if flat.dtype.itemsize in (1, 2):  # widen the bits, not the value: exact for every 8- or 16-bit type
        bits = jax.lax.bitcast_convert_type(flat, jnp.dtype(f"uint{8 * flat.dtype.itemsize}"))
        return bits.astype(jnp.uint32)
    raise TypeError(f"scan_packed packs 8-, 16- and 32-bit leaves and bools; got {flat.dtype}")


def _from_words(words: jax.Array, like: jax.ShapeDtypeStruct) -> jax.Array:
    """The inverse of ``_to_words`` over a leading axis: words [T, like.size] -> [T, *like.shape]."""
    steps = words.shape[0]
    if like.dtype == jnp.bool_:
        flat = words.astype(jnp.bool_)
    elif np.dtype(like.dtype).itemsize == 4:
        flat = jax.lax.bitcast_convert_type(words, like.dtype)
    else:
        narrow = words.astype(jnp.dtype(f"uint{8 * np.dtype(like.dtype).itemsize}"))
        flat = jax.lax.bitcast_convert_type(narrow, like.dtype)
    return flat.reshape(steps, *like.shape)


def scan_packed(step: Callable[[Any, None], tuple[Any, Any]], carry: Any, length: int) -> tuple[Any, Any]:
    """``jax.lax.scan(step, carry, None, length)``, its per-step outputs written as one uint32 row.

    step(carry, None) -> (carry, out): out a pytree of arrays of 8-, 16- or 32-bit dtypes or bool
    (None leaves allowed). Returns (final carry, outs) with every leaf of ``out`` stacked to
    [length, ...], bit for bit what ``jax.lax.scan`` returns.
    """
    shapes = jax.eval_shape(lambda c: step(c, None)[1], carry)
    leaves, treedef = jax.tree_util.tree_flatten(shapes)
    sizes = [int(np.prod(leaf.shape, dtype=np.int64)) for leaf in leaves]

    def packed_step(carry, _):
        carry, out = step(carry, None)
        return carry, jnp.concatenate([_to_words(leaf) for leaf in jax.tree_util.tree_leaves(out)])

    carry, rows = jax.lax.scan(packed_step, carry, None, length=length)  # rows [length, sum(sizes)]
    bounds = np.cumsum([0, *sizes])
    outs = [_from_words(rows[:, start:stop], like) for like, start, stop in zip(leaves, bounds[:-1], bounds[1:])]
    return carry, jax.tree_util.tree_unflatten(treedef, outs)


def scan(step: Callable[[Any, None], tuple[Any, Any]], carry: Any, length: int) -> tuple[Any, Any]:
    """``jax.lax.scan(step, carry, None, length)``, packed (``scan_packed``) on a GPU: the same result
    either way, bit for bit."""
    if devices.launch_bound():
        return scan_packed(step, carry, length)
    return jax.lax.scan(step, carry, None, length=length)
