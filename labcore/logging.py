"""Training metrics: one JSON object per line (and the same rows as CSV and TensorBoard event files), plus plots.

    logger = MetricsLogger("runs/cartpole")      # metrics.jsonl, metrics.csv, events.out.tfevents.*
    logger.log({"step": 1000, "loss": 0.3, "episode_return": 21.0})
    logger.close()                               # the last TensorBoard points on disk
    rows = read_metrics("runs/cartpole")         # list of dicts, for plots or pandas
    plot_metrics(rows, ["episode_return", "loss", "epsilon"])
    scalars = read_tensorboard_scalars("runs/cartpole")   # {"loss": [(1000, 0.3)], ...}

JSONL is the record (any keys, appendable across a resumed run); the CSV mirrors it for
spreadsheets, with the columns of the first row written. The TensorBoard event files mirror it
for TensorBoard: every number of a row but its step becomes a scalar (tag: the key) at the row's
step (``step_key``), written by tensorboardX's SummaryWriter into the run folder itself, so that

    tensorboard --logdir runs                    # every run folder below runs/ is one run
    %load_ext tensorboard                        # in Colab or Jupyter, then:
    %tensorboard --logdir runs

shows every run by its folder's name. Values that are not numbers (None, NaN, text, lists,
booleans) and rows without a step are left out of the event files, not of the JSONL. The writer
hands points to a thread that writes them out; each row is flushed, and that thread flushes at
least every second, so a reader (TensorBoard, ``read_tensorboard_scalars``) sees a row within about
a second, and ``close`` writes everything. A process killed before that can lose its last second
of points, which is why a resumed run rebuilds the event files from the JSONL
(``rebuild_tensorboard``, called by labcore.runs.RunDir) instead of appending to them.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import math
import os
import sys
import weakref
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

JSONL_NAME = "metrics.jsonl"
CSV_NAME = "metrics.csv"
EVENT_FILES = "events.out.tfevents.*"  # TensorBoard's own name pattern: it reads only files that match
FLUSH_SECONDS = 1  # the writer thread's longest wait before it puts written points on disk


def _plain(value: Any) -> Any:
    """numpy / jax scalars -> Python numbers and arrays -> lists of them, so json can write them; NaN -> None."""
    if hasattr(value, "tolist") and getattr(value, "ndim", 0) > 0:
        return [_plain(item) for item in value.tolist()]
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _is_number(value: Any) -> bool:
    """A value TensorBoard can plot: an int or a finite float (bool is not a metric here)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def event_files(run_dir: str | os.PathLike) -> list[Path]:
    """The TensorBoard event files directly in ``run_dir``, in the order TensorBoard reads them."""
    return sorted(Path(run_dir).glob(EVENT_FILES))


def _summary_writer(run_dir: Path):
    """A tensorboardX SummaryWriter with a new event file in ``run_dir``.

    The file name ends in a counter of the files already there: tensorboardX names a file by the
    second it was opened and the host, so two writers opened in the same second (a resume right
    after a rebuild) would otherwise share a name, the second truncating the first. The counter
    also keeps the files of one second in the order they were written, which is the order
    TensorBoard reads them in (it sorts the names).
    """
    from tensorboardX import SummaryWriter  # here: a run without a folder (a notebook's) never loads it

    return SummaryWriter(str(run_dir), flush_secs=FLUSH_SECONDS, filename_suffix=f".{len(event_files(run_dir)):04d}")


def _write_scalars(writer, row: Mapping[str, Any], step_key: str, walltime: float | None = None) -> bool:
    """Every number of ``row`` but its step, at that step; False when the row has no step."""
    step = row.get(step_key)
    if not _is_number(step):
        return False
    for key, value in row.items():
        if key != step_key and _is_number(value):
            writer.add_scalar(key, value, global_step=int(step), walltime=walltime)
    return True


class MetricsLogger:
    """Appends metric rows to ``run_dir/metrics.jsonl`` and ``run_dir/metrics.csv``, and, with
    ``tensorboard`` (the default), to TensorBoard event files in ``run_dir``.

    run_dir None keeps rows in memory only (``rows``), which is what notebooks use for plots.
    step_key: the key of a row's position (its TensorBoard step; an integer). The event files'
    writer opens at the first row that has a number to write, so a logger that logs nothing
    leaves no empty event file; ``close`` (also on leaving a ``with`` block) writes the last points
    and ends it, and a later row opens a new file.
    """

    def __init__(self, run_dir: str | os.PathLike | None = None, *, tensorboard: bool = True, step_key: str = "step"):
        self.rows: list[dict[str, Any]] = []
        self.run_dir = None if run_dir is None else Path(run_dir)
        self.tensorboard = tensorboard and self.run_dir is not None
        self.step_key = step_key
        self._writer = None
        self._csv_columns: list[str] | None = None
        if self.run_dir is not None:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            csv_path = self.run_dir / CSV_NAME
            if csv_path.exists() and csv_path.stat().st_size > 0:  # resuming: keep the header we wrote
                with open(csv_path, newline="") as f:
                    self._csv_columns = next(csv.reader(f))

    def log(self, row: Mapping[str, Any]) -> dict[str, Any]:
        plain = {key: _plain(value) for key, value in row.items()}
        self.rows.append(plain)
        if self.run_dir is not None:
            with open(self.run_dir / JSONL_NAME, "a") as f:
                f.write(json.dumps(plain) + "\n")
            with open(self.run_dir / CSV_NAME, "a", newline="") as f:
                if self._csv_columns is None:
                    self._csv_columns = list(plain)
                    csv.writer(f).writerow(self._csv_columns)
                csv.writer(f).writerow([plain.get(column, "") for column in self._csv_columns])
        if self.tensorboard and _is_number(plain.get(self.step_key)) and any(
            key != self.step_key and _is_number(value) for key, value in plain.items()
        ):
            if self._writer is None:
                self._writer = _summary_writer(self.run_dir)
                # A driver that raises (or a notebook cell interrupted) never reaches close(): the
                # writer's thread and file are closed when the logger is collected, or at exit.
                self._close_writer = weakref.finalize(self, self._writer.close)
            _write_scalars(self._writer, plain, self.step_key)
            self._writer.flush()
        return plain

    def close(self) -> None:
        """Write the pending TensorBoard points and close the event file (the JSONL and CSV need nothing)."""
        if self._writer is not None:
            self._close_writer()  # writer.close(), once: the finalizer is spent
            self._writer = None

    def __enter__(self) -> MetricsLogger:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def read_metrics(run_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """The rows of ``run_dir/metrics.jsonl`` in order."""
    with open(Path(run_dir) / JSONL_NAME) as f:
        return [json.loads(line) for line in f if line.strip()]


def _scalar_events(path: str | os.PathLike) -> dict[str, list[Any]]:
    """{tag: [ScalarEvent(wall_time, step, value), ...]} of the event files at ``path``."""
    from tensorboard.backend.event_processing import event_accumulator

    # size_guidance 0: keep every point (the default keeps a reservoir sample of 10,000 per tag)
    accumulator = event_accumulator.EventAccumulator(str(path), size_guidance={event_accumulator.SCALARS: 0})
    accumulator.Reload()
    return {tag: accumulator.Scalars(tag) for tag in accumulator.Tags()[event_accumulator.SCALARS]}


def read_tensorboard_scalars(path: str | os.PathLike) -> dict[str, list[tuple[int, float]]]:
    """{tag: [(step, value), ...]} of the event files in a run folder (or of one event file),
    read by TensorBoard's own reader, every point kept, in the order written. Values are float32,
    as TensorBoard stores them."""
    return {tag: [(event.step, event.value) for event in events] for tag, events in _scalar_events(path).items()}


def rebuild_tensorboard(run_dir: str | os.PathLike, step_key: str, tensorboard: bool = True) -> int:
    """Replace the event files in ``run_dir`` by one written from ``run_dir/metrics.jsonl``; returns
    the number of rows written.

    A resumed run calls this after cutting the JSONL back to its checkpoint (labcore.runs), so the
    event files hold the same rows as the JSONL, neither the points the killed run logged past
    its checkpoint nor holes where it died before writing its last points out. A point keeps the
    wall time it was first written at, where the old files hold it. tensorboard=False removes
    the event files (a run resumed without TensorBoard keeps none that disagree with its JSONL).
    """
    run_dir = Path(run_dir)
    old = event_files(run_dir)
    wall_times: dict[int, float] = {}
    if tensorboard and old:
        for event in itertools.chain.from_iterable(_scalar_events(run_dir).values()):
            wall_times.setdefault(event.step, event.wall_time)
    for path in old:
        path.unlink()
    rows = read_metrics(run_dir) if tensorboard and (run_dir / JSONL_NAME).exists() else []
    written = 0
    if rows:
        writer = _summary_writer(run_dir)
        for row in rows:
            step = row.get(step_key)
            written += _write_scalars(writer, row, step_key, wall_times.get(int(step)) if _is_number(step) else None)
        writer.close()
    return written


def column(rows: Iterable[Mapping[str, Any]], key: str, x_key: str = "step") -> tuple[list, list]:
    """(x, y) pairs of the rows that have a non-missing ``key``."""
    pairs = [(row[x_key], row[key]) for row in rows if row.get(key) is not None and row.get(x_key) is not None]
    return [x for x, _ in pairs], [y for _, y in pairs]


def plot_metrics(rows: Sequence[Mapping[str, Any]], keys: Sequence[str], x_key: str = "step", title: str | None = None):
    """One small panel per metric against ``x_key``; returns the matplotlib figure."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(keys), figsize=(4 * len(keys), 3), squeeze=False)
    for ax, key in zip(axes[0], keys):
        x, y = column(rows, key, x_key)
        ax.plot(x, y)
        ax.set_xlabel(x_key)
        ax.set_title(key)
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


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
