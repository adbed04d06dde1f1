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
``damaged-checkpoints/`` and the one before it tried: ``labcore.run_restore``), checks that it was written with the same
config, then cuts the metrics back to it (``labcore.logging.cut_metrics``): the rows a killed run logged after its last checkpoint are
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

import json
import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from labcore import run_restore
from labcore.logging import CSV_NAME, JSONL_NAME, MetricsLogger, cut_metrics, event_files, read_metrics, rebuild_tensorboard
from labcore.run_layout import CHECKPOINTS_NAME, checkpoint_dir, config_dict, config_from_dict  # noqa: F401 (runs.*)
from labcore.run_lock import hold_folder, holds, release_folder

CONFIG_NAME = "config.json"
SUMMARY_NAME = "summary.json"
PLOT_NAME = "metrics.png"
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
            run_restore.check_resume(run_path / CHECKPOINTS_NAME, steps[-1], config, written_with)
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
        self.resume_step, self.restored = run_restore.restore_intact(self.checkpoints, like, config, written_with, self.primary)
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
