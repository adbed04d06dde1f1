"""Training metrics: one JSON object per line (and the same rows as CSV), plus plots.

    logger = MetricsLogger("runs/cartpole")      # writes metrics.jsonl and metrics.csv there
    logger.log({"step": 1000, "loss": 0.3, "episode_return": 21.0})
    rows = read_metrics("runs/cartpole")         # list of dicts, for plots or pandas
    plot_metrics(rows, ["episode_return", "loss", "epsilon"])

JSONL is the record (any keys, appendable across a resumed run); the CSV mirrors it for
spreadsheets, with the columns of the first row written.
"""

from __future__ import annotations

import csv
import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

JSONL_NAME = "metrics.jsonl"
CSV_NAME = "metrics.csv"


def _plain(value: Any) -> Any:
    """numpy / jax scalars -> Python numbers, so json can write them; NaN -> None."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class MetricsLogger:
    """Appends metric rows to ``run_dir/metrics.jsonl`` and ``run_dir/metrics.csv``.

    run_dir None keeps rows in memory only (``rows``), which is what notebooks use for plots.
    """

    def __init__(self, run_dir: str | os.PathLike | None = None):
        self.rows: list[dict[str, Any]] = []
        self.run_dir = None if run_dir is None else Path(run_dir)
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
        return plain


def read_metrics(run_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """The rows of ``run_dir/metrics.jsonl`` in order."""
    with open(Path(run_dir) / JSONL_NAME) as f:
        return [json.loads(line) for line in f if line.strip()]


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
