"""GFlowNet trainers behind one switch (``GFlowNetConfig.trainer``), each timing its phases.

* ``torch``: all PyTorch (``labcore.torch_ref.gflownet.train``).
* ``hybrid``: the PyTorch agent samples; the batch is converted to JAX arrays; one jitted JAX
  gradient step (optax Adam, log Z with its own learning rate) updates a JAX copy of the
  parameters; the parameters are copied back into the PyTorch agent for the next sampling.
* ``jax_policy``: the policy and its parameters live in JAX (no conversion, no sync), but the
  sampler is still a Python loop that calls one jitted sampling step per environment step.
* ``jax``: policy and sampler in JAX too (``labcore.agents.gflownet.core.make_train``): trajectories
  from a ``lax.scan``, every iteration inside one compiled program, vmappable over seeds.

All return the same dict: losses per iteration, L1 (sum form) of the recent samples against the
exact target, and seconds per phase (torch / hybrid: sampling, conversion, gradient step,
parameter sync; jax_policy: sampling, gradient step; jax: compile, and the fused iterations).
The order torch -> hybrid -> jax_policy -> jax is the migration of notebook 09, one step at a time.

``labcore.agents.gflownet.run.train`` writes any of them into a results folder (the all-JAX one
on the shared loop, with checkpoints and resume).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import Any

import numpy as np

from labcore.agents.gflownet.core import GFlowNetConfig


def _jitted_steps(config: GFlowNetConfig):
    """(optimizer, jitted gradient step, jitted sampling step) for ``config``, compiled once per
    model and loss: the run's length, seed and trainer do not change them, so they are dropped from
    the cache key and a second run (a benchmark's, a notebook's) reuses the compiled functions."""
    return _jitted_steps_for(dataclasses.replace(config, trainer="torch", iterations=1, seed=0, l1_samples=1))


@functools.lru_cache(maxsize=16)
def _jitted_steps_for(config: GFlowNetConfig):
    import jax

    from labcore.agents.gflownet import core as gflownet

    optimizer = gflownet.make_optimizer(config)
    return (optimizer, jax.jit(gflownet.make_gradient_step(config, optimizer)),
            jax.jit(functools.partial(gflownet.sampling_step, config)))


def train(config: GFlowNetConfig, log_every: int = 100) -> dict[str, Any]:
    if config.trainer == "torch":
        from labcore.torch_ref import gflownet as ref

        return ref.train(config, log_every)
    if config.trainer == "jax":
        return train_jax(config, log_every)
    if config.trainer == "jax_policy":
        return train_jax_policy(config, log_every)
    return train_hybrid(config, log_every)


def train_jax(config: GFlowNetConfig, log_every: int = 100) -> dict[str, Any]:
    """Policy, sampler and update all in JAX: one compiled program for the whole run."""
    import jax

    from labcore.agents.gflownet import core as gflownet

    train = jax.jit(gflownet.make_train(config))
    key = jax.random.key(config.seed)
    started = time.perf_counter()
    compiled = train.lower(key).compile()
    compiled_at = time.perf_counter()
    state, metrics = jax.block_until_ready(compiled(key))
    finished = time.perf_counter()
    return {"losses": np.asarray(metrics["loss"]).tolist(), "l1": gflownet.l1_curve(config, metrics["terminals"], log_every),
            "params": state.params,
            "seconds": {"compile": compiled_at - started, "fused iteration": finished - compiled_at}}


def train_hybrid(config: GFlowNetConfig, log_every: int = 100) -> dict[str, Any]:
    import torch

    from labcore.agents.gflownet import core as gflownet
    from labcore.torch_ref import gflownet as ref

    torch.manual_seed(config.seed)  # the same initial agent and samples as the torch trainer
    generator = torch.Generator().manual_seed(config.seed)
    env = ref.HyperGridEnv(config.ndim, config.height)
    agent = ref.GFlowNetAgent(config.ndim, config.height, config.hidden_size, config.num_layers)
    params = ref.to_jax_params(agent)
    optimizer, gradient_step, _ = _jitted_steps(config)
    opt_state = optimizer.init(params)
    seconds = {"sampling": 0.0, "conversion": 0.0, "gradient": 0.0, "sync": 0.0}
    terminals: list[np.ndarray] = []
    losses = []
    for iteration in range(1, config.iterations + 1):
        started = time.perf_counter()
        batch = ref.sample(agent, env, config.batch_size, config.exploration_epsilon, generator, config.loss == "fm")
        sampled = time.perf_counter()
        jax_batch = ref.batch_to_jax(batch)
        converted = time.perf_counter()
        params, opt_state, loss = gradient_step(params, opt_state, jax_batch)
        losses.append(float(loss))  # waits for the step
        stepped = time.perf_counter()
        ref.load_jax_params(agent, params)
        synced = time.perf_counter()
        for phase, (a, b) in {"sampling": (started, sampled), "conversion": (sampled, converted),
                              "gradient": (converted, stepped), "sync": (stepped, synced)}.items():
            seconds[phase] += b - a
        terminals.append(ref.terminal_indices(env, batch))
    l1 = gflownet.l1_curve(config, np.stack(terminals), log_every)
    return {"losses": losses, "l1": l1, "agent": agent, "params": params, "seconds": seconds}


def train_jax_policy(config: GFlowNetConfig, log_every: int = 100) -> dict[str, Any]:
    """Phase 2: parameters and policy in JAX, sampling still a Python loop of jitted steps. Same
    initial parameters and keys as ``train_jax``, so the same trajectories while the two agree."""
    import jax

    from labcore.agents.gflownet import core as gflownet

    optimizer, gradient_step, sampling_step = _jitted_steps(config)
    params, opt_state, loop_key = gflownet.start(config, optimizer, jax.random.key(config.seed))  # as make_train
    seconds = {"sampling": 0.0, "gradient": 0.0}
    terminals: list[np.ndarray] = []
    losses = []
    for key in gflownet.iteration_keys(config, loop_key):
        started = time.perf_counter()
        batch = jax.block_until_ready(gflownet.sample_trajectories_stepwise(config, params, key, sampling_step))
        sampled = time.perf_counter()
        params, opt_state, loss = gradient_step(params, opt_state, batch)
        losses.append(float(loss))  # waits for the step
        seconds["sampling"] += sampled - started
        seconds["gradient"] += time.perf_counter() - sampled
        terminals.append(np.asarray(gflownet.terminal_indices(config.grid, batch)))
    l1 = gflownet.l1_curve(config, np.stack(terminals), log_every)
    return {"losses": losses, "l1": l1, "params": params, "seconds": seconds}


def profile_phases(config: GFlowNetConfig, warmup: int = 20) -> dict[str, float]:
    """Milliseconds per iteration in each phase of the torch / hybrid / jax_policy trainer, and
    iterations per second: a run of ``warmup`` iterations (JAX's compile) is subtracted from a run
    of warmup + ``config.iterations``."""
    # A first short run fills JAX's in-process compilation caches, so that the two measured runs
    # below pay the same (small) start-up cost and the subtraction removes it.
    train(dataclasses.replace(config, iterations=warmup), log_every=warmup)
    short = train(dataclasses.replace(config, iterations=warmup), log_every=warmup)["seconds"]
    full = train(dataclasses.replace(config, iterations=warmup + config.iterations), log_every=config.iterations)["seconds"]
    per_iteration = {phase: 1000 * (full[phase] - short[phase]) / config.iterations for phase in full}
    total = sum(per_iteration.values())
    return {**{f"{phase} (ms)": value for phase, value in per_iteration.items()}, "iteration (ms)": total,
            "iterations/s": 1000 / total}


def time_gradient_step(config: GFlowNetConfig, repeats: int = 100) -> dict[str, float]:
    """Milliseconds of one gradient step on a fixed batch, PyTorch (forward, backward, Adam) and the
    jitted JAX step, each timed in a loop of its own. Inside the hybrid loop the JAX step is slower
    than this: PyTorch's OpenMP workers keep spinning for a while after each sampling op and take
    CPU cores from XLA's threads (on a 2-core machine, most of them)."""
    import torch

    from labcore.torch_ref import gflownet as ref

    torch.manual_seed(config.seed)
    env = ref.HyperGridEnv(config.ndim, config.height)
    agent = ref.GFlowNetAgent(config.ndim, config.height, config.hidden_size, config.num_layers)
    batch = ref.sample(agent, env, config.batch_size, 0.0, torch.Generator().manual_seed(config.seed))
    optimizer = ref.make_optimizer(agent, config.learning_rate, config.log_z_learning_rate)

    def torch_step() -> float:
        loss = ref.loss_of(agent, env, batch, config.loss, config.uniform_backward, config.subtb_lambda)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.item()

    params = ref.to_jax_params(agent)
    jax_optimizer, step, _ = _jitted_steps(config)  # the hybrid trainer's compiled step
    state = [params, jax_optimizer.init(params)]
    jax_batch = ref.batch_to_jax(batch)

    def jax_step() -> float:
        state[0], state[1], loss = step(state[0], state[1], jax_batch)
        return float(loss)

    times = {}
    for name, one_step in (("torch", torch_step), ("jax", jax_step)):
        for _ in range(10):  # warm-up (and JAX's compile)
            one_step()
        started = time.perf_counter()
        for _ in range(repeats):
            one_step()
        times[name] = 1000 * (time.perf_counter() - started) / repeats
    return times
