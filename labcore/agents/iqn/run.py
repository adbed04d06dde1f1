"""The multi-agent IQN treasurehunt experiment end to end: run it, save it, load it, evaluate it.

    config = IQNRunConfig(mode="jax_fused", epochs=200)
    result = run(config, run_dir="runs/iqn")                 # per-epoch metrics, params, summary
    config, params = load_checkpoint("runs/iqn")             # the agents' parameters, checked
    report = evaluate(config, params, epochs=10)             # greedy play (epsilon 0)

``run`` plays ``config.epochs`` epochs with the runner of ``config.mode``
(``labcore.agents.iqn.runners``: pytorch, jax_sequential, jax_parallel or jax_fused; the same
game and the same metrics in every mode).

Metrics: one row per epoch with the same columns in every mode (``METRIC_COLUMNS``): ``epoch``;
``gems`` (gems collected in the epoch, summed over agents; the mean over worlds when num_worlds > 1)
and ``gems_per_world`` (a list, one value per world); ``mean_reward`` (an agent's summed reward in
the epoch, averaged over agents and worlds); ``loss`` (mean over the agents that trained this epoch;
None before the buffers allow training); ``epsilon`` (the value used during the epoch, before its
decay); ``epoch_seconds`` (wall time; for ``epochs_per_call`` > 1 the call's time divided evenly).

A run directory is a ``labcore.runs.RunDir``: ``config.json`` (``IQNRunConfig.as_dict()``),
``metrics.jsonl`` / ``metrics.csv`` (and the same rows as TensorBoard event files, by epoch),
``metrics.png``, ``summary.json`` and ``checkpoints/``
(orbax): the agents' local parameters at the end, as checkpoint step ``epochs``, in the Flax
layout of ``labcore.nets.iqn.IQN`` with a leading agent axis ([n_agents, ...]; [num_worlds,
n_agents, ...] when num_worlds > 1) and the config as metadata. Every mode's checkpoint has the
same layout (the pytorch mode converts its networks with the bridge ``iqn_params_to_flax``), so
any of them can be evaluated by the JAX code.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from labcore import checkpoint, validation
from labcore.agents.iqn import core as iqn
from labcore.agents.iqn import frame_buffer as fb
from labcore.agents.iqn.programs import WorldRun, fused_epochs, own_buffers, world_keys
from labcore.agents.iqn.run_config import IQNRunConfig
from labcore.agents.iqn.runners import EpochNumbers, make_runner
from labcore.runs import RunDir, checkpoint_dir, progress_bar

METRIC_COLUMNS = ("epoch", "gems", "gems_per_world", "mean_reward", "loss", "epsilon", "epoch_seconds")
PLOTTED = ("gems", "mean_reward", "loss", "epsilon")


class IQNRunResult(NamedTuple):
    config: IQNRunConfig
    metrics: list[dict[str, Any]]  # one row per epoch, METRIC_COLUMNS
    params: Any  # the agents' local params, Flax layout, [n_agents, ...] ([num_worlds, n_agents, ...] if num_worlds > 1)
    summary: dict[str, Any]


def metric_rows(first_epoch: int, numbers: EpochNumbers) -> list[dict[str, Any]]:
    """One row per epoch (METRIC_COLUMNS) from a runner's numbers."""
    rows = []
    for j in range(len(numbers.seconds)):
        losses = numbers.losses[j]
        trained = losses[np.isfinite(losses)]
        rows.append({
            "epoch": first_epoch + j,
            "gems": float(np.mean(numbers.gems[j])),
            "gems_per_world": [int(g) for g in numbers.gems[j]],
            "mean_reward": float(np.mean(numbers.rewards[j])),
            "loss": float(np.mean(trained)) if trained.size else None,
            "epsilon": float(numbers.epsilon[j]),
            "epoch_seconds": float(numbers.seconds[j]),
        })
    return rows


# ----------------------------------------------------------------------------------------------
# run: the experiment end to end, with an optional results folder


def run(config: IQNRunConfig, run_dir: str | os.PathLike | None = None, log_every: int = 10, progress: bool = True,
        overwrite: bool = False, tensorboard: bool = True) -> IQNRunResult:
    """Run ``config.epochs`` epochs in ``config.mode``; with ``run_dir``, write the results folder
    of the module docstring. Every epoch is a row of ``result.metrics``; ``log_every`` is the number
    of epochs between writes to the metrics files and progress-bar updates. A run_dir holding an
    earlier run is refused unless ``overwrite`` (which deletes that run's files, and only those).
    tensorboard: also write the metrics as TensorBoard event files in run_dir, at their epoch.
    """
    if not validation.is_int(log_every) or log_every < 1:
        raise ValueError(f"log_every must be an integer >= 1, got {log_every!r}")
    folder = RunDir.open(run_dir, config, step_key="epoch", overwrite=overwrite, tensorboard=tensorboard)
    runner = make_runner(config)  # builds (and for the JAX modes compiles)
    bar = progress_bar(config.epochs, desc=f"iqn {config.mode}", unit="epoch", enabled=progress)
    rows: list[dict[str, Any]] = []
    written = 0
    started = time.perf_counter()
    while len(rows) < config.epochs:
        k = min(runner.epochs_per_call, config.epochs - len(rows))
        rows.extend(metric_rows(len(rows), runner.run_epochs(k)))
        if len(rows) - written >= log_every or len(rows) == config.epochs:
            for row in rows[written:]:
                folder.log(row)
            written = len(rows)
            bar.update(written - bar.n)
            bar.set_postfix(gems=f"{rows[-1]['gems']:.1f}", eps=f"{rows[-1]['epsilon']:.3f}", refresh=False)
    run_s = time.perf_counter() - started
    bar.close()
    params = runner.params()
    summary = {**summarize(config, rows, runner.compile_s, run_s),
               "run_dir": None if folder.path is None else str(folder.path)}
    if folder.path is not None:
        save_checkpoint(folder.checkpoints, config, params)
        folder.finish(summary, plot_run(rows, config))
    return IQNRunResult(config, rows, params, summary)


def summarize(config: IQNRunConfig, rows: list[dict[str, Any]], compile_s: float, run_s: float) -> dict[str, Any]:
    """The numbers of a finished run: timing, and gems per epoch over its first and last tenth."""
    tenth = max(1, len(rows) // 10)
    seconds = [row["epoch_seconds"] for row in rows]
    return {
        "mode": config.mode,
        "epochs": len(rows),
        "num_worlds": config.num_worlds,
        "n_agents": config.world.n_agents,
        "compile_s": round(compile_s, 3),
        "run_s": round(run_s, 3),
        "epochs_per_second": round(len(rows) / run_s, 3) if run_s > 0 else None,
        "median_epoch_seconds": float(np.median(seconds)),
        "first_gems": float(np.mean([row["gems"] for row in rows[:tenth]])),
        "last_gems": float(np.mean([row["gems"] for row in rows[-tenth:]])),
        "final_epsilon": rows[-1]["epsilon"],
    }


def plot_run(rows: list[dict[str, Any]], config: IQNRunConfig):
    """The run's metrics.png: gems, mean reward, loss and epsilon per epoch (a matplotlib figure)."""
    from labcore.logging import plot_metrics

    worlds = f", {config.num_worlds} worlds" if config.num_worlds > 1 else ""
    return plot_metrics(rows, PLOTTED, x_key="epoch",
                        title=f"IQN treasurehunt ({config.mode}, {config.world.n_agents} agents{worlds})")


# ----------------------------------------------------------------------------------------------
# Checkpoints: the agents' local parameters


def params_shape(config: IQNRunConfig) -> Any:
    """ShapeDtypeStructs of a run's stacked params: [n_agents, ...] ([num_worlds, n_agents, ...] if num_worlds > 1)."""
    def build() -> Any:
        params = iqn.init_agents(jax.random.key(0), config.agent, config.world.n_agents).params
        if config.num_worlds > 1:
            params = jax.tree_util.tree_map(lambda leaf: jnp.broadcast_to(leaf, (config.num_worlds, *leaf.shape)), params)
        return params

    return jax.eval_shape(build)


def check_params(params: Any, config: IQNRunConfig) -> None:
    """ValueError unless ``params`` are a run's stacked params for ``config`` (hidden size, obs size,
    agent count, world count); the message names the leaf and both shapes (``iqn.check_params_shape``)."""
    if config.num_worlds > 1:
        for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
            shape = tuple(np.shape(leaf))
            if not shape or shape[0] != config.num_worlds:
                name = "/".join(str(getattr(part, "key", part)) for part in path)
                raise ValueError(f"params leaf {name!r} has shape {shape}, but the config expects a leading axis of "
                                 f"num_worlds = {config.num_worlds}")
        params = jax.tree_util.tree_map(lambda leaf: leaf[0], params)
    iqn.check_params_shape(params, config.agent, n_agents=config.world.n_agents)


def save_checkpoint(directory: str | os.PathLike, config: IQNRunConfig, params: Any) -> Path:
    """Write the stacked params as checkpoint ``config.epochs`` with the config as metadata."""
    check_params(params, config)
    return checkpoint.save(directory, config.epochs, {"params": params},
                           {"config": config.as_dict(), "epochs": config.epochs})


def load_checkpoint(path: str | os.PathLike, config: IQNRunConfig | None = None, step: int | None = None,
                    overrides: Mapping[str, Any] | None = None) -> tuple[IQNRunConfig, Any]:
    """(config, params) from a run directory or its checkpoints/ folder (default: the newest step).

    The arrays are restored in the shapes they were saved with (the checkpoint's own config), then
    checked against the config asked for: ``config``, or the saved config with ``overrides``
    (flat field -> value, e.g. the command line's flags), or the saved config itself. A different
    hidden size, observation size (vision radius, frames) or agent count raises a ValueError naming
    the leaf and both shapes, instead of restoring into, or broadcasting to, the wrong network.
    """
    if config is not None and overrides:
        raise ValueError("load_checkpoint takes a config or overrides, not both")
    directory = checkpoint_dir(path)
    if not directory.is_dir():
        raise FileNotFoundError(f"no checkpoint in {path}")
    metadata = checkpoint.restore_metadata(directory, step)
    saved = IQNRunConfig.from_dict(metadata["config"])
    state, _ = checkpoint.restore(directory, like={"params": params_shape(saved)}, step=step)
    params = state["params"]
    check_params(params, saved)
    target = config or (dataclasses.replace(saved, **overrides) if overrides else saved)
    check_params(params, target)
    return target, params


# ----------------------------------------------------------------------------------------------
# Evaluation: play with given parameters, no learning


def evaluate(config: IQNRunConfig, params: Any, epochs: int = 10, seed: int = 10_000,
             epsilon: float = 0.0) -> dict[str, Any]:
    """Play ``epochs`` epochs with the given stacked params (``check_params`` layout), no learning.

    epsilon 0 is greedy play (the acting forward with ``n_tau_act`` taus on fresh frame buffers);
    epsilon 1 is uniformly random play, the baseline. Runs the fused JAX epoch (every world of a
    many-world checkpoint plays with its own agents) with the key schedule of ``seed``.
    Returns gems per epoch (mean over worlds), gems per world and epoch, and the mean reward.
    """
    check_params(params, config)
    if not validation.is_int(epochs) or epochs < 1:
        raise ValueError(f"epochs must be an integer >= 1, got {epochs!r}")
    if not 0.0 <= epsilon <= 1.0:
        raise ValueError(f"epsilon must be in [0, 1], got {epsilon}")
    c, w = config.agent, config.world
    # Fresh arrays (the call donates its state, and the caller keeps its params).
    params = jax.tree_util.tree_map(lambda leaf: jnp.array(leaf, jnp.float32, copy=True), params)
    if config.num_worlds == 1:
        params = jax.tree_util.tree_map(lambda leaf: leaf[None], params)
    shape = (config.num_worlds, w.n_agents)
    buffer = jax.tree_util.tree_map(lambda leaf: jnp.broadcast_to(leaf, (*shape, *leaf.shape)), fb.buffer_init(c))
    agents = iqn.AgentState(params=params, target_params=own_buffers(params), opt_state=None, buffer=buffer,
                            epsilon=jnp.full(shape, epsilon, jnp.float32))
    run_keys = jax.vmap(lambda key: jax.random.split(key)[1])(world_keys(seed, config.num_worlds))
    runs = WorldRun(agents=agents, run_key=run_keys, epoch=jnp.zeros((config.num_worlds,), jnp.int32))
    _, stats = fused_epochs(runs, epochs, agent_config=c, world_params=w, n_epochs=epochs, train=False)
    gems = np.asarray(stats.gems)  # [epochs, W]
    return {"gems": gems.mean(axis=1).tolist(), "gems_per_world": gems.tolist(),
            "mean_gems": float(gems.mean()), "mean_reward": float(np.asarray(stats.rewards).mean())}
