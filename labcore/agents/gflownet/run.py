"""The GFlowNet driver: any of the four trainers into a results folder, the all-JAX one on the shared loop.

``train(config, run_dir=None, **options)`` is the agent contract's ``train``:

* ``trainer="jax"``: ``labcore.loop.train`` runs ``make_program(config)``, the same iterations as
  ``core.make_train`` (same keys) cut into compiled chunks, with checkpoints of the whole state,
  exact resume, seeds in one vmap and a metrics row every ``log_every`` iterations computed on the
  device (the L1 of the last ``l1_samples`` terminal states against the exact target);
* ``torch``, ``hybrid``, ``jax_policy``: the host trainers of ``labcore.agents.gflownet.trainers``
  (a PyTorch sampler, or a Python loop of jitted steps). They run to the end in one call, so they
  write the same folder (config, the same rows, TensorBoard, plot, summary; through
  ``labcore.training_run.TrainingRun``) but no checkpoint: ``resume``, ``checkpoint_every`` and ``seeds``
  are refused for them, naming ``trainer``.

One update is one iteration: a batch of ``batch_size`` trajectories sampled and one gradient step;
``log_every`` and ``checkpoint_every`` count updates, iterations (without ``log_every``, about 100
rows: ``labcore.training_run.default_log_every``). Rows: ``update`` (the iteration), ``trajectories``
(sampled so far), ``loss``, ``l1`` (sum form, see ``labcore.envs.hypergrid``). The summary starts
with the entries every driver writes (``labcore.training_run.run_summary``: env, seeds, trajectories,
updates, compile_s, run_s, trajectories_per_second), then the trainer, the loss and ``final_l1``
(the host trainers add ``seconds``, per phase) and, unless ``evaluate=False``, ``eval_l1``: the L1
of ``l1_samples`` fresh samples of the trained policy (no exploration).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from labcore import logged_scan, loop, training_run
from labcore.agents.gflownet import core
from labcore.agents.gflownet.config import NAME as ALGORITHM  # the registry name its checkpoints record
from labcore.agents.gflownet.core import GFlowNetConfig, TrainState, make_train  # noqa: F401 (make_train: the contract's)
from labcore.envs import hypergrid
from labcore.training_run import TrainingRun

PLOTTED = ("loss", "l1")


def make_program(config: GFlowNetConfig, callback=None, log_every: int = 1) -> loop.Program:
    """The all-JAX trainer (``trainer="jax"``) as a ``labcore.loop.Program``; the L1 metric of every
    iteration is computed inside the compiled program from a ring of the last ``l1_samples``
    terminal states (the same samples ``hypergrid.l1_curve`` uses, in float32)."""
    if config.trainer != "jax":
        raise ValueError(f"trainer: make_program builds the all-JAX trainer (trainer='jax'), got {config.trainer!r}; "
                         "labcore.agents.gflownet.train runs the host trainers")
    optimizer = core.make_optimizer(config)
    step = core.make_step(config, optimizer)
    grid, batch, ring = config.grid, config.batch_size, config.l1_samples
    target = jnp.asarray(hypergrid.target_distribution(grid), jnp.float32)

    def init(key: jax.Array) -> TrainState:
        return core.init_state(config, optimizer, key)  # as make_train

    def update(state: TrainState, key: jax.Array) -> tuple[TrainState, loop.Metrics]:
        state, loss, _ = step(state, key)
        filled = jnp.minimum(state.iteration * batch, ring)  # the ring fills from slot 0 up
        counts = jnp.zeros(grid.num_states, jnp.float32).at[state.recent].add((jnp.arange(ring) < filled).astype(jnp.float32))
        l1 = jnp.abs(counts / filled - target).sum()
        return state, {"loss": loss, "l1": l1, "trajectories": state.iteration * batch}

    def run(state: TrainState, n: int) -> tuple[TrainState, loop.Metrics]:
        first = state.iteration
        keys = jax.lax.dynamic_slice_in_dim(core.iteration_keys(config, state.loop_key), first, n)
        return logged_scan.scan_updates(lambda state: update(state, keys[state.iteration - first]), state, n,
                                        updates_done=lambda state: state.iteration, callback=callback, log_every=log_every,
                                        rows_per_burst=logged_scan.burst_rows(batch, log_every))

    return loop.Program(
        config=config,
        init=init,
        run=run,
        updates_done=lambda state: int(state.iteration),
        num_updates=config.iterations,
        steps_per_update=batch,
        name=_name(config),
        plotted=PLOTTED,
        shown={"loss": "loss", "L1": "l1"},
        evaluate=lambda state, seed: evaluate(config, state.params, seed + 1),  # not the training key
        summarize=lambda rows: _summarize(config, rows),
        unit="trajectory",
        unit_plural="trajectories",
        x_key="update",
        algorithm=ALGORITHM,
    )


def _name(config: GFlowNetConfig) -> str:
    return f"GFlowNet ({config.trainer}, {config.loss}) on HyperGrid {config.ndim}x{config.height}"


def _summarize(config: GFlowNetConfig, rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {"env": f"HyperGrid {config.ndim}x{config.height}", "trainer": config.trainer, "loss": config.loss,
            "final_l1": rows[-1]["l1"] if rows else None}


def evaluate(config: GFlowNetConfig, params: dict[str, Any], seed: int = 0) -> dict[str, Any]:
    """The L1 (sum form) against the exact target of ``config.l1_samples`` terminal states sampled
    from the policy ``params`` without exploration, with ``jax.random.key(seed)``."""
    greedy = dataclasses.replace(config, exploration_epsilon=0.0)
    batches = -(-config.l1_samples // config.batch_size)

    @jax.jit
    def sample(params, key):
        return jax.lax.map(lambda k: core.terminal_indices(config.grid, core.sample_trajectories(greedy, params, k)),
                           jax.random.split(key, batches))

    terminals = np.asarray(sample(params, jax.random.key(seed))).ravel()[: config.l1_samples]
    empirical = hypergrid.index_distribution(config.grid, terminals)
    return {"eval_samples": int(terminals.size),
            "eval_l1": hypergrid.l1_distance(empirical, hypergrid.target_distribution(config.grid))}


# The all-JAX trainer on the shared driver; train() below adds the host trainers.
_train_on_loop = loop.trainer(make_program, "the all-JAX GFlowNet")


def train(config: GFlowNetConfig, run_dir: str | os.PathLike | None = None, *, log_every: int | None = None,
          **options: Any) -> training_run.RunResult:
    """Train with ``config.trainer`` (see the module docstring), in ``run_dir`` if given; every
    count in updates, iterations (log_every's default: ``training_run.default_log_every(config.iterations)``,
    about 100 rows). ``trainer="jax"`` takes every option of ``labcore.loop.train``; the host
    trainers take ``overwrite``, ``tensorboard``, ``evaluate`` and ``progress`` (they show no bar).
    The result's ``state`` is the final ``TrainState``; a host trainer's holds its parameters (as JAX arrays)
    and iterations, and None for what stayed in the trainer (the optimiser's state, the keys, the L1 ring)."""
    log_every = training_run.default_log_every(config.iterations) if log_every is None else log_every
    if config.trainer == "jax":
        return _train_on_loop(config, run_dir, log_every=log_every, **options)
    return _train_on_host(config, run_dir, log_every, dict(options))


def _train_on_host(config: GFlowNetConfig, run_dir, log_every: int, options: dict[str, Any]) -> training_run.RunResult:
    from labcore.agents.gflownet import trainers

    training_run.refuse_program_options(options, "trainer", config.trainer, "the checkpointed all-JAX trainer (trainer='jax')")
    if log_every < 1:
        raise ValueError(f"log_every must be >= 1, got {log_every}")
    # No bar: the trainer runs to its end in one call, and its rows are logged after it.
    host = TrainingRun.open(run_dir, config, name=_name(config), total_steps=config.iterations * config.batch_size,
                            unit="trajectory", unit_plural="trajectories", plotted=PLOTTED, x_key="update",
                            overwrite=options.get("overwrite", False), tensorboard=options.get("tensorboard", True),
                            progress=False)
    host.start()
    result = trainers.train(config, log_every=log_every)
    host.stop()
    for update, l1 in result["l1"]:
        host.log(update, {"loss": result["losses"][update - 1], "l1": l1}, steps=update * config.batch_size)
    params = result["params"] if "params" in result else _torch_params(result["agent"])
    own = {**_summarize(config, host.folder.rows),
           "seconds": {phase: round(value, 2) for phase, value in result["seconds"].items()}}
    evaluation = evaluate(config, params, config.seed + 1) if options.get("evaluate", True) else {}
    # The state a host trainer ends with: its parameters and iterations; its optimiser's state stayed in the trainer
    # (torch's, or optax's on the host), as it runs to its end in one call, without checkpoints.
    state = TrainState(params, opt_state=None, loop_key=None, iteration=jnp.int32(config.iterations), recent=None)
    return host.finish(state, updates=config.iterations, steps=config.iterations * config.batch_size, extra=own,
                       evaluation=evaluation)


def _torch_params(agent) -> dict[str, Any]:
    from labcore.torch_ref import gflownet as ref

    return ref.to_jax_params(agent)


def params(state: TrainState) -> dict[str, Any]:
    """The policy's parameters in a state of ``train`` or of ``load_checkpoint``."""
    return state.params


def load_checkpoint(path: str | os.PathLike, step: int | None = None) -> tuple[GFlowNetConfig, TrainState]:
    """(config, state) of an all-JAX run from its folder or checkpoints/ folder (default: newest step)."""
    return loop.load_checkpoint(path, GFlowNetConfig, make_program, step, algorithm=ALGORITHM)
