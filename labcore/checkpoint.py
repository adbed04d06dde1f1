"""Orbax checkpoints of whole training states: arrays as a pytree, metadata as JSON.

    save("runs/x/checkpoints", step, {"train_state": ..., "replay": ...}, {"config": {...}})
    state, meta = restore("runs/x/checkpoints", like={"train_state": ..., "replay": ...})

``like`` is a pytree of the same structure (real arrays or ``jax.ShapeDtypeStruct``s) that
tells orbax the shapes and dtypes to restore into. Typed PRNG keys (``jax.random.key``) are
not plain arrays: store ``jax.random.key_data(key)`` and re-wrap with ``wrap_key_data``.

**Every checkpoint is verified before it is read.** Orbax commits a checkpoint atomically (it
writes a temporary folder and renames it), and tensorstore checks its own index, but nothing checks
the array bytes: a flipped byte in a data file restores without a word. So once orbax has committed
a step, ``save`` records the size and a BLAKE2b digest of every file in the step's folder
(``DIGESTS_NAME``, written atomically, by the first process of a multi-process run), and the step's
metadata says that it will have them. ``restore`` and ``restore_metadata`` check every file first:
a missing, resized or changed file, or digests missing where the metadata promised them (a process
killed between the commit and the digests), makes the step damaged (``DamagedCheckpoint``, naming
the file). Asked for the newest step (``step=None``), they name each damaged step in one line on
stderr and read the newest intact one; asked for a given step, they refuse a damaged one. A
checkpoint written before labcore recorded digests has none to check: it is read as it is, and
that is said once per folder.

**One metadata schema for every driver, one way in and one way out.** A driver writes a run's
checkpoint with ``save_run`` (``run_metadata`` builds the schema, the config serialised as the run's
config.json is) and opens one with ``open_run`` (the metadata checked by ``expect``, the config
rebuilt). Each step's metadata holds

    algorithm        the name of what trained it in ``labcore.agents.registry`` ("ppo", "dqn-scan", ...); null
                     for a program outside the registry (one a notebook builds), which any loader takes
    driver           the module that wrote it ("labcore.loop", "labcore.agents.dqn.host_loop", ...)
    labcore_version  ``labcore.__version__`` of the writer
    config           the config's JSON fields
    step             the step orbax files it under, in the driver's unit (updates, agent steps, epochs)
    digests          the kind of digests promised (added by ``save``)

and whatever its driver reads back besides (``labcore.loop``: "update_step", "seeds" and the
program's ``written_with``; the host DQN: "has_replay", "has_envs", "episode_returns", ...).
Every loader (through ``open_run``) and every resume calls ``expect`` before it builds a config: a checkpoint of another
algorithm is refused with ``WrongCheckpoint``, one line naming what the folder holds and the command
that evaluates it, instead of a KeyError or a TypeError from deep inside the restore. A checkpoint
written before the schema has no "algorithm": it is not refused, and loads as it always did.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shlex
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import jax
import numpy as np
import orbax.checkpoint as ocp

from labcore import __version__
from labcore.run_layout import checkpoint_dir, config_dict, config_from_dict


DIGESTS_NAME = "labcore-digests.json"  # in each step's folder: {"algorithm", "files": {path: {"size", "digest"}}}
DIGEST_ALGORITHM = "blake2b-128"
_CHUNK = 1 << 20


class DamagedCheckpoint(ValueError):
    """A checkpoint whose files are not what was written: missing, resized, changed, or unverifiable."""


class DamagedCheckpoints(RuntimeError):
    """Checkpoints were found, and none of them is intact (or restores)."""


SCHEMA_KEYS = ("algorithm", "driver", "labcore_version", "config", "step")


class WrongCheckpoint(ValueError):
    """A checkpoint of another algorithm than the one loading or resuming it (``expect``)."""


def run_metadata(algorithm: str, driver: str, config_fields: Mapping[str, Any], step: int,
                 **extra: Any) -> dict[str, Any]:
    """A checkpoint's metadata in the schema of the module docstring: ``algorithm`` (a name of
    ``labcore.agents.registry``, or "" for a program outside the registry), ``driver`` (the
    writing module's name), the config's JSON fields, the step, and the driver's own ``extra``
    keys. (The names are the registry's alone: tests/test_registry.py has every algorithm's
    folder refused by every other algorithm, which holds each driver to its own name.)"""
    clash = sorted(set(SCHEMA_KEYS) & set(extra))
    if clash:
        raise ValueError(f"run_metadata: {clash} are the schema's own keys, not a driver's extra ones")
    return {"algorithm": algorithm or None, "driver": driver, "labcore_version": __version__,
            "config": dict(config_fields), "step": int(step), **extra}


def save_run(directory: str | os.PathLike, step: int, state: Any, /, *, algorithm: str, driver: str, config: Any,
             **extra: Any) -> Path:
    """The one way a run's checkpoint is written: ``state`` at ``step``, its metadata in the schema
    (``run_metadata``), the config serialised as the run's config.json is (``labcore.run_layout.config_dict``)."""
    return save(directory, step, state, run_metadata(algorithm, driver, config_dict(config), step, **extra))


class OpenedRun(NamedTuple):
    """A run's checkpoint as ``open_run`` found it, before any array is read."""

    directory: Path  # its checkpoints/ folder
    metadata: Mapping[str, Any]  # the step's metadata, in the schema
    config: Any  # the config it was written with, rebuilt


def open_run(path: str | os.PathLike, algorithm: str, config_class: type, step: int | None = None) -> OpenedRun:
    """The one way a run's checkpoint is opened: a run folder or its checkpoints/ folder (default: the
    newest step), its metadata (another algorithm's refused by name, ``expect``), its config rebuilt
    (``labcore.run_layout.config_from_dict``). A driver that wrote several kinds tells them apart by the
    metadata's ``driver``."""
    directory = checkpoint_dir(path)
    metadata = expect(restore_metadata(directory, step), algorithm, path)
    return OpenedRun(directory, metadata, config_from_dict(config_class, metadata["config"]))


def expect(metadata: Mapping[str, Any], algorithm: str, path: str | os.PathLike) -> Mapping[str, Any]:
    """``metadata``, unless it names another algorithm than ``algorithm`` (the registry name of the
    caller): then WrongCheckpoint, one line naming what ``path`` holds and the command that
    evaluates it. Metadata without an algorithm (written before the schema, or by a program outside
    the registry) and an empty ``algorithm`` (a caller outside it) check nothing."""
    held = metadata.get("algorithm")
    if not held or not algorithm or held == algorithm:
        return metadata
    raise WrongCheckpoint(
        f"{path} holds {_a(held)} run ({metadata.get('driver')}, step {metadata.get('step')}, labcore "
        f"{metadata.get('labcore_version')}), not {_a(algorithm)} one: evaluate it with "
        f"python -m labcore eval {held} --checkpoint {shlex.quote(str(path))}")


def expecting(algorithm: str, path: str | os.PathLike, like: Any) -> Callable[[Mapping[str, Any]], Any]:
    """A ``like`` for ``labcore.runs.RunDir.restore`` that ``expect``s each checkpoint it is asked
    about to be ``algorithm``'s before it gives ``like`` (a template, or a function of the metadata
    returning one): for the drivers whose own loop restores a resumed run."""

    def checked(metadata: Mapping[str, Any]) -> Any:
        expect(metadata, algorithm, path)
        return like(metadata) if callable(like) else like

    return checked


def _a(name: str) -> str:
    """``name`` with its article, as the name is read aloud ("an iqn", "a dqn-scan")."""
    return f"{'an' if name[:1] in 'aeio' else 'a'} {name}"


def file_digest(path: Path) -> str:
    """The BLAKE2b (128-bit) digest of a file's bytes, as hex."""
    digest = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as file:
        for chunk in iter(lambda: file.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _step_files(step_dir: Path) -> list[Path]:
    return sorted(p for p in step_dir.rglob("*") if p.is_file() and p.name != DIGESTS_NAME)


def record_digests(step_dir: str | os.PathLike) -> Path:
    """Write ``DIGESTS_NAME`` for a committed step's folder (atomically: a temporary file renamed)."""
    step_dir = Path(step_dir)
    files = {p.relative_to(step_dir).as_posix(): {"size": p.stat().st_size, "digest": file_digest(p)}
             for p in _step_files(step_dir)}
    target = step_dir / DIGESTS_NAME
    temporary = step_dir / f".{DIGESTS_NAME}.tmp"
    temporary.write_text(json.dumps({"algorithm": DIGEST_ALGORITHM, "files": files}, indent=1, sort_keys=True) + "\n")
    os.replace(temporary, target)
    return target


def verify(step_dir: str | os.PathLike) -> bool:
    """Check a step's folder against its digests; True if it has them (and every file matches), False
    if it was written without them (before labcore recorded digests). Raises DamagedCheckpoint
    naming the first file that is missing, resized or changed, or when digests were promised by the
    step's metadata and are missing or unreadable."""
    step_dir = Path(step_dir)
    path = step_dir / DIGESTS_NAME
    if not path.exists():
        promised = _promised_digests(step_dir)
        if promised is None:
            raise DamagedCheckpoint(f"{step_dir.name}: it has no {DIGESTS_NAME}, and its metadata is missing or "
                                    "cannot be read")
        if promised:
            raise DamagedCheckpoint(f"{step_dir.name}: its {DIGESTS_NAME} is missing (the run stopped while the "
                                    "checkpoint was being finished)")
        return False
    try:
        manifest = json.loads(path.read_text())
        files = manifest["files"]
        if manifest.get("algorithm") != DIGEST_ALGORITHM:
            raise DamagedCheckpoint(f"{step_dir.name}: digests of an unknown kind ({manifest.get('algorithm')!r})")
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        if isinstance(err, DamagedCheckpoint):
            raise
        raise DamagedCheckpoint(f"{step_dir.name}: its {DIGESTS_NAME} cannot be read ({type(err).__name__})") from None
    for name, expected in sorted(files.items()):
        file = step_dir / name
        if not file.is_file():
            raise DamagedCheckpoint(f"{step_dir.name}/{name} is missing")
        size = file.stat().st_size
        if size != expected["size"]:
            raise DamagedCheckpoint(f"{step_dir.name}/{name} has {size} bytes, {expected['size']} were written")
        if file_digest(file) != expected["digest"]:
            raise DamagedCheckpoint(f"{step_dir.name}/{name} has changed since it was written (its digest differs)")
    return True


def _promised_digests(step_dir: Path) -> bool | None:
    """Whether the step's metadata (orbax's JSON item) says digests were to be recorded; None when
    that metadata is missing or cannot be read (nothing then vouches for the step)."""
    metadata = step_dir / "metadata" / "metadata"
    try:
        return bool(json.loads(metadata.read_text()).get("digests"))
    except (ValueError, AttributeError, OSError):
        return None


def unfinished(directory: str | os.PathLike) -> list[Path]:
    """Folders of ``directory`` left by a save that never finished (orbax writes a step into a
    temporary folder, ``<step>.orbax-checkpoint-tmp-<n>``, and renames it when done): never read."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if p.is_dir() and ".orbax-checkpoint-tmp" in p.name)


_unverified_said: set[str] = set()
_verified: dict[Path, tuple[tuple, DamagedCheckpoint | None]] = {}  # step folder -> (its files then, the verdict)


def _verify_step(directory: str | os.PathLike, step: int) -> None:
    """verify() a step's folder, once while its files stay as they were (a load reads the metadata,
    then the state: the files are hashed once); say once per folder that old steps are unverified."""
    step_dir = Path(directory).absolute() / str(step)
    seen = tuple((p.relative_to(step_dir).as_posix(), p.stat().st_size, p.stat().st_mtime_ns)
                 for p in sorted(step_dir.rglob("*")) if p.is_file())
    earlier = _verified.get(step_dir)
    if earlier is not None and earlier[0] == seen:
        if earlier[1] is not None:
            raise earlier[1]
        return
    try:
        has_digests = verify(step_dir)
    except DamagedCheckpoint as damage:
        _verified[step_dir] = (seen, damage)
        raise
    _verified[step_dir] = (seen, None)
    if not has_digests and str(step_dir.parent) not in _unverified_said:
        _unverified_said.add(str(step_dir.parent))
        print(f"labcore: checkpoint {step} in {step_dir.parent} has no digests (written before labcore recorded "
              "them): read without verifying its files", file=sys.stderr, flush=True)


_named: set[tuple[Path, tuple]] = set()  # damaged steps already named on stderr, as their files were


def intact_step(directory: str | os.PathLike, step: int | None = None) -> int:
    """``step`` if its files verify (DamagedCheckpoint if not); for None, the newest step whose files
    verify, each newer damaged one named in one line on stderr (DamagedCheckpoints if none does)."""
    with _manager(directory) as manager:
        available = sorted(manager.all_steps())
    if not available:
        raise FileNotFoundError(f"no checkpoint in {directory}")
    for stray in unfinished(directory):
        if str(stray) not in _unverified_said:
            _unverified_said.add(str(stray))
            print(f"labcore: {stray} is a checkpoint whose save never finished: not used", file=sys.stderr, flush=True)
    if step is not None:
        if step not in available:
            raise FileNotFoundError(f"no checkpoint for step {step} in {directory}; available: {available}")
        _verify_step(directory, step)
        return step
    damaged = []
    for candidate in reversed(available):
        try:
            _verify_step(directory, candidate)
        except DamagedCheckpoint as err:
            damaged.append(f"step {candidate} ({err})")
            step_dir = Path(directory).absolute() / str(candidate)
            if (step_dir, _verified[step_dir][0]) not in _named:  # once, however often it is read
                _named.add((step_dir, _verified[step_dir][0]))
                print(f"labcore: checkpoint {candidate} in {step_dir.parent} is damaged and is not used: {err}",
                      file=sys.stderr, flush=True)
            continue
        return candidate
    raise DamagedCheckpoints(f"no intact checkpoint in {directory}: " + "; ".join(damaged))


class _OrbaxStepNotes(logging.Filter):
    """Drops orbax's log lines about a step's own metadata file that is missing or does not parse:
    orbax writes one each time it lists the steps (dozens in a resume), and labcore's digests find
    and name that damage in one line."""

    NOTES = ("Metadata file does not exist", "Failed to json parse Metadata file")

    def filter(self, record: logging.LogRecord) -> bool:
        return not any(note in record.getMessage() for note in self.NOTES)


def _manager(directory: str | os.PathLike, max_to_keep: int | None = 2) -> ocp.CheckpointManager:
    absl = logging.getLogger("absl")
    if not any(isinstance(existing, _OrbaxStepNotes) for existing in absl.filters):
        absl.addFilter(_OrbaxStepNotes())
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
    metadata = {**metadata, "digests": DIGEST_ALGORITHM}  # the promise verify() holds the step to
    with _manager(directory, max_to_keep) as manager:
        manager.save(
            step,
            args=ocp.args.Composite(state=ocp.args.StandardSave(state), metadata=ocp.args.JsonSave(metadata)),
            force=True,
        )
        manager.wait_until_finished()
    step_dir = Path(directory).absolute() / str(step)
    if jax.process_index() == 0:  # after orbax's commit, which waits for every process's files
        record_digests(step_dir)
    return step_dir


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
    """Only the JSON metadata of checkpoint ``step`` (default: the newest intact one), verified first."""
    step = intact_step(directory, step)
    with _manager(directory) as manager:
        return manager.restore(step, args=ocp.args.Composite(metadata=ocp.args.JsonRestore()))["metadata"]


def restore(directory: str | os.PathLike, like: Any, step: int | None = None) -> tuple[Any, dict[str, Any]]:
    """(state, metadata) of checkpoint ``step`` (default: the newest intact one), shaped like ``like``,
    its files verified first (see the module docstring).

    A checkpoint of the Flax Linen layout, which labcore's PPO wrote before its network moved to
    Flax NNX (every parameter dict one level down, under ``'params'``), restores too, into the
    plain dicts of ``like``.
    """
    step = intact_step(directory, step)
    with _manager(directory) as manager:
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
