"""Notebook 03 (jit_scan_vmap): DQN's scan step (act, store, learn) written by the learner, a training
loop as one lax.scan, and per-example losses and gradients with vmap."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from labcore.course.exercises.checking import Exercise


# ----------------------------------------------------------------------------------------------
# scan_training_loop: T steps of SGD on a linear model, as one lax.scan.


def _training_loop_inputs(rng: np.random.Generator) -> tuple:
    steps = int(rng.integers(3, 13))
    batch = int(rng.integers(4, 33))
    features = int(rng.integers(2, 9))
    params = {
        "w": (0.5 * rng.normal(size=(features,))).astype(np.float32),
        "b": np.float32(rng.normal()),
    }
    xs = rng.normal(size=(steps, batch, features)).astype(np.float32)
    true_w = rng.normal(size=(features,)).astype(np.float32)
    ys = (xs @ true_w + 0.1 * rng.normal(size=(steps, batch))).astype(np.float32)
    return params, xs, ys, np.float32(rng.uniform(0.02, 0.2))


def _training_loop_reference(params, xs, ys, learning_rate):
    def mean_squared_error(p, x, y):
        return jnp.mean(jnp.square(x @ p["w"] + p["b"] - y))

    def sgd_step(p, batch):
        loss, grad = jax.value_and_grad(mean_squared_error)(p, *batch)
        return jax.tree_util.tree_map(lambda a, g: a - learning_rate * g, p, grad), loss

    return jax.lax.scan(sgd_step, params, (xs, ys))


class UnrolledLoop(ValueError):
    """The answer computes the right numbers with a Python loop, which jit unrolls into T copies."""


def _as_one_compiled_loop(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn``, refused when its program holds no loop: a Python ``for`` over the T steps gives the
    same numbers, but jit unrolls it into T copies of the step (compile time and program size grow
    with T), which is what this exercise is about. ``lax.scan`` and ``lax.fori_loop`` (a scan or a
    while loop underneath) pass."""

    def checked(*args):
        program = str(jax.make_jaxpr(fn)(*args))
        if not re.search(r"\b(scan|while)\[", program):
            raise UnrolledLoop("the program has no loop: a Python for over the steps is unrolled by jit into "
                               "one copy per step; carry the parameters through jax.lax.scan instead")
        return fn(*args)

    return checked


def scan_training_loop_solution(params, xs, ys, learning_rate):
    def loss_fn(params, x, y):
        prediction = x @ params["w"] + params["b"]
        return jnp.mean((prediction - y) ** 2)

    def step(params, batch):  # carry: the parameters; x: one step's batch
        x, y = batch
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)  # the loss BEFORE this step
        new_params = {name: params[name] - learning_rate * grads[name] for name in params}
        return new_params, loss

    final_params, losses = jax.lax.scan(step, params, (xs, ys))  # over the leading T axis
    return final_params, losses


def _mse(params, x, y):
    return jnp.mean((x @ params["w"] + params["b"] - y) ** 2)


def _sgd(params, x, y, learning_rate):
    grads = jax.grad(_mse)(params, x, y)
    return {name: params[name] - learning_rate * grads[name] for name in params}


def scan_training_loop_carry_not_threaded(params, xs, ys, learning_rate):
    def step(carry, batch):
        x, y = batch
        return carry, (_sgd(params, x, y, learning_rate), _mse(params, x, y))  # `params`, not `carry`

    _, (every_step, losses) = jax.lax.scan(step, params, (xs, ys))
    return jax.tree_util.tree_map(lambda leaf: leaf[-1], every_step), losses


def scan_training_loop_loss_after_step(params, xs, ys, learning_rate):
    def step(params, batch):
        x, y = batch
        params = _sgd(params, x, y, learning_rate)
        return params, _mse(params, x, y)  # measured on the updated parameters

    return jax.lax.scan(step, params, (xs, ys))


def scan_training_loop_reversed(params, xs, ys, learning_rate):
    def step(params, batch):
        x, y = batch
        return _sgd(params, x, y, learning_rate), _mse(params, x, y)

    return jax.lax.scan(step, params, (xs, ys), reverse=True)  # trains on the last batch first


# ----------------------------------------------------------------------------------------------
# dqn_scan_step: one agent step of DQN as the body of a lax.scan, from labcore's pieces.
#
# carry = (train_state, buffer, env_state, obs, step); keys = (act_key, env_key, sample_key), this
# step's keys, given as the scan's xs so that the learner's body and labcore's draw the same numbers.
# The checker scans the learner's body over SCAN_STEPS steps, jitted, and compares the final carry and
# the losses with labcore's.

SCAN_STEPS = 16


@functools.cache
def _scan_step_agent(num_envs: int, buffer_size: int, learning_starts: int):
    from labcore import envs
    from labcore.agents.dqn import core as dqn
    from labcore.agents.dqn.agent import make_dqn

    config = dqn.DQNConfig(
        env_id="CartPole-v1", hidden_sizes=(16,), num_envs=num_envs, train_frequency=num_envs, batch_size=8,
        buffer_size=buffer_size, learning_starts=learning_starts, total_steps=40 * num_envs,
        exploration_fraction=0.5,  # epsilon falls during the check: an epsilon from the wrong step shows
        target_update_frequency=4 * num_envs, learning_rate=1e-2,
    )
    env, env_params = envs.make_jax_env(config.env_id)
    return config, make_dqn(config, env=env, env_params=env_params), env, env_params


def _dqn_scan_step_inputs(rng: np.random.Generator) -> tuple:

    # num_envs >= 2: counting one step per env step instead of num_envs shows only then
    num_envs = int(rng.choice([2, 4]))
    config, agent, env, env_params = _scan_step_agent(num_envs, int(rng.choice([32, 64])), num_envs * int(rng.integers(2, 6)))
    key = jax.random.key(int(rng.integers(1 << 30)))
    params_key, reset_key, steps_key = jax.random.split(key, 3)
    obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(reset_key, num_envs), env_params)
    carry = (agent.init(params_key), agent.buffer.init(agent.example), env_state, obs, jnp.int32(0))
    act_keys, env_keys, sample_keys = (jax.random.split(k, SCAN_STEPS) for k in jax.random.split(steps_key, 3))
    return carry, (act_keys, env_keys, sample_keys), agent, config


def dqn_scan_step_reference(carry, keys, agent, config):
    """labcore's jitted DQN, one agent step of ``labcore.agents.dqn.scan`` with train_frequency = num_envs
    (tests/test_exercises.py checks that scanning it reproduces ``scan.make_parts``'s iterations)."""
    from labcore.agents.dqn import core as dqn

    train_state, buffer, env_state, obs, step = carry
    act_key, env_key, sample_key = keys
    epsilon = dqn.linear_epsilon(step, config)
    env_state, next_obs, transitions, done = agent.collect(train_state.params, env_state, obs, epsilon, act_key, env_key)
    buffer = agent.buffer.add(buffer, transitions, done)
    step = step + config.num_envs

    def learn(train_state):
        train_state, metrics = agent.learn(train_state, agent.buffer.sample(buffer, sample_key))
        return train_state, metrics["loss"]

    train_state, loss = jax.lax.cond(step > config.learning_starts, learn, lambda s: (s, jnp.float32(0.0)), train_state)
    return (train_state, buffer, env_state, next_obs, step), loss


def _scanned(step_fn: Callable[..., Any]) -> Callable[..., Any]:
    """How the checker runs a scan step: jitted, scanned over the SCAN_STEPS steps' keys."""

    def run(carry, keys, agent, config):
        def body(carry, step_keys):
            return step_fn(carry, step_keys, agent, config)

        return jax.jit(lambda carry, keys: jax.lax.scan(body, carry, keys))(carry, keys)

    return run


def _dqn_scan_reference(carry, keys, agent, config):
    """What the checker compares with: the reference step scanned over every step's keys."""
    return _scanned(dqn_scan_step_reference)(carry, keys, agent, config)


def dqn_scan_step_solution(carry, keys, agent, config):
    from labcore.agents.dqn import core as dqn

    train_state, buffer, env_state, obs, step = carry
    act_key, env_key, sample_key = keys
    # act and step every env, with the parameters and the epsilon of this step
    epsilon = dqn.linear_epsilon(step, config)
    env_state, next_obs, transitions, done = agent.collect(
        train_state.params, env_state, obs, epsilon, act_key, env_key)
    # store first: the update may sample the transitions just made
    buffer = agent.buffer.add(buffer, transitions, done)
    step = step + config.num_envs  # agent steps: one per env

    def update(train_state):
        batch = agent.buffer.sample(buffer, sample_key)
        new_state, metrics = agent.learn(train_state, batch)
        return new_state, metrics["loss"]

    def wait(train_state):
        return train_state, jnp.zeros((), jnp.float32)

    # a Python `if` cannot branch on a traced step: lax.cond compiles both branches, runs one
    learning = step > config.learning_starts
    train_state, loss = jax.lax.cond(learning, update, wait, train_state)
    return (train_state, buffer, env_state, next_obs, step), loss


def _scan_step_variant(carry, keys, agent, config, *, learn_first=False, keep_obs=False, warm_up=True,
                       count_env_steps=False, act_with_target=False):
    from labcore.agents.dqn import core as dqn

    train_state, buffer, env_state, obs, step = carry
    act_key, env_key, sample_key = keys
    acting = train_state.target_params if act_with_target else train_state.params
    env_state, next_obs, transitions, done = agent.collect(acting, env_state, obs, dqn.linear_epsilon(step, config),
                                                           act_key, env_key)
    step = step + (1 if count_env_steps else config.num_envs)
    sampled_from = buffer if learn_first else agent.buffer.add(buffer, transitions, done)
    buffer = agent.buffer.add(buffer, transitions, done)

    def learn(train_state):
        train_state, metrics = agent.learn(train_state, agent.buffer.sample(sampled_from, sample_key))
        return train_state, metrics["loss"]

    learning = (step > config.learning_starts) if warm_up else jnp.bool_(True)
    train_state, loss = jax.lax.cond(learning, learn, lambda s: (s, jnp.float32(0.0)), train_state)
    return (train_state, buffer, env_state, obs if keep_obs else next_obs, step), loss


def dqn_scan_step_learns_before_storing(carry, keys, agent, config):
    return _scan_step_variant(carry, keys, agent, config, learn_first=True)


def dqn_scan_step_keeps_the_first_obs(carry, keys, agent, config):
    return _scan_step_variant(carry, keys, agent, config, keep_obs=True)


def dqn_scan_step_without_warm_up(carry, keys, agent, config):
    return _scan_step_variant(carry, keys, agent, config, warm_up=False)


def dqn_scan_step_counts_env_steps(carry, keys, agent, config):
    return _scan_step_variant(carry, keys, agent, config, count_env_steps=True)


def dqn_scan_step_acts_with_the_target(carry, keys, agent, config):
    return _scan_step_variant(carry, keys, agent, config, act_with_target=True)


# ----------------------------------------------------------------------------------------------
# vmap_loss and per_example_grads: one example's function, batched with vmap.


def _regression_batch_inputs(rng: np.random.Generator) -> tuple:
    features = int(rng.integers(2, 9))
    batch = int(rng.integers(3, 40))
    return (
        rng.normal(size=(features,)).astype(np.float32),
        np.float32(rng.normal()),
        rng.normal(size=(batch, features)).astype(np.float32),
        rng.normal(size=(batch,)).astype(np.float32),
    )


def _per_example_loss_reference(w, b, xs, ys):
    def one(x, y):
        return 0.5 * (x @ w + b - y) ** 2

    return jax.vmap(one)(xs, ys)


def _per_example_grads_reference(w, b, xs, ys):
    def one(w, x, y):
        return 0.5 * (x @ w + b - y) ** 2

    return jax.vmap(jax.grad(one), in_axes=(None, 0, 0))(w, xs, ys)


def vmap_loss_solution(w, b, xs, ys):
    def loss_of_one_example(x, y):  # x: [D], y: [] -> []
        prediction = jnp.dot(x, w) + b
        return 0.5 * (prediction - y) ** 2

    return jax.vmap(loss_of_one_example, in_axes=(0, 0))(xs, ys)


def vmap_loss_batch_mean(w, b, xs, ys):
    return jnp.mean(0.5 * (xs @ w + b - ys) ** 2)


def per_example_grads_solution(w, b, xs, ys):
    def loss_of_one_example(w, x, y):
        return 0.5 * (jnp.dot(x, w) + b - y) ** 2

    grad_of_one = jax.grad(loss_of_one_example)  # d loss / d w, [D]
    return jax.vmap(grad_of_one, in_axes=(None, 0, 0))(w, xs, ys)  # w shared, one row per example


def per_example_grads_of_the_batch_mean(w, b, xs, ys):
    grad = jax.grad(lambda w: jnp.mean(0.5 * (xs @ w + b - ys) ** 2))(w)
    return jnp.broadcast_to(grad, xs.shape)


def catalogue() -> list[Exercise]:
    """This notebook's exercises, in the order the notebook checks them."""
    return [
        Exercise(
            name="dqn_scan_step",
            description="One agent step of DQN as the body of a jax.lax.scan: (carry, keys, agent, config) -> (carry, "
            "loss), with carry = (train_state, buffer, env_state, obs, step) and keys = (act_key, env_key, sample_key), "
            "this step's keys. Act and step every env, store the transitions, then learn once the buffer holds MORE "
            "than config.learning_starts transitions; loss is 0.0 while it does not.\n"
            "Use labcore's pieces: epsilon = dqn.linear_epsilon(step, config) (the step BEFORE this one); "
            "agent.collect(train_state.params, env_state, obs, epsilon, act_key, env_key) -> (env_state, next_obs, "
            "transitions, done); buffer = agent.buffer.add(buffer, transitions, done) BEFORE sampling; step grows by "
            "config.num_envs (one agent step per env); the update is agent.learn(train_state, "
            "agent.buffer.sample(buffer, sample_key)) -> (train_state, metrics) with metrics['loss']. The step is traced, so "
            "a Python `if` cannot test it: jax.lax.cond(pred, learn_fn, skip_fn, train_state) runs one branch. "
            "The checker scans your step over 16 steps, jitted, and compares the final carry and the 16 losses "
            "with labcore's jitted DQN (labcore.agents.dqn.scan).",
            reference=_dqn_scan_reference,
            make_inputs=_dqn_scan_step_inputs,
            run_with=_scanned,
            trials=2,  # each trial compiles the whole scanned step for a new config (a few seconds on a CPU)
            rtol=1e-5,
            atol=1e-6,
            solution=dqn_scan_step_solution,
            mistakes=(
                ("learns before storing: the update samples the buffer without this step's transitions",
                 dqn_scan_step_learns_before_storing),
                ("next_obs is not carried: every step acts on the same observations", dqn_scan_step_keeps_the_first_obs),
                ("no warm-up: the updates start at the first step, sampling a buffer that is almost empty",
                 dqn_scan_step_without_warm_up),
                ("the step counts env steps, not agent steps (num_envs per env step): epsilon and the warm-up run "
                 "num_envs times too slow", dqn_scan_step_counts_env_steps),
                ("acts with the target network's parameters, which lag the online ones",
                 dqn_scan_step_acts_with_the_target),
            ),
            core=True,
        ),
        Exercise(
            name="scan_training_loop",
            description="T steps of SGD on a linear model as one jax.lax.scan: params {'w': [D], 'b': []}, "
            "xs [T, B, D], ys [T, B], learning_rate -> (final params, losses [T]), where losses[t] = "
            "mean((xs[t] @ w + b - ys[t])**2) is measured BEFORE step t and each step is "
            "params - learning_rate * grad.\n"
            "The carry is the parameters and the scanned sequence is (xs, ys), whose leading axis is time: "
            "the body takes (params, (x, y)) and returns (the new params, this step's loss). "
            "jax.value_and_grad gives the loss and the gradient in one call.",
            reference=_training_loop_reference,
            make_inputs=_training_loop_inputs,
            jit=True,
            rtol=1e-4,
            atol=1e-5,
            run_with=_as_one_compiled_loop,
            solution=scan_training_loop_solution,
            mistakes=(
                ("the carry is not threaded: every step starts again from the initial parameters",
                 scan_training_loop_carry_not_threaded),
                ("each loss is measured after its step, on the updated parameters (off by one)",
                 scan_training_loop_loss_after_step),
                ("the scan runs backwards (reverse=True): training starts from the last batch",
                 scan_training_loop_reversed),
            ),
        ),
        Exercise(
            name="vmap_loss",
            description="Per-example squared error 0.5 * (x @ w + b - y)**2 for a batch xs [B, D], ys [B] -> [B].\n"
            "Write the loss for ONE example (x: [D], y: []) and batch it with jax.vmap(one, in_axes=(0, 0)) "
            "(w and b are shared: close over them, or give them in_axes=None).",
            reference=_per_example_loss_reference,
            make_inputs=_regression_batch_inputs,
            jit=True,
            solution=vmap_loss_solution,
            mistakes=(("the batch mean, not one loss per example", vmap_loss_batch_mean),),
        ),
        Exercise(
            name="per_example_grads",
            description="Gradient of each example's loss 0.5 * (x @ w + b - y)**2 with respect to w: xs [B, D] -> [B, D].\n"
            "jax.grad of the one-example loss gives [D]; jax.vmap(jax.grad(one), in_axes=(None, 0, 0))(w, xs, ys) "
            "maps it over the batch while sharing w (in PyTorch this needs functorch/torch.func).",
            reference=_per_example_grads_reference,
            make_inputs=_regression_batch_inputs,
            jit=True,
            solution=per_example_grads_solution,
            mistakes=(("the gradient of the batch mean, copied to every row", per_example_grads_of_the_batch_mean),),
        ),
    ]
