"""Resuming a run from its newest intact checkpoint: what ``labcore.runs.RunDir.restore`` does with a
checkpoint folder before the run goes on.

A resume reads the checkpoints newest first. One whose save never finished, or whose files fail to
restore (a damaged or half-written file: orbax and tensorstore raise many kinds), is named in one line
on stderr and moved to ``damaged-checkpoints/`` beside ``checkpoints/`` (``DAMAGED_NAME``; by the
primary process, so that the resumed run's own checkpoints replace it), and the one before it is
tried; when none restores, ``labcore.checkpoint.DamagedCheckpoints`` names each. Before anything is
restored, ``check_resume`` refuses a checkpoint of another algorithm, of another config or written
with other settings (``written_with``: the number of seeds, the devices), naming what differs.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from labcore.run_layout import config_dict

DAMAGED_NAME = "damaged-checkpoints"


def restore_intact(
    checkpoints: Path, like: Any, config: Any, written_with: Mapping[str, Any] | None, primary: bool
) -> tuple[int, tuple[Any, dict[str, Any]]]:
    """(step, (state, metadata)) of the newest checkpoint in ``checkpoints`` that restores."""
    from labcore import checkpoint  # here: orbax loads only for a run that needs it

    steps = checkpoint.all_steps(checkpoints)
    if not steps:
        raise FileNotFoundError(f"resume: no checkpoint in {checkpoints}")
    if primary:  # a save that never finished: out of orbax's way (it would save that step again beside it)
        for stray in checkpoint.unfinished(checkpoints):
            print(f"labcore: {stray} is a checkpoint whose save never finished: moved to {DAMAGED_NAME}/",
                  file=sys.stderr, flush=True)
            set_aside(checkpoints, stray)
    damaged: list[str] = []
    for step in reversed(steps):
        try:
            target = like(checkpoint.restore_metadata(checkpoints, step)) if callable(like) else like
            state, metadata = checkpoint.restore(checkpoints, target, step)
        except checkpoint.WrongCheckpoint:  # another algorithm's (``checkpoint.expecting``), not damage
            raise
        except Exception as err:  # noqa: BLE001  (orbax and tensorstore raise many kinds on a damaged file)
            reason = _first_cause(err)
            _quiet_abandoned_reads()
            damaged.append(f"step {step} ({reason[:300]})")
            print(f"labcore: checkpoint {step} in {checkpoints} is damaged and is not used: {reason[:300]}",
                  file=sys.stderr, flush=True)
            continue
        if damaged:
            check_resume(checkpoints, step, config, written_with)
            print(f"labcore: resuming from checkpoint {step}, the newest intact one", file=sys.stderr, flush=True)
            if primary:  # out of orbax's folder, so that the resumed run's checkpoints replace them
                for newer in (s for s in steps if s > step):
                    set_aside(checkpoints, checkpoints / str(newer))
        return step, (state, metadata)
    raise checkpoint.DamagedCheckpoints(f"resume: no intact checkpoint in {checkpoints}: " + "; ".join(damaged))


def set_aside(checkpoints: Path, folder: Path) -> Path:
    """Move a damaged or unfinished checkpoint folder to ``DAMAGED_NAME`` beside ``checkpoints``, kept for a look."""
    aside = checkpoints.parent / DAMAGED_NAME
    aside.mkdir(exist_ok=True)
    target, copy = aside / folder.name, 1
    while target.exists():  # damaged before, at the same step
        target, copy = aside / f"{folder.name}.{copy}", copy + 1
    shutil.move(str(folder), str(target))
    return target


def _quiet_abandoned_reads() -> None:
    """Silence what orbax leaves behind when a restore fails part-way: its other reads of the same
    checkpoint are abandoned, and as they are collected or call back into the closed event loop,
    Python prints "Task exception was never retrieved", "Exception ignored in: <coroutine ...>" and
    "RuntimeError: Event loop is closed" tracebacks, dozens of them, each repeating the one failure
    already reported in one line. Only those are dropped; any other warning still prints."""
    import gc
    import logging
    import threading

    if getattr(_quiet_abandoned_reads, "installed", False):
        gc.collect()
        return

    def abandoned(exc: BaseException | None, obj: Any = None) -> bool:
        if isinstance(exc, RuntimeError) and "Event loop is closed" in str(exc):
            return True
        return "orbax" in repr(obj) or "_read_array_index" in repr(obj) or (
            exc is not None and "Encountered error while reading array" in str(exc))

    previous_unraisable, previous_thread_hook = sys.unraisablehook, threading.excepthook

    def unraisable(info) -> None:
        if not abandoned(info.exc_value, info.object):
            previous_unraisable(info)

    def thread_hook(args) -> None:
        if not abandoned(args.exc_value):
            previous_thread_hook(args)

    class Unretrieved(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            exc = record.exc_info[1] if record.exc_info else None
            return not ("never retrieved" in record.getMessage() and abandoned(exc, record.getMessage()))

    sys.unraisablehook, threading.excepthook = unraisable, thread_hook
    logging.getLogger("asyncio").addFilter(Unretrieved())
    _quiet_abandoned_reads.installed = True
    gc.collect()


def _first_cause(err: BaseException) -> str:
    """The first line of the innermost exception behind ``err`` (orbax wraps tensorstore's, which
    says what is wrong: DATA_LOSS, a failed checksum, a corrupt block), with its type."""
    while (err.__cause__ or err.__context__) is not None:
        err = err.__cause__ or err.__context__
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0] if text else ''}"


def check_resume(checkpoints: Path, step: int, config: Any, written_with: Mapping[str, Any] | None = None) -> None:
    """ValueError unless checkpoint ``step`` was written by ``written_with["algorithm"]`` (first:
    ``checkpoint.expect``), with ``config`` (compared as JSON data) and with each other entry of
    ``written_with`` (a missing entry reads as None). A checkpoint whose metadata cannot be read is
    left to the restore, which reports it."""
    from labcore import checkpoint

    try:
        metadata = checkpoint.restore_metadata(checkpoints, step)
    except Exception:  # noqa: BLE001
        return
    written_with = dict(written_with or {})
    checkpoint.expect(metadata, written_with.pop("algorithm", ""), checkpoints.parent)
    for name, wanted in written_with.items():
        if metadata.get(name) != wanted:
            raise ValueError(f"{name}: the run in {checkpoints.parent} was written with {name}={metadata.get(name)}, "
                             f"this resume asks for {name}={wanted}; resume it with {name}={metadata.get(name)}")
    saved = metadata.get("config")
    if not isinstance(saved, Mapping):
        return
    current = json.loads(json.dumps(config_dict(config)))  # tuples -> lists, as the metadata holds them
    different = sorted(name for name in current.keys() | saved.keys() if current.get(name) != saved.get(name))
    if different:
        held = f" (algorithm {metadata['algorithm']})" if metadata.get("algorithm") else ""  # maybe another driver's
        raise ValueError(f"resume: the checkpoint in {checkpoints}{held} was written with a different config: {different}")
