"""The multi-agent IQN treasurehunt experiment end to end: train it, load it, evaluate it.

    config = IQNRunConfig(mode="jax_fused", epochs=200)
    result = train(config, run_dir="runs/iqn", checkpoint_every=50)   # labcore.training_run.RunResult
    config, params = load_checkpoint("runs/iqn")             # the agents' parameters, checked
    report = evaluate(config, params, seed=0, epochs=10)     # greedy and random play, as numbers

``train`` plays ``config.epochs`` epochs in ``config.mode`` (the same game and the same metrics
in every mode, ``labcore.agents.iqn.runners``):

* ``jax_fused``: ``labcore.loop.train`` runs ``make_program(config)``, whole epochs of every world
  in compiled chunks, with checkpoints of the whole state (networks, optimisers, replay buffers,
  epsilons, keys), an exact resume and seeds in one vmap;
* ``pytorch``, ``jax_sequential``, ``jax_parallel``: the host-driven runners (a Python world, or a
  jitted call per turn). They write the same folder (config, the same rows, TensorBoard, plot,
  summary, a checkpoint of the agents' parameters at the end) but cannot resume:
  ``checkpoint_every``, ``resume`` and ``seeds`` are refused for them, naming ``mode``.

One update is one epoch (the turns, then one train step per agent that can train, then the epsilon
decay); ``log_every`` and ``checkpoint_every`` count updates, epochs (without ``log_every``, about
100 rows: ``labcore.training_run.default_log_every``). Rows (``METRIC_COLUMNS``): ``update``
(epochs done: the row of the first epoch is update 1); ``gems`` (gems collected in the epoch,
summed over agents; the mean over worlds when num_worlds > 1) and ``gems_per_world`` (a list, one
value per world); ``mean_reward`` (an agent's summed reward in the epoch, averaged over agents and
worlds); ``loss`` (mean over the agents that trained this epoch; None before the buffers allow
training); ``epsilon`` (the value used during the epoch, before its decay); and, in the host
modes only, ``epoch_seconds`` (wall time).

A run directory is a ``labcore.runs.RunDir``: ``config.json`` (``IQNRunConfig.as_dict()``),
``metrics.jsonl`` / ``metrics.csv`` (and TensorBoard event files, by update), ``metrics.png``,
``summary.json`` (the entries every driver writes, ``labcore.training_run.run_summary``, then the
experiment's: mode, epochs, worlds, agents, first_gems, last_gems, final_epsilon; the host modes'
median_epoch_seconds; the evaluation's) and ``checkpoints/`` (orbax). ``load_checkpoint`` reads
either kind of checkpoint and returns the agents' local parameters in the Flax layout of
``labcore.nets.iqn.IQN`` with a leading agent axis ([n_agents, ...]; [num_worlds, n_agents, ...]
when num_worlds > 1): the host modes save only those (the pytorch mode converts its networks with the bridge
``iqn_params_to_flax``), the fused mode its whole state, so any run can be evaluated by the JAX
code.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from labcore import checkpoint, logged_scan, loop, training_run, validation
from labcore.agents.iqn import core as iqn
from labcore.agents.iqn import frame_buffer as fb
from labcore.agents.iqn.programs import (WorldRun, compile_lowered, fused_epoch, fused_epochs, init_world_runs,
                                         own_buffers, world_keys)
from labcore.agents.iqn.run_config import NAME as ALGORITHM  # the registry name its checkpoints record
from labcore.agents.iqn.run_config import IQNRunConfig
from labcore.agents.iqn.runners import EpochNumbers, make_runner
from labcore.training_run import TrainingRun
from labcore.runs import checkpoint_dir


# evaluate's default seed: the key schedule of play after training, apart from the training seeds
EVAL_SEED = 10_000
METRIC_COLUMNS = ("update", "gems", "gems_per_world", "mean_reward", "loss", "epsilon", "epoch_seconds")
PLOTTED = ("gems", "mean_reward", "loss", "epsilon")


def metric_rows(first_epoch: int, numbers: EpochNumbers) -> list[dict[str, Any]]:
    """One row per epoch (METRIC_COLUMNS) from a host runner's numbers; ``first_epoch`` is the
    number of epochs played before them."""
    rows = []
    for j in range(len(numbers.seconds)):
        losses = numbers.losses[j]
        trained = losses[np.isfinite(losses)]
        rows.append({
            "update": first_epoch + j + 1,
            "gems": float(np.mean(numbers.gems[j])),
            "gems_per_world": [int(g) for g in numbers.gems[j]],
            "mean_reward": float(np.mean(numbers.rewards[j])),
            "loss": float(np.mean(trained)) if trained.size else None,
            "epsilon": float(numbers.epsilon[j]),
            "epoch_seconds": float(numbers.seconds[j]),
        })
    return rows


# ----------------------------------------------------------------------------------------------
# The fused mode on the shared driver


def make_program(config: IQNRunConfig, callback=None, log_every: int = 1) -> loop.Program:
    """The ``jax_fused`` mode as a ``labcore.loop.Program``: one update is one epoch of every world
    (``programs.fused_epoch``). The state is the ``WorldRun`` of every world (leaves
    [num_worlds, ...]). ``init(key)`` gives world w the key ``fold_in(key, w)``: with
    ``key(config.seed)``, the worlds of ``world_keys(config.seed, num_worlds)``, so the program
    plays the game of ``runners.JaxFusedRunner``. Rows: ``METRIC_COLUMNS`` less ``epoch_seconds``
    (a compiled chunk is timed as a whole: the summary's ``run_s``). Compiled with
    ``programs.CPU_COMPILER_OPTIONS`` on the CPU."""
    if config.mode != "jax_fused":
        raise ValueError(f"mode: make_program builds the fused mode (mode='jax_fused'), got {config.mode!r}; "
                         "labcore.agents.iqn.train runs the other modes")
    if config.epochs_per_call != 1:
        raise ValueError("epochs_per_call: the fused runner's setting (runners.JaxFusedRunner, which the mode "
                         "timings use); a run on labcore.loop compiles chunks of checkpoint_every epochs, so leave it at 1")
    agent_config, world_params, num_worlds = config.agent, config.world, config.num_worlds

    def init(key: jax.Array) -> WorldRun:
        keys = jax.vmap(lambda w: jax.random.fold_in(key, w))(jnp.arange(num_worlds, dtype=jnp.uint32))
        return own_buffers(init_world_runs(keys, agent_config, world_params.n_agents))

    def update(runs: WorldRun) -> tuple[WorldRun, loop.Metrics]:
        runs, stats = fused_epoch(runs, agent_config, world_params)
        return runs, {"gems": jnp.mean(stats.gems.astype(jnp.float32)), "gems_per_world": stats.gems,
                      "mean_reward": jnp.mean(stats.rewards), "loss": jnp.nanmean(stats.losses),
                      "epsilon": stats.epsilon[0, 0]}

    agent_steps = world_params.max_turns * world_params.n_agents * num_worlds  # per epoch

    def run(runs: WorldRun, n: int) -> tuple[WorldRun, loop.Metrics]:
        return logged_scan.scan_updates(update, runs, n, updates_done=lambda runs: runs.epoch[0], callback=callback,
                                        log_every=log_every, rows_per_burst=logged_scan.burst_rows(agent_steps, log_every))

    def evaluate_state(runs: WorldRun, seed: int) -> dict[str, Any]:
        return evaluate(config, params(runs), seed=EVAL_SEED + seed)

    return loop.Program(
        config=config,
        init=init,
        run=run,
        updates_done=lambda runs: int(runs.epoch[0]),
        num_updates=config.epochs,
        steps_per_update=agent_steps,
        name=_title(config),
        plotted=PLOTTED,
        shown={"gems": "gems", "eps": "epsilon"},
        evaluate=evaluate_state,
        summarize=lambda rows: _summarize(config, rows),
        x_key="update",
        compile=compile_lowered,
        algorithm=ALGORITHM,
    )


def make_train(config: IQNRunConfig, *, callback=None, log_every: int = 1):
    """A pure ``train(key) -> (WorldRun, metrics)``: the fused mode's whole run as one traced
    function (``make_program``'s epochs in one ``lax.scan``; metrics leaves [epochs, ...]; ``callback``
    gets every ``log_every``-th epoch's metrics on the host while it runs)."""
    program = make_program(config, callback, log_every)
    return lambda key: program.run(program.init(key), config.epochs)


def params(state: Any) -> Any:
    """The agents' local parameters in the checkpoint layout (``check_params``) of a ``train`` result's or
    ``load_checkpoint``'s state: a fused run's ``WorldRun`` (one world: its world axis dropped; a run of
    several seeds keeps its leading [seeds, worlds] axes), or a host mode's parameters as they are."""
    if not isinstance(state, WorldRun):
        return state
    one_world = state.epoch.ndim == 1 and state.epoch.shape[0] == 1
    return jax.tree_util.tree_map(lambda leaf: leaf[0], state.agents.params) if one_world else state.agents.params


# ----------------------------------------------------------------------------------------------
# train: any mode, with an optional results folder

_train_fused = loop.trainer(make_program, "the fused IQN")


def train(config: IQNRunConfig, run_dir: str | os.PathLike | None = None, *, log_every: int | None = None,
          **options: Any) -> training_run.RunResult:
    """Train in ``config.mode`` (see the module docstring), in ``run_dir`` if given, a metrics row
    every ``log_every`` updates, epochs (default: ``training_run.default_log_every(config.epochs)``, about
    100 rows). ``jax_fused`` takes every option of ``labcore.loop.train`` (every count in updates);
    the host modes take ``overwrite``, ``tensorboard``, ``evaluate`` and ``progress``. The result's
    ``state`` is the final ``WorldRun`` (jax_fused) or the agents' parameters (host modes):
    ``params`` gives the parameters of either."""
    log_every = training_run.default_log_every(config.epochs) if log_every is None else log_every
    if not validation.is_int(log_every) or log_every < 1:
        raise ValueError(f"log_every must be an integer >= 1, got {log_every!r}")
    if config.mode == "jax_fused":
        return _train_fused(config, run_dir, log_every=log_every, **options)
    training_run.refuse_program_options(options, "mode", config.mode, "the checkpointed fused mode (mode='jax_fused')")
    return _train_on_host(config, run_dir, log_every, options)


def _train_on_host(config: IQNRunConfig, run_dir, log_every: int, options: Mapping[str, Any]) -> training_run.RunResult:
    """A host mode's runner, a row every ``log_every`` epochs (as the fused mode on the loop), on a
    ``labcore.training_run.TrainingRun``: its rows and summary are the fused mode's, plus
    ``epoch_seconds`` in each row and ``median_epoch_seconds`` in the summary."""
    agent_steps = config.world.max_turns * config.world.n_agents  # per epoch (a host mode plays one world)
    host = TrainingRun.open(run_dir, config, name=_title(config), total_steps=config.epochs * agent_steps,
                            plotted=PLOTTED, shown={"gems": "gems", "eps": "epsilon"}, x_key="update",
                            overwrite=options.get("overwrite", False), tensorboard=options.get("tensorboard", True),
                            progress=options.get("progress", True))
    runner = make_runner(config)  # builds (and for the JAX modes compiles)
    seconds = []
    host.start()
    for epoch in range(config.epochs):
        (row,) = metric_rows(epoch, runner.run_epochs(1))
        seconds.append(row["epoch_seconds"])
        host.advance((epoch + 1) * agent_steps)
        if row["update"] % log_every == 0:  # the rows hold no agent steps: the fused mode's columns
            host.log(row["update"], {name: value for name, value in row.items() if name != "update"})
    host.stop()
    params = runner.params()
    evaluation = evaluate(config, params, seed=EVAL_SEED + config.seed) if options.get("evaluate", True) else {}
    if host.folder.path is not None:
        save_checkpoint(host.folder.checkpoints, config, params)
    return host.finish(params, updates=config.epochs, steps=config.epochs * agent_steps, compile_s=runner.compile_s,
                       extra={**_summarize(config, host.folder.rows), "median_epoch_seconds": float(np.median(seconds))},
                       evaluation=evaluation)


def _summarize(config: IQNRunConfig, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The experiment's numbers of a finished run: gems per epoch over the first and last tenth of its rows."""
    tenth = max(1, len(rows) // 10)
    gems = [row["gems"] for row in rows]
    return {
        "mode": config.mode,
        "epochs": config.epochs,
        "num_worlds": config.num_worlds,
        "n_agents": config.world.n_agents,
        "first_gems": float(np.mean(gems[:tenth])) if gems else None,
        "last_gems": float(np.mean(gems[-tenth:])) if gems else None,
        "final_epsilon": rows[-1]["epsilon"] if rows else None,
    }


def _title(config: IQNRunConfig) -> str:
    worlds = f", {config.num_worlds} worlds" if config.num_worlds > 1 else ""
    return f"IQN treasurehunt ({config.mode}, {config.world.n_agents} agents{worlds})"


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
    """Write the stacked params as checkpoint ``config.epochs``, its metadata in the schema of
    ``labcore.checkpoint`` (algorithm ``ALGORITHM``, this module as the driver) with "epochs" beside it."""
    check_params(params, config)
    return checkpoint.save_run(directory, config.epochs, {"params": params}, algorithm=ALGORITHM, driver=__name__,
                               config=config, epochs=config.epochs)


def load_checkpoint(path: str | os.PathLike, step: int | None = None) -> tuple[IQNRunConfig, Any]:
    """(config, state) of a run from its folder or checkpoints/ folder (default: the newest step),
    the agent contract's loader: a fused run's whole state (a ``WorldRun``; leaves [seeds, ...] for
    a run of several seeds), or a host mode's parameters (all it saves). ``load_params`` gives the
    parameters of either, checked against a config. Another algorithm's checkpoint is refused
    (``labcore.checkpoint.WrongCheckpoint``)."""
    if written_by(checkpoint.open_run(path, ALGORITHM, IQNRunConfig, step).metadata) == loop.__name__:
        return loop.load_checkpoint(path, IQNRunConfig, make_program, step, algorithm=ALGORITHM)
    return load_params(path, step=step)  # a host mode's checkpoint: written here


def written_by(metadata: Mapping[str, Any]) -> str:
    """The driver that wrote an IQN checkpoint: the fused mode's ``labcore.loop`` or this module (a host mode's
    parameters). The schema's ``driver`` says; a checkpoint from before the schema has none, and only the
    loop's wrote an "update_step" then."""
    return metadata.get("driver") or (loop.__name__ if "update_step" in metadata else __name__)


def load_params(path: str | os.PathLike, config: IQNRunConfig | None = None, step: int | None = None,
                overrides: Mapping[str, Any] | None = None) -> tuple[IQNRunConfig, Any]:
    """(config, params) from a run directory or its checkpoints/ folder (default: the newest step):
    a host mode's checkpoint (the parameters) or a fused run's (its whole state, of which the
    parameters are returned).

    The arrays are restored in the shapes they were saved with (the checkpoint's own config), then
    checked against the config asked for: ``config``, or the saved config with ``overrides``
    (flat field -> value, e.g. the command line's flags), or the saved config itself. A different
    hidden size, observation size (vision radius, frames) or agent count raises a ValueError naming
    the leaf and both shapes, instead of restoring into, or broadcasting to, the wrong network.
    """
    if config is not None and overrides:
        raise ValueError("load_checkpoint takes a config or overrides, not both")
    if not checkpoint_dir(path).is_dir():
        raise FileNotFoundError(f"no checkpoint in {path}")
    directory, metadata, saved = checkpoint.open_run(path, ALGORITHM, IQNRunConfig, step)
    if written_by(metadata) == __name__:  # a host mode's: the parameters only
        loaded = checkpoint.restore(directory, like={"params": params_shape(saved)}, step=step)[0]["params"]
    elif metadata.get("seeds"):
        raise ValueError(f"seeds: {path} holds a run of {metadata['seeds']} seeds; load_checkpoint reads their state "
                         "(leaves [seeds, ...])")
    else:  # the fused mode's whole state (labcore.loop): restored into a fresh one, real keys included
        program = make_program(saved)
        runs, _ = checkpoint.restore(directory, like=program.init(jax.random.key(saved.seed)), step=step)
        loaded = params(runs)
    check_params(loaded, saved)
    target = config or (dataclasses.replace(saved, **overrides) if overrides else saved)
    check_params(loaded, target)
    return target, loaded


# ----------------------------------------------------------------------------------------------
# Evaluation: play with given parameters, no learning


def evaluate(config: IQNRunConfig, params: Any, seed: int = EVAL_SEED, *, epochs: int = 10) -> dict[str, Any]:
    """The agent contract's evaluation: ``epochs`` epochs of greedy play and of random play with the
    key schedule of ``seed`` (``play``), as numbers: eval_epochs, eval_mean_gems (per epoch, the
    mean over worlds), eval_mean_reward, random_mean_gems."""
    greedy = play(config, params, epochs, seed, epsilon=0.0)
    random_play = play(config, params, epochs, seed, epsilon=1.0)
    return {"eval_epochs": epochs, "eval_mean_gems": greedy["mean_gems"], "eval_mean_reward": greedy["mean_reward"],
            "random_mean_gems": random_play["mean_gems"]}


def play(config: IQNRunConfig, params: Any, epochs: int = 10, seed: int = EVAL_SEED,
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
    empty = iqn.make_buffer(c).init(fb.example_step(c))
    buffer = jax.tree_util.tree_map(lambda leaf: jnp.broadcast_to(leaf, (*shape, *leaf.shape)), empty)
    agents = iqn.AgentState(params=params, target_params=own_buffers(params), opt_state=None, buffer=buffer,
                            epsilon=jnp.full(shape, epsilon, jnp.float32))
    run_keys = jax.vmap(lambda key: jax.random.split(key)[1])(world_keys(seed, config.num_worlds))
    runs = WorldRun(agents=agents, run_key=run_keys, epoch=jnp.zeros((config.num_worlds,), jnp.int32))
    _, stats = fused_epochs(runs, epochs, agent_config=c, world_params=w, n_epochs=epochs, train=False)
    gems = np.asarray(stats.gems)  # [epochs, W]
    return {"gems": gems.mean(axis=1).tolist(), "gems_per_world": gems.tolist(),
            "mean_gems": float(gems.mean()), "mean_reward": float(np.asarray(stats.rewards).mean())}
