"""A training run's results folder: one class, used by every driver and by the command line.

    run = RunDir.open("runs/vault", config, step_key="update", resume=False, overwrite=False)
    run.log({"update": 10, "episode_return": 3.2})        # metrics.jsonl, metrics.csv, TensorBoard
    checkpoint.save_run(run.checkpoints, step, state, algorithm="ppo", driver=__name__, config=config)
    run.finish(summary, plot)                             # summary.json and metrics.png

A run folder holds:

    config.json         every field of the run's config
    metrics.jsonl/.csv  one row per log (labcore.logging); ``step_key`` names the row's position
    events.out.tfevents.*  the same rows for TensorBoard (``tensorboard=True``, the default), each
                        number at the row's ``step_key``: ``tensorboard --logdir runs`` shows the run
    metrics.png         the driver's plot of those rows
    checkpoints/        orbax checkpoints (labcore.checkpoint), one step per save
    summary.json        the finished run's numbers

Opening a folder that holds an earlier run is refused unless ``overwrite`` (which deletes that
run's files, and only those) or ``resume`` is set. Resuming restores the newest intact checkpoint
(``RunDir.open(..., resume=True, like=state)``; a damaged one is named in one line, moved to
``damaged-checkpoints/`` and the one before it tried), checks that it was written with the same
config, then cuts the metrics back to it: the rows a killed run logged after its last checkpoint are
dropped, because the resumed run logs those steps again, so the files read as one uninterrupted run. That needs each row's ``step_key`` in the units of the
checkpoint steps (updates, agent steps, epochs...). The TensorBoard event files are then rebuilt
from the cut JSONL (labcore.logging.rebuild_tensorboard): a killed writer may not have written its
last points out, so its files cannot simply be cut and appended to.

``path=None`` gives an in-memory run (rows kept in ``rows``, nothing written), which is what
notebooks use. In a multi-process run every process opens the folder, and only the one with
``primary=True`` writes to it (the checkpoints are written by all of them together, through orbax).

**One writer per folder.** The process that opens a folder to write it (a new run, an overwrite or
a resume; the primary one of a multi-process run) holds a lock on it (``labcore.run_lock``:
``fcntl.flock``, released by the operating system when the process ends, however it ends, and by
``finish``). A second writer is refused (``run_lock.FolderInUse``) in one line naming the folder and the
process that holds it (pid, host, start); a lock left by a killed process holds nothing, so a
``--resume`` after a kill goes ahead. Readers (``load_checkpoint``, ``eval``, TensorBoard) take no
lock and are never blocked. The same process may open the folder again (a notebook cell run twice).
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from labcore.logging import CSV_NAME, JSONL_NAME, MetricsLogger, event_files, read_metrics, rebuild_tensorboard
from labcore.run_layout import CHECKPOINTS_NAME, checkpoint_dir, config_dict, config_from_dict  # noqa: F401 (runs.*)
from labcore.run_lock import hold_folder, holds, release_folder

CONFIG_NAME = "config.json"
SUMMARY_NAME = "summary.json"
PLOT_NAME = "metrics.png"
DAMAGED_NAME = "damaged-checkpoints"
RUN_FILES = (CONFIG_NAME, JSONL_NAME, CSV_NAME, PLOT_NAME, SUMMARY_NAME, CHECKPOINTS_NAME)


class RunDir:
    """One run's folder: refuse or replace an earlier run, config, metrics, checkpoints, summary.

    Build it with ``RunDir.open``. Attributes: ``path`` (None: in memory), ``checkpoints`` (the
    checkpoint folder, None in memory), ``resume_step`` (the checkpoint step a resumed run starts
    from, else None), ``restored`` (a resumed run's ``(state, metadata)`` from that checkpoint, else
    None), ``logger`` (the MetricsLogger; ``rows`` are its rows), ``primary`` (whether this process
    writes the folder).
    """

    def __init__(self, path: Path | None, step_key: str, resume_step: int | None, logger: MetricsLogger,
                 primary: bool = True, restored: tuple[Any, dict[str, Any]] | None = None):
        self.path = path
        self.step_key = step_key
        self.resume_step = resume_step
        self.logger = logger
        self.primary = primary
        self.restored = restored
        self._resume_with: tuple[Any, bool, Mapping[str, Any] | None] | None = None  # (config, tensorboard, written_with) until restore()

    @classmethod
    def open(
        cls,
        path: str | os.PathLike | None,
        config: Any,
        *,
        step_key: str,
        resume: bool = False,
        overwrite: bool = False,
        primary: bool = True,
        tensorboard: bool = True,
        like: Any = None,
        written_with: Mapping[str, Any] | None = None,
    ) -> RunDir:
        """Prepare ``path`` for a run of ``config`` (a dataclass or a mapping of its fields).

        resume: continue the run in ``path`` from its newest intact checkpoint, which ``restore``
        (called here when ``like`` is given) reads back; until then nothing is written and
        ``log`` refuses. The newest checkpoint's metadata "config", where it has one, must equal
        ``config`` (else ValueError, naming the fields that differ), and so must every entry of
        ``written_with`` (other metadata a resume must match, e.g. {"seeds": 4}; else ValueError
        naming it). Its "algorithm" entry (a registry name) is checked first: a checkpoint of another
        is ``labcore.checkpoint.WrongCheckpoint``, one that names none is taken (``checkpoint.expect``).
        No checkpoint is a FileNotFoundError. Without resume, a folder holding any of RUN_FILES is refused
        (FileExistsError) unless ``overwrite``, which deletes those files (and the TensorBoard event
        files). A ``path`` that is a file is refused (NotADirectoryError). config.json is written
        either way. tensorboard: also write the rows as TensorBoard event files (a resumed run's are
        rebuilt from its cut JSONL; without tensorboard, a resume removes them). primary=False (the
        other processes of a multi-process run): restore the same checkpoint, write nothing, keep
        rows in memory.
        """
        if resume and overwrite:
            raise ValueError("resume and overwrite exclude each other: resume continues the run that overwrite would delete")
        if path is None:
            if resume:
                raise FileNotFoundError("resume: no run folder given (resume needs the folder of the run to continue)")
            return cls(None, step_key, None, MetricsLogger(None), primary)
        run_path = Path(path)
        if run_path.exists() and not run_path.is_dir():
            raise NotADirectoryError(f"run folder {run_path} is a file, not a folder: choose another run folder")
        if resume and not run_path.is_dir():
            raise FileNotFoundError(f"resume: no checkpoint in {run_path / CHECKPOINTS_NAME}")
        if not primary:
            return cls._open_folder(run_path, config, step_key, resume, overwrite, primary, tensorboard, like,
                                    written_with)
        held = holds(run_path)
        hold_folder(run_path)  # before anything is read for a resume, moved aside or deleted
        try:
            return cls._open_folder(run_path, config, step_key, resume, overwrite, primary, tensorboard, like,
                                    written_with)
        except BaseException:
            if not held:  # a refused or failed open leaves the folder free, as it found it
                release_folder(run_path)
            raise

    @classmethod
    def _open_folder(cls, run_path: Path, config: Any, step_key: str, resume: bool, overwrite: bool, primary: bool,
                     tensorboard: bool, like: Any, written_with: Mapping[str, Any] | None) -> RunDir:
        if resume:
            from labcore import checkpoint  # here: orbax loads only for a run that needs it

            steps = checkpoint.all_steps(run_path / CHECKPOINTS_NAME)
            if not steps:
                raise FileNotFoundError(f"resume: no checkpoint in {run_path / CHECKPOINTS_NAME}")
            _check_config(run_path / CHECKPOINTS_NAME, steps[-1], config, written_with)
            run = cls(run_path, step_key, None, None, primary)
            run._resume_with = (config, tensorboard, written_with)
            return run if like is None else run.restore(like)
        if primary:
            previous = _earlier_run(run_path)
            if previous and not overwrite:
                raise FileExistsError(
                    f"{run_path} holds an earlier run ({previous[0].name}); choose another folder, overwrite it, "
                    "or resume it (drivers that checkpoint their whole state can)"
                )
            for old in previous:
                shutil.rmtree(old) if old.is_dir() else old.unlink()
        return cls(run_path, step_key, None, _start(run_path, config, step_key, tensorboard, primary), primary)

    def restore(self, like: Any) -> RunDir:
        """Read back the newest intact checkpoint of a run opened with ``resume=True``; returns self.

        ``like`` is the state to restore into (a pytree of the saved structure, see
        ``labcore.checkpoint.restore``), or a function of the checkpoint's metadata returning one.
        A checkpoint that fails to restore (a damaged or half-written file) is reported on stderr
        in one line and moved to ``damaged-checkpoints/`` beside ``checkpoints/`` (by the primary
        process, so that the resumed run's own checkpoints replace it), and the one before it is
        tried; when none restores, ``labcore.checkpoint.DamagedCheckpoints`` (a RuntimeError) names each. Then ``resume_step`` is the step
        restored, ``restored`` its ``(state, metadata)``, the metrics rows past that step are cut
        (see the module docstring) and logging starts.
        """
        if self._resume_with is None:
            raise RuntimeError("restore: this run folder was not opened with resume=True, or is restored already")
        config, tensorboard, written_with = self._resume_with
        self.resume_step, self.restored = _restore_intact(self.checkpoints, like, config, written_with, self.primary)
        if self.primary:
            _check_config_file(self.path, config)
            cut_metrics(self.path, self.step_key, self.resume_step)
            rebuild_tensorboard(self.path, self.step_key, tensorboard)
        self.logger = _start(self.path, config, self.step_key, tensorboard, self.primary)
        self._resume_with = None
        return self

    @property
    def awaiting_restore(self) -> bool:
        """True for a run opened with ``resume=True`` until ``restore`` has read its checkpoint."""
        return self._resume_with is not None

    @property
    def checkpoints(self) -> Path | None:
        return None if self.path is None else self.path / CHECKPOINTS_NAME

    @property
    def rows(self) -> list[dict[str, Any]]:
        """The rows this process logged (a resumed run: only those since the resume)."""
        return [] if self.logger is None else self.logger.rows

    def history(self) -> list[dict[str, Any]]:
        """Every row of the run, a resumed run's earlier rows included (read back from metrics.jsonl)."""
        if self.path is None or not self.primary or not (self.path / JSONL_NAME).exists():
            return list(self.rows)
        return read_metrics(self.path)

    def log(self, row: Mapping[str, Any]) -> dict[str, Any]:
        """Append one metrics row (it should carry ``step_key``); returns it as plain numbers."""
        if self.logger is None:
            raise RuntimeError("log: a resumed run logs only after restore() has read its checkpoint")
        return self.logger.log(row)

    def finish(self, summary: Mapping[str, Any] | None = None, figure: Any = None) -> None:
        """Write summary.json and metrics.png, where given (a folder and the primary process only),
        and close the TensorBoard event file (a row logged later opens a new one).

        figure: a matplotlib figure, or a function of the run's rows (``history()``) returning
        one, called only when there is a folder to write it to and rows to plot. A figure is closed.
        """
        if self.logger is not None:
            self.logger.close()
        writes = self.path is not None and self.primary
        try:
            self._finish_files(writes, summary, figure)
        finally:
            if writes:
                release_folder(self.path)

    def _finish_files(self, writes: bool, summary: Mapping[str, Any] | None, figure: Any) -> None:
        if writes and summary is not None:
            (self.path / SUMMARY_NAME).write_text(json.dumps(dict(summary), indent=2) + "\n")
        if callable(figure):
            rows = self.history() if writes else []
            figure = figure(rows) if rows else None
        if figure is not None:
            if writes:
                figure.savefig(self.path / PLOT_NAME, dpi=100)
            import matplotlib.pyplot as plt

            plt.close(figure)


def _check_config_file(run_path: Path, config: Any) -> None:
    """Say in one line when a resumed run's config.json is missing, unreadable or not the config the
    checkpoint was written with (a person edited it): the resume rewrites it from that config."""
    path = run_path / CONFIG_NAME
    if not path.exists():
        problem = "was missing"
    else:
        try:
            written = json.loads(path.read_text())
        except ValueError:
            written, problem = None, "could not be read"
        else:
            problem = None if written == json.loads(json.dumps(config_dict(config))) else "differed from the run's config"
    if problem:
        print(f"labcore: {path} {problem}: rewritten from the config the checkpoint was written with",
              file=sys.stderr, flush=True)


def _earlier_run(run_path: Path) -> list[Path]:
    """The files of an earlier run in the folder (the writer lock file is not one)."""
    return [run_path / name for name in RUN_FILES if (run_path / name).exists()] + event_files(run_path)


def _start(run_path: Path, config: Any, step_key: str, tensorboard: bool, primary: bool) -> MetricsLogger:
    """Write config.json (primary process) and return the logger of the run's rows."""
    if not primary:
        return MetricsLogger(None)
    run_path.mkdir(parents=True, exist_ok=True)
    (run_path / CONFIG_NAME).write_text(json.dumps(config_dict(config), indent=2) + "\n")
    return MetricsLogger(run_path, tensorboard=tensorboard, step_key=step_key)


def _restore_intact(
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
            _set_aside(checkpoints, stray)
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
            _check_config(checkpoints, step, config, written_with)
            print(f"labcore: resuming from checkpoint {step}, the newest intact one", file=sys.stderr, flush=True)
            if primary:  # out of orbax's folder, so that the resumed run's checkpoints replace them
                for newer in (s for s in steps if s > step):
                    _set_aside(checkpoints, checkpoints / str(newer))
        return step, (state, metadata)
    raise checkpoint.DamagedCheckpoints(f"resume: no intact checkpoint in {checkpoints}: " + "; ".join(damaged))


def _set_aside(checkpoints: Path, folder: Path) -> Path:
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


def _check_config(checkpoints: Path, step: int, config: Any, written_with: Mapping[str, Any] | None = None) -> None:
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


def progress_bar(total: int, *, desc: str, unit: str, initial: int = 0, enabled: bool = True, unit_scale: bool = False):
    """The drivers' tqdm bar. mininterval 2 s: a notebook's stored output stays small."""
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, desc=desc, unit=unit, unit_scale=unit_scale, disable=not enabled,
                mininterval=2.0)


def cut_metrics(run_path: str | os.PathLike, step_key: str, last_step: int) -> int:
    """Drop the rows of metrics.jsonl / metrics.csv whose ``step_key`` is greater than ``last_step``.

    Returns how many rows of metrics.jsonl were dropped. Rows without ``step_key`` are kept. A
    last line without its newline was being written when the run was killed: it is dropped, as is
    a line that does not parse, each said in one line on stderr (a repair, not the rows a resume
    logs again). Each file is rewritten to a temporary name and moved into place, so a kill mid-way
    leaves the old file or the new one, never half of one.
    """
    run_path = Path(run_path)
    jsonl = run_path / JSONL_NAME
    dropped = 0
    if jsonl.exists():
        text = jsonl.read_text(errors="replace")
        lines = _complete_lines(text)
        if text.strip() and not text.endswith("\n"):
            print(f"labcore: {jsonl} ended in a line cut short (its writer was stopped mid-line): dropped",
                  file=sys.stderr, flush=True)
        kept, unreadable = [], 0
        for line in lines:
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                unreadable += 1
                continue
            if not (isinstance(row, dict) and _past(row.get(step_key), last_step)):
                kept.append(line)
        if unreadable:
            print(f"labcore: {jsonl} held {unreadable} line(s) that do not parse: dropped", file=sys.stderr, flush=True)
        dropped = sum(1 for piece in text.split("\n") if piece.strip()) - len(kept)
        _replace(jsonl, "".join(line + "\n" for line in kept))
    csv_path = run_path / CSV_NAME
    if csv_path.exists():
        table = list(csv.reader(io.StringIO("".join(line + "\n" for line in _complete_lines(csv_path.read_text())))))
        buffer = io.StringIO()
        if table:
            header, body = table[0], table[1:]
            index = header.index(step_key) if step_key in header else None
            body = [r for r in body if len(r) == len(header) and (index is None or not _past(_number(r[index]), last_step))]
            csv.writer(buffer).writerows([header, *body])
        _replace(csv_path, buffer.getvalue())
    return dropped


def _complete_lines(text: str) -> list[str]:
    """The lines of ``text`` that end with a newline, blank ones left out."""
    lines = text.split("\n")[:-1]  # the piece after the last newline is unfinished (or empty)
    return [line.rstrip("\r") for line in lines if line.strip()]


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _past(value: Any, last_step: int) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > last_step


def _replace(path: Path, text: str) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(text)
    os.replace(temporary, path)
