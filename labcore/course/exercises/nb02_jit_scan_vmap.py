"""Notebook 02 (jit_scan_vmap): a training loop as one lax.scan, and per-example losses and gradients
with vmap."""

from __future__ import annotations

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
            core=True,
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
