"""The run of a host-driven training loop: the folder, bar, rows and summary of ``labcore.loop.train``.

Four drivers keep a Python loop of their own instead of a compiled ``labcore.loop.Program``, because
what they step lives on the host: the DQN host loop over gymnasium envs
(``labcore.agents.dqn.host_loop``), the Ray actor-learner (``labcore.agents.dqn.actor_learner``),
IQN's host modes (``labcore.agents.iqn.run``) and the GFlowNet's host trainers
(``labcore.agents.gflownet.run``). Everything around their loop is the shared driver's, through one
``HostRun``:

    host = HostRun.open(run_dir, config, name="DQN on CartPole-v1", total_steps=50_000)
    ...                                              # a resume restores its checkpoint from host.run
    host.start(steps=0)                              # the clock, and the progress bar from there
    host.advance(steps)                              # the bar, as the loop goes
    host.log(update, {"loss": 0.1}, steps=steps)     # {"update": ..., "timesteps": ..., "loss": 0.1}
    result = host.finish(state, updates=..., steps=..., extra={...}, evaluation={...})

``finish`` writes summary.json: first the entries ``loop.train`` writes (``loop.run_summary``: env,
seeds, timesteps or the unit's plural, updates, compile_s, run_s, steps_per_second or the unit's,
final_episode_return), then the driver's own (``extra``), then its evaluation's; it draws
metrics.png against the x key ``loop.train`` uses ("timesteps", unless the driver's program on the
shared loop draws against "update") and returns ``labcore.loop.RunResult``.

**Units**, as on ``loop.train``: ``log_every`` and ``checkpoint_every`` count updates, each
driver's unit of learning (the DQN host loop: ``train_frequency`` agent steps and a gradient step;
the actor-learner: one learner update; IQN: one epoch; a GFlowNet: one iteration), and without
``log_every`` a run logs about 100 rows (``loop.default_log_every``). A row carries the update as
"update" and, when the driver gives it, the units done as "timesteps" (or e.g. "trajectories").
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

from labcore import loop, runs


class HostRun:
    """One host-driven run: ``run`` (its ``labcore.runs.RunDir``), the progress bar and the clock.

    Build it with ``HostRun.open``; then ``start``, ``advance`` and ``log`` while the loop runs,
    ``stop`` when it ends (what follows is not timed: evaluation, a last checkpoint), ``finish`` to
    write the summary and the plot, or ``close`` on the way out of a run that failed.
    """

    def __init__(self, run: runs.RunDir, config: Any, *, name: str, total_steps: int, unit: str, unit_plural: str,
                 plotted: tuple[str, ...], shown: Mapping[str, str], x_key: str, progress: bool):
        self.run, self.config, self.name, self.total_steps = run, config, name, total_steps
        self.unit, self.unit_plural, self.plotted, self.shown, self.x_key = unit, unit_plural, plotted, shown, x_key
        self.progress = progress
        self.bar = None
        self.first_steps = 0  # the units done when this call started (a resumed run's)
        self.started: float | None = None
        self.run_s: float | None = None  # set by stop

    @classmethod
    def open(
        cls,
        run_dir: str | os.PathLike | None,
        config: Any,
        *,
        name: str,
        total_steps: int,
        unit: str = "step",
        unit_plural: str = "steps",
        plotted: tuple[str, ...] = ("episode_return",),
        shown: Mapping[str, str] | None = None,
        x_key: str = "timesteps",
        step_key: str = "update",
        resume: bool = False,
        overwrite: bool = False,
        tensorboard: bool = True,
        progress: bool = True,
    ) -> HostRun:
        """Open the run folder ``run_dir`` of ``config`` (None: in memory; ``labcore.runs.RunDir.open``).

        name: the progress bar's and the plot's title. total_steps: the units of the whole run (the
        bar's length); unit, unit_plural: what they are ("step": env or agent steps, the summary's
        "timesteps"; or e.g. "trajectory", "trajectories"). plotted: the metrics metrics.png draws,
        against ``x_key``. shown: progress-bar label -> metric. step_key: the row key the folder
        orders rows by, TensorBoard's step and the key a resume cuts the rows at: it must count
        what the driver's checkpoints are numbered by (updates; the DQN host loop's count agent
        steps, so its folder is ordered by "timesteps"). resume: the driver restores its newest
        intact checkpoint through ``run.restore`` before ``start``. overwrite, tensorboard: as
        ``RunDir.open``. progress: show the bar.
        """
        run = runs.RunDir.open(run_dir, config, step_key=step_key, resume=resume, overwrite=overwrite,
                               tensorboard=tensorboard)
        return cls(run, config, name=name, total_steps=total_steps, unit=unit, unit_plural=unit_plural,
                   plotted=tuple(plotted), shown=dict(shown or {}), x_key=x_key, progress=progress)

    @property
    def count_key(self) -> str:
        """The key of the units done in a row and in the summary: "timesteps", or the unit's plural."""
        return loop.count_key(self.unit, self.unit_plural)

    def start(self, steps: int = 0) -> None:
        """Start the clock, and the progress bar at ``steps`` units done (a resumed run's)."""
        self.first_steps = steps
        self.bar = runs.progress_bar(self.total_steps, desc=self.name, unit=self.unit, unit_scale=True,
                                     enabled=self.progress, initial=steps)
        self.started = time.perf_counter()

    def advance(self, steps: int) -> None:
        """Move the progress bar to ``steps`` units done."""
        self.bar.update(steps - self.bar.n)

    def log(self, update: int, metrics: Mapping[str, Any], steps: int | None = None) -> dict[str, Any]:
        """Log the row ``{"update": update, <count_key>: steps, **metrics}`` (no count when ``steps``
        is None: a driver whose rows hold none); returns it as plain numbers."""
        row = {"update": update, **({} if steps is None else {self.count_key: steps}), **metrics}
        row = self.run.log(row)
        if self.bar is not None and self.run_s is None:
            loop.show_on_bar(self.bar, row, self.shown)
        return row

    def stop(self) -> float:
        """Stop the clock and close the bar (once); returns the seconds since ``start``."""
        if self.run_s is None:
            self.run_s = time.perf_counter() - self.started
            self.bar.close()
        return self.run_s

    def close(self) -> None:
        """Close the bar and the metrics files of a run that ends without ``finish`` (it raised)."""
        if self.bar is not None:
            self.bar.close()
        if self.run.logger is not None:
            self.run.logger.close()

    def finish(self, state: Any, *, updates: int, steps: int, compile_s: float | None = None,
               run_s: float | None = None, extra: Mapping[str, Any] | None = None,
               evaluation: Mapping[str, Any] | None = None) -> loop.RunResult:
        """Write summary.json and metrics.png and return the run's ``labcore.loop.RunResult``.

        updates, steps: done in all (a resumed run's earlier ones too); the rate counts the units
        since ``start``. compile_s: the seconds spent compiling apart from the loop (None: the
        compiles happen inside it, in run_s). run_s: the seconds to report (default: ``stop``'s).
        extra: the driver's own summary entries, after the shared ones; evaluation: the evaluation's,
        last. state: the result's state.
        """
        measured = self.stop()
        summary = loop.run_summary(self.config, self.run.history(), updates=updates, steps=steps,
                                   steps_run=steps - self.first_steps, compile_s=compile_s,
                                   run_s=measured if run_s is None else run_s, unit=self.unit,
                                   unit_plural=self.unit_plural)
        summary.update(extra or {})
        summary.update(evaluation or {})
        self.run.finish(summary, self._plot)
        return loop.RunResult.of_run(self.config, state, self.run, summary)

    def _plot(self, rows: list[dict[str, Any]]):
        from labcore.logging import plot_metrics

        return plot_metrics(rows, self.plotted, x_key=self.x_key, title=self.name)
