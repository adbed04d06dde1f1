"""Orbax checkpoints of whole training states: arrays as a pytree, metadata as JSON.

    save("runs/x/checkpoints", step, {"train_state": ..., "replay": ...}, {"config": {...}})
    state, meta = restore("runs/x/checkpoints", like={"train_state": ..., "replay": ...})

``like`` is a pytree of the same structure (real arrays or ``jax.ShapeDtypeStruct``s) that
tells orbax the shapes and dtypes to restore into. Typed PRNG keys (``jax.random.key``) are
not plain arrays: store ``jax.random.key_data(key)`` and re-wrap with ``wrap_key_data``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp


def _manager(directory: str | os.PathLike, max_to_keep: int | None = 2) -> ocp.CheckpointManager:
    return ocp.CheckpointManager(
        Path(directory).absolute(),
        options=ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True),
    )


def save(
    directory: str | os.PathLike, step: int, state: Any, metadata: dict[str, Any], max_to_keep: int | None = 2
) -> Path:
    """Write ``state`` (a pytree of arrays) and ``metadata`` (JSON-able) as checkpoint ``step``.

    Blocks until written. Keeps the newest ``max_to_keep`` checkpoints. Returns the step's folder.
    """
    state = _as_arrays(state)
    with _manager(directory, max_to_keep) as manager:
        manager.save(
            step,
            args=ocp.args.Composite(state=ocp.args.StandardSave(state), metadata=ocp.args.JsonSave(metadata)),
            force=True,
        )
        manager.wait_until_finished()
    return Path(directory).absolute() / str(step)


def latest_step(directory: str | os.PathLike) -> int | None:
    """The newest checkpoint step in ``directory``, or None if there is none."""
    if not Path(directory).exists():
        return None
    with _manager(directory) as manager:
        return manager.latest_step()


def all_steps(directory: str | os.PathLike) -> list[int]:
    """Every checkpoint step in ``directory``, oldest first ([] if there is none)."""
    if not Path(directory).exists():
        return []
    with _manager(directory) as manager:
        return sorted(manager.all_steps())


def restore_metadata(directory: str | os.PathLike, step: int | None = None) -> dict[str, Any]:
    """Only the JSON metadata of checkpoint ``step`` (default: the newest)."""
    with _manager(directory) as manager:
        step = _existing_step(manager, directory, step)
        return manager.restore(step, args=ocp.args.Composite(metadata=ocp.args.JsonRestore()))["metadata"]


def restore(directory: str | os.PathLike, like: Any, step: int | None = None) -> tuple[Any, dict[str, Any]]:
    """(state, metadata) of checkpoint ``step`` (default: the newest), shaped like ``like``.

    A checkpoint of the Flax Linen layout, which labcore's PPO wrote before its network moved to
    Flax NNX (every parameter dict one level down, under ``'params'``), restores too, into the
    plain dicts of ``like``.
    """
    with _manager(directory) as manager:
        step = _existing_step(manager, directory, step)
        try:
            restored = _restore_step(manager, step, like)
        except ValueError as mismatch:  # orbax: the tree on disk is not shaped like ``like``
            try:
                restored = _restore_step(manager, step, _linen_layout(like))
            except ValueError:
                raise mismatch from None
            restored["state"] = _plain_layout(restored["state"])
    return _restore_keys(restored["state"], like), restored["metadata"]


def _restore_step(manager: ocp.CheckpointManager, step: int, like: Any) -> dict[str, Any]:
    abstract = jax.tree_util.tree_map(ocp.utils.to_shape_dtype_struct, _as_arrays(like))
    return dict(manager.restore(
        step, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract), metadata=ocp.args.JsonRestore())))


def _is_dict(node: Any) -> bool:
    return isinstance(node, dict)


def _linen_layout(tree: Any) -> Any:
    """``tree`` with every outermost dict ``d`` (a parameter dict, or an optimizer moment of one) as ``{'params': d}``."""
    return jax.tree_util.tree_map(lambda node: {"params": node} if _is_dict(node) else node, tree, is_leaf=_is_dict)


def _plain_layout(tree: Any) -> Any:
    """The inverse of ``_linen_layout``."""
    return jax.tree_util.tree_map(lambda node: node["params"] if _is_dict(node) else node, tree,
                                  is_leaf=lambda node: _is_dict(node) and set(node) == {"params"})


def _is_key(leaf: Any) -> bool:
    return isinstance(leaf, jax.Array) and jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key)


def _as_arrays(tree: Any) -> Any:
    """Orbax takes plain arrays: numpy scalars such as np.int32(4) become 0-d numpy arrays, and
    typed PRNG keys (``jax.random.key``) are stored as their raw uint32 key data."""

    def convert(leaf: Any) -> Any:
        if _is_key(leaf):
            return jax.random.key_data(leaf)
        return leaf if isinstance(leaf, (jax.Array, jax.ShapeDtypeStruct)) else np.asarray(leaf)

    return jax.tree_util.tree_map(convert, tree)


def _restore_keys(restored: Any, like: Any) -> Any:
    """Wrap key data back into typed keys wherever ``like`` holds one."""
    return jax.tree_util.tree_map(
        lambda value, model: jax.random.wrap_key_data(value, impl=jax.random.key_impl(model)) if _is_key(model) else value,
        restored,
        like,
    )


def _existing_step(manager: ocp.CheckpointManager, directory: str | os.PathLike, step: int | None) -> int:
    available = manager.all_steps()
    if not available:
        raise FileNotFoundError(f"no checkpoint in {directory}")
    if step is None:
        return max(available)
    if step not in available:
        raise FileNotFoundError(f"no checkpoint for step {step} in {directory}; available: {sorted(available)}")
    return step
