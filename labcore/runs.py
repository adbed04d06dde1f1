"""A training run's results folder: one class, used by every driver and by the command line.

    run = RunDir.open("runs/vault", config, step_key="update", resume=False, overwrite=False)
    run.log({"update": 10, "episode_return": 3.2})        # metrics.jsonl, metrics.csv, TensorBoard
    checkpoint.save(run.checkpoints, step, state, metadata)
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
run's files, and only those) or ``resume`` is set. Resuming checks that the newest checkpoint was
written with the same config, then cuts the metrics back to that checkpoint: the rows a killed run
logged after its last checkpoint are dropped, because the resumed run logs those steps again, so
the files read as one uninterrupted run. That needs each row's ``step_key`` in the units of the
checkpoint steps (updates, agent steps, epochs...). The TensorBoard event files are then rebuilt
from the cut JSONL (labcore.logging.rebuild_tensorboard): a killed writer may not have written its
last points out, so its files cannot simply be cut and appended to.

``path=None`` gives an in-memory run (rows kept in ``rows``, nothing written), which is what
notebooks use. In a multi-process run every process opens the folder, and only the one with
``primary=True`` writes to it (the checkpoints are written by all of them together, through orbax).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from labcore.logging import CSV_NAME, JSONL_NAME, MetricsLogger, event_files, read_metrics, rebuild_tensorboard

CONFIG_NAME = "config.json"
SUMMARY_NAME = "summary.json"
PLOT_NAME = "metrics.png"
CHECKPOINTS_NAME = "checkpoints"
RUN_FILES = (CONFIG_NAME, JSONL_NAME, CSV_NAME, PLOT_NAME, SUMMARY_NAME, CHECKPOINTS_NAME)


def config_dict(config: Any) -> dict[str, Any]:
    """A config as plain JSON-able data: a dataclass's fields, or a mapping as it is."""
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        return dataclasses.asdict(config)
    return dict(config)


def checkpoint_dir(path: str | os.PathLike) -> Path:
    """The checkpoints of a run folder, or ``path`` itself when it is a checkpoints folder."""
    path = Path(path)
    return path / CHECKPOINTS_NAME if (path / CHECKPOINTS_NAME).is_dir() else path


class RunDir:
    """One run's folder: refuse or replace an earlier run, config, metrics, checkpoints, summary.

    Build it with ``RunDir.open``. Attributes: ``path`` (None: in memory), ``checkpoints`` (the
    checkpoint folder, None in memory), ``resume_step`` (the checkpoint step a resumed run starts
    from, else None), ``logger`` (the MetricsLogger; ``rows`` are its rows), ``primary`` (whether
    this process writes the folder).
    """

    def __init__(self, path: Path | None, step_key: str, resume_step: int | None, logger: MetricsLogger,
                 primary: bool = True):
        self.path = path
        self.step_key = step_key
        self.resume_step = resume_step
        self.logger = logger
        self.primary = primary

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
    ) -> RunDir:
        """Prepare ``path`` for a run of ``config`` (a dataclass or a mapping of its fields).

        resume: continue the run in ``path``; it must hold a checkpoint (else FileNotFoundError)
        whose metadata "config", where it has one, equals ``config`` (else ValueError, naming the
        fields that differ). Rows of metrics.jsonl and metrics.csv whose ``step_key`` is past that
        checkpoint's step are removed. Without resume, a folder holding any of RUN_FILES is
        refused (FileExistsError) unless ``overwrite``, which deletes those files (and the
        TensorBoard event files). config.json is written either way. tensorboard: also write the
        rows as TensorBoard event files (a resumed run's are rebuilt from its cut JSONL; without
        tensorboard, a resume removes them). primary=False (the other processes of a multi-process
        run): read the checkpoint step, write nothing, keep rows in memory.
        """
        if resume and overwrite:
            raise ValueError("resume and overwrite exclude each other: resume continues the run that overwrite would delete")
        if path is None:
            if resume:
                raise FileNotFoundError("resume: no run folder given (resume needs the folder of the run to continue)")
            return cls(None, step_key, None, MetricsLogger(None), primary)
        run_path = Path(path)
        checkpoints = run_path / CHECKPOINTS_NAME
        resume_step = None
        if resume:
            from labcore import checkpoint  # here: orbax loads only for a run that needs it

            resume_step = checkpoint.latest_step(checkpoints) if checkpoints.is_dir() else None
            if resume_step is None:
                raise FileNotFoundError(f"resume: no checkpoint in {checkpoints}")
            _check_config(checkpoints, resume_step, config)
        if not primary:
            return cls(run_path, step_key, resume_step, MetricsLogger(None), primary)
        if resume:
            cut_metrics(run_path, step_key, resume_step)
            rebuild_tensorboard(run_path, step_key, tensorboard)
        else:
            previous = [run_path / name for name in RUN_FILES if (run_path / name).exists()] + event_files(run_path)
            if previous and not overwrite:
                raise FileExistsError(
                    f"{run_path} holds an earlier run ({previous[0].name}); choose another folder, overwrite it, "
                    "or resume it (drivers that checkpoint their whole state can)"
                )
            for old in previous:
                shutil.rmtree(old) if old.is_dir() else old.unlink()
        run_path.mkdir(parents=True, exist_ok=True)
        (run_path / CONFIG_NAME).write_text(json.dumps(config_dict(config), indent=2) + "\n")
        return cls(run_path, step_key, resume_step, MetricsLogger(run_path, tensorboard=tensorboard, step_key=step_key),
                   primary)

    @property
    def checkpoints(self) -> Path | None:
        return None if self.path is None else self.path / CHECKPOINTS_NAME

    @property
    def rows(self) -> list[dict[str, Any]]:
        """The rows this process logged (a resumed run: only those since the resume)."""
        return self.logger.rows

    def history(self) -> list[dict[str, Any]]:
        """Every row of the run, a resumed run's earlier rows included (read back from metrics.jsonl)."""
        if self.path is None or not self.primary or not (self.path / JSONL_NAME).exists():
            return list(self.rows)
        return read_metrics(self.path)

    def log(self, row: Mapping[str, Any]) -> dict[str, Any]:
        """Append one metrics row (it should carry ``step_key``); returns it as plain numbers."""
        return self.logger.log(row)

    def finish(self, summary: Mapping[str, Any] | None = None, figure: Any = None) -> None:
        """Write summary.json and metrics.png, where given (a folder and the primary process only),
        and close the TensorBoard event file (a row logged later opens a new one).

        figure: a matplotlib figure, or a function of the run's rows (``history()``) returning
        one, called only when there is a folder to write it to and rows to plot. A figure is closed.
        """
        self.logger.close()
        writes = self.path is not None and self.primary
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


def _check_config(checkpoints: Path, step: int, config: Any) -> None:
    """ValueError unless checkpoint ``step`` was written with ``config`` (compared as JSON data)."""
    from labcore import checkpoint

    saved = checkpoint.restore_metadata(checkpoints, step).get("config")
    if not isinstance(saved, Mapping):
        return
    current = json.loads(json.dumps(config_dict(config)))  # tuples -> lists, as the metadata holds them
    different = sorted(name for name in current.keys() | saved.keys() if current.get(name) != saved.get(name))
    if different:
        raise ValueError(f"resume: the checkpoint in {checkpoints} was written with a different config: {different}")


def progress_bar(total: int, *, desc: str, unit: str, initial: int = 0, enabled: bool = True, unit_scale: bool = False):
    """The drivers' tqdm bar. mininterval 2 s: a notebook's stored output stays small."""
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, desc=desc, unit=unit, unit_scale=unit_scale, disable=not enabled,
                mininterval=2.0)


def cut_metrics(run_path: str | os.PathLike, step_key: str, last_step: int) -> int:
    """Drop the rows of metrics.jsonl / metrics.csv whose ``step_key`` is greater than ``last_step``.

    Returns how many rows of metrics.jsonl were dropped. Rows without ``step_key`` are kept. A
    last line without its newline was being written when the run was killed: it is dropped, as is
    a line that does not parse. Each file is rewritten to a temporary name and moved into place,
    so a kill mid-way leaves the old file or the new one, never half of one.
    """
    run_path = Path(run_path)
    jsonl = run_path / JSONL_NAME
    dropped = 0
    if jsonl.exists():
        text = jsonl.read_text()
        lines = _complete_lines(text)
        kept = []
        for line in lines:
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if not (isinstance(row, dict) and _past(row.get(step_key), last_step)):
                kept.append(line)
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
