"""One training run, whatever drives it: the folder, progress bar, rows, summary, plot and result.

Every driver goes through one ``TrainingRun``: ``labcore.loop.train`` around a compiled
``labcore.loop.Program``, and the four drivers that keep a Python loop of their own because what
they step lives on the host: the DQN host loop over gymnasium envs (``labcore.agents.dqn.host_loop``),
the Ray actor-learner (``labcore.agents.dqn.actor_learner``), IQN's host modes
(``labcore.agents.iqn.run``) and the GFlowNet's host trainers (``labcore.agents.gflownet.run``):

    run = TrainingRun.open(run_dir, config, name="DQN on CartPole-v1", total_steps=50_000)
    ...                                              # a resume restores its checkpoint from run.folder
    run.start(steps=0)                               # the clock, and the progress bar from there
    run.advance(steps)                               # the bar, as the loop goes
    run.log(update, {"loss": 0.1}, steps=steps)      # {"update": ..., "timesteps": ..., "loss": 0.1}
    result = run.finish(state, updates=..., steps=..., extra={...}, evaluation={...})

``finish`` writes summary.json: first the entries every driver writes (``run_summary``: env, seeds,
timesteps or the unit's plural, updates, compile_s, run_s, steps_per_second or the unit's,
final_episode_return), then the driver's own (``extra``), then its evaluation's; it draws
metrics.png against the run's x key ("timesteps", or "update" for a program that says so) and
returns the ``RunResult`` every algorithm's ``train`` returns.

**Units.** ``log_every`` and ``checkpoint_every`` count updates, each driver's unit of learning
(a compiled program's update; the DQN host loop: ``train_frequency`` agent steps and a gradient step;
the actor-learner: one learner update; IQN: one epoch; a GFlowNet: one iteration), and without
``log_every`` a run logs about 100 rows (``default_log_every``). A row carries the update as "update"
and, when the driver gives it, the units done as "timesteps" (or e.g. "trajectories").
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import numpy as np

from labcore import runs


def _option(default: Any, help: str, flag: str | None, needs_program: bool = False) -> Any:
    return dataclasses.field(default=default, metadata={"help": help, "flag": flag, "needs_program": needs_program})


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """The options every algorithm's ``train`` takes (``labcore.loop.train`` has two more, ``eval_every`` and
    ``stop_after_s``, for scripts), written once: the command line's run flags, the options the registry
    accepts and the host trainers' refusals (``refuse_program_options``) are read from these fields.
    ``flag``: the command line's flag (a ``--no-...`` flag turns a default True off; the help is argparse's,
    ``%`` written ``%%``). ``needs_program``: a trainer that runs to its end in one call, without
    checkpoints (IQN's host modes, the GFlowNet's host trainers), refuses it; the registry's own
    ``refuses`` say what else a driver cannot honour (e.g. ``seeds`` for the DQN host loop)."""

    log_every: int | None = _option(None, "updates between metric rows (default: about 100 rows in a run)",
                                     "--log-every")
    checkpoint_every: int | None = _option(None, "updates between checkpoints (default: one, at the end)",
                                            "--checkpoint-every", needs_program=True)
    resume: bool = _option(False, "continue from the newest intact checkpoint in --run-dir", "--resume",
                           needs_program=True)
    overwrite: bool = _option(False, "replace an earlier run in --run-dir", "--overwrite")
    progress: bool = _option(True, "no progress bar", "--no-progress")
    tensorboard: bool = _option(
        True, "also write the metrics as TensorBoard event files into --run-dir (default: on); view them with "
              "`tensorboard --logdir runs`, or in Colab/Jupyter `%%load_ext tensorboard` then "
              "`%%tensorboard --logdir runs`", "--tensorboard")
    evaluate: bool = _option(True, "no evaluation at the end", "--no-eval")
    seeds: int | None = _option(None, "train this many seeds at once (--seed, --seed + 1, ...) in one vmap; rows are "
                                      "their means", "--seeds", needs_program=True)
    on_metrics: Callable[[dict[str, Any]], None] | None = _option(
        None, "called with each logged row's metrics, before it is written", None, needs_program=True)


RUN_OPTIONS = tuple(option.name for option in dataclasses.fields(RunOptions))
# what a host-driven trainer beside a program (a loop of Python calls, run to its end in one call) takes
HOST_OPTIONS = tuple(option.name for option in dataclasses.fields(RunOptions) if not option.metadata["needs_program"])
PROGRAM_OPTIONS = tuple(option.name for option in dataclasses.fields(RunOptions) if option.metadata["needs_program"])


def refuse_program_options(options: Mapping[str, Any], setting: str, value: Any, program: str) -> None:
    """For an algorithm whose config field ``setting`` chose a host-driven trainer (``value``):
    ValueError naming ``setting`` for any of ``PROGRAM_OPTIONS`` asked for (``program``: what to
    choose instead), TypeError for an option ``train`` does not have."""
    unknown = sorted(set(options) - set(RUN_OPTIONS))
    if unknown:  # first: an option no driver has is not one that needs the program
        raise TypeError(f"train() got unexpected keyword arguments {unknown}")
    asked = sorted(name for name, given in options.items() if name in PROGRAM_OPTIONS and given not in (None, False))
    if asked:
        raise ValueError(f"{setting}: {', '.join(asked)} {'needs' if len(asked) == 1 else 'need'} {program}; "
                         f"the {value!r} {setting} runs to its end in one call, without checkpoints")


class RunResult(NamedTuple):
    """What every algorithm's ``train`` returns."""

    config: Any
    state: Any  # the final training state (e.g. PPO's RunnerState); with seeds=k, every leaf is [k, ...]
    metrics: list[dict[str, Any]]  # the rows this call logged (a resumed run: those since the resume)
    summary: dict[str, Any]  # what summary.json holds
    run_dir: str | None

    @classmethod
    def of_run(cls, config: Any, state: Any, run: runs.RunDir, summary: dict[str, Any]) -> RunResult:
        """The result of a run written through ``run`` (its rows, its folder or None in memory)."""
        return cls(config, state, run.rows, summary, None if run.path is None else str(run.path))


def default_log_every(num_updates: int) -> int:
    """Every driver's ``log_every`` when none is given: about 100 rows in a run of ``num_updates``
    updates (a row every update in a run of fewer than 200)."""
    return max(1, num_updates // 100)


def count_key(unit: str = "step", unit_plural: str = "steps") -> str:
    """The key of the units done, in a summary and in a row: "timesteps" for env steps, else the
    unit's plural (e.g. "trajectories")."""
    return "timesteps" if unit == "step" else unit_plural


def run_summary(config: Any, rows: list[dict[str, Any]], *, updates: int, steps: int, steps_run: int,
                compile_s: float | None, run_s: float, seeds: int | None = None, unit: str = "step",
                unit_plural: str = "steps") -> dict[str, Any]:
    """The entries every driver's summary.json starts with: env, seeds, the units done (``count_key``:
    "timesteps" or e.g. "trajectories"), updates, compile_s, run_s, ``<unit_plural>_per_second`` and,
    when a row holds an episode return, final_episode_return.

    rows: every row of the run. steps: the units done in all (a resumed run's earlier ones too);
    steps_run: those this call ran (every seed's), which the rate divides by run_s. compile_s: None
    for a driver whose compiles happen inside its loop (they are then part of run_s).
    final_episode_return: the mean of the last tenth of the rows' returns, of the rows that saw an
    episode end (a DQN row of a few agent steps may not).
    """
    returns = [row["episode_return"] for row in rows
               if row.get("episode_return") is not None and np.isfinite(row["episode_return"])]
    recent = returns[-max(1, len(returns) // 10):]
    summary = {
        "env": getattr(config, "env_id", None),
        "seeds": seeds or 1,
        count_key(unit, unit_plural): steps,
        "updates": updates,
        "compile_s": None if compile_s is None else round(compile_s, 2),
        "run_s": round(run_s, 2),
        f"{unit_plural}_per_second": round(steps_run / run_s, 1) if run_s > 0 else None,
    }
    if any("episode_return" in row for row in rows):
        summary["final_episode_return"] = float(np.mean(recent)) if recent else None
    return summary


def show_on_bar(bar: Any, row: Mapping[str, Any], shown: Mapping[str, str]) -> None:
    """Show a logged row's metrics on a progress bar (label -> metric), once the row holds every one
    of them."""
    values = {label: row.get(name) for label, name in shown.items()}
    if values and all(value is not None for value in values.values()):
        bar.set_postfix({label: f"{value:.2f}" for label, value in values.items()}, refresh=False)


def progress_bar(total: int, *, desc: str, unit: str, initial: int = 0, enabled: bool = True, unit_scale: bool = False):
    """The drivers' tqdm bar. mininterval 2 s: a notebook's stored output stays small."""
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, desc=desc, unit=unit, unit_scale=unit_scale, disable=not enabled,
                mininterval=2.0)


class TrainingRun:
    """One run: ``folder`` (its ``labcore.runs.RunDir``), the progress bar and the clock.

    Build it with ``TrainingRun.open``; then ``start``, ``advance`` and ``log`` while the loop runs,
    ``stop`` when it ends (what follows is not timed: evaluation, a last checkpoint), ``finish`` to
    write the summary and the plot, ``end_early`` for a run stopped at a checkpoint that goes on later,
    or ``close`` on the way out of a run that failed.
    """

    def __init__(self, folder: runs.RunDir, config: Any, *, name: str, total_steps: int, unit: str,
                 unit_plural: str, plotted: tuple[str, ...], shown: Mapping[str, str], x_key: str, progress: bool):
        self.folder, self.config, self.name, self.total_steps = folder, config, name, total_steps
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
        primary: bool = True,
        like: Any = None,
        written_with: Mapping[str, Any] | None = None,
    ) -> TrainingRun:
        """Open the run folder ``run_dir`` of ``config`` (None: in memory; ``labcore.runs.RunDir.open``).

        name: the progress bar's and the plot's title. total_steps: the units of the whole run (the
        bar's length); unit, unit_plural: what they are ("step": env or agent steps, the summary's
        "timesteps"; or e.g. "trajectory", "trajectories"). plotted: the metrics metrics.png draws,
        against ``x_key``. shown: progress-bar label -> metric. step_key: the row key the folder
        orders rows by, TensorBoard's step and the key a resume cuts the rows at: it must count
        what the driver's checkpoints are numbered by (updates; the DQN host loop's count agent
        steps, so its folder is ordered by "timesteps"). resume: the driver restores its newest
        intact checkpoint, through ``folder.restore`` before ``start``, or here when ``like`` is
        given. overwrite, tensorboard, primary, written_with: as ``RunDir.open``. progress: show the
        bar (on the primary process only).
        """
        folder = runs.RunDir.open(run_dir, config, step_key=step_key, resume=resume, overwrite=overwrite,
                                  primary=primary, tensorboard=tensorboard, like=like, written_with=written_with)
        return cls(folder, config, name=name, total_steps=total_steps, unit=unit, unit_plural=unit_plural,
                   plotted=tuple(plotted), shown=dict(shown or {}), x_key=x_key, progress=progress and primary)

    @property
    def count_key(self) -> str:
        """The key of the units done in a row and in the summary: "timesteps", or the unit's plural."""
        return count_key(self.unit, self.unit_plural)

    def start(self, steps: int = 0) -> None:
        """Start the clock, and the progress bar at ``steps`` units done (a resumed run's)."""
        self.first_steps = steps
        self.bar = progress_bar(self.total_steps, desc=self.name, unit=self.unit, unit_scale=True,
                                     enabled=self.progress, initial=steps)
        self.started = time.perf_counter()

    def advance(self, steps: int) -> None:
        """Move the progress bar to ``steps`` units done."""
        self.bar.update(steps - self.bar.n)

    def log(self, update: int, metrics: Mapping[str, Any], steps: int | None = None) -> dict[str, Any]:
        """Log the row ``{"update": update, <count_key>: steps, **metrics}`` (no count when ``steps``
        is None: a driver whose rows hold none, or whose metrics hold it already); returns it as plain
        numbers."""
        row = {"update": update, **({} if steps is None else {self.count_key: steps}), **metrics}
        row = self.folder.log(row)
        if self.bar is not None and self.run_s is None:
            show_on_bar(self.bar, row, self.shown)
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
        if self.folder.logger is not None:
            self.folder.logger.close()

    def summary(self, *, updates: int, steps: int, compile_s: float | None = None, run_s: float | None = None,
                seeds: int | None = None, rows: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """``run_summary`` of this call: updates, steps done in all (a resumed run's earlier ones too),
        the rate over the units since ``start`` (times ``seeds``, each seed's), compile_s (None: the
        compiles happen inside the loop, in run_s), run_s (default: ``stop``'s); rows: default, every
        row of the run."""
        return run_summary(self.config, self.folder.history() if rows is None else rows, updates=updates,
                           steps=steps, steps_run=(steps - self.first_steps) * (seeds or 1), compile_s=compile_s,
                           run_s=self.stop() if run_s is None else run_s, seeds=seeds, unit=self.unit,
                           unit_plural=self.unit_plural)

    def finish(self, state: Any, *, updates: int, steps: int, compile_s: float | None = None,
               run_s: float | None = None, seeds: int | None = None, extra: Mapping[str, Any] | None = None,
               evaluation: Mapping[str, Any] | None = None) -> RunResult:
        """Write summary.json and metrics.png and return the run's ``RunResult``.

        updates, steps, compile_s, run_s, seeds: as ``summary``. extra: the driver's own summary
        entries, after the shared ones; evaluation: the evaluation's, last. state: the result's state.
        """
        self.stop()
        summary = self.summary(updates=updates, steps=steps, compile_s=compile_s, run_s=run_s, seeds=seeds)
        summary.update(extra or {})
        summary.update(evaluation or {})
        self.folder.finish(summary, self._plot)
        return RunResult.of_run(self.config, state, self.folder, summary)

    def end_early(self, state: Any, summary: Mapping[str, Any]) -> RunResult:
        """End a run stopped at a checkpoint, to go on with a resume: no summary.json and no plot; the
        result's summary is ``summary`` (this call's numbers)."""
        self.stop()
        self.folder.finish()
        return RunResult.of_run(self.config, state, self.folder, dict(summary))

    def _plot(self, rows: list[dict[str, Any]]):
        from labcore.logging import plot_metrics

        return plot_metrics(rows, self.plotted, x_key=self.x_key, title=self.name)
