"""Notebook 02 (flax_nnx): a PyTorch checkpoint ported to NNX, an NNX model trained inside one
``lax.scan``, and NoisyLinear written as an NNX module.

``noisy_linear_nnx`` is the core exercise: the learner writes a whole ``nnx.Module``, and the checker
(``labcore.course.lessons.nb02_flax_nnx.noisy_layer_checks``) takes it apart: what it holds, then how its noise and
outputs behave (any way of drawing the two noises from the key passes); ``check`` names the classic
mistake a wrong layer makes.

Below the exercises' inputs and references come the worked solutions (shown by
``labcore.course.exercises.solution(name)``) and the classic mistakes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from labcore.course.lessons.nb02_flax_nnx import nnx_dqn_checks as dqn_step
from labcore.course.exercises.checking import Exercise
from labcore.course.lessons.nb02_flax_nnx.noisy_layer_checks import (
    built_and_checked,
    judge_noisy_layer,
    noisy_layer_inputs,
    noisy_layer_reference,
)

# ----------------------------------------------------------------------------------------------
# torch_to_nnx: a PyTorch nn.Sequential checkpoint as the parameters of an NNX MLP.


def _torch_checkpoint_inputs(rng: np.random.Generator) -> tuple:
    """The state_dict of nn.Sequential(Linear, ReLU, ..., Linear) with 6 to 11 Linear layers: enough
    that the Sequential's indices reach 10, where the keys' string order ('10.weight' < '2.weight')
    differs from the layers' order."""
    import torch

    depth = int(rng.integers(6, 12))
    sizes = [int(rng.integers(2, 10))]
    for _ in range(depth):  # neighbouring sizes differ, so that a kernel left [out, in] has the wrong shape
        sizes.append(int(rng.choice([s for s in range(2, 10) if s != sizes[-1]])))
    modules = []
    for n_in, n_out in zip(sizes[:-1], sizes[1:], strict=True):
        modules += [torch.nn.Linear(n_in, n_out), torch.nn.ReLU()]
    model = torch.nn.Sequential(*modules[:-1])  # no ReLU after the last Linear
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.from_numpy(rng.normal(size=tuple(parameter.shape)).astype(np.float32)))
    return (model.state_dict(),)


def _torch_to_nnx_reference(state_dict) -> dict:
    """{'layer_i': {'kernel': [in, out], 'bias': [out]}}, the i-th Linear of the Sequential, whatever its index."""
    indices = sorted({int(name.split(".")[0]) for name in state_dict})
    return {
        f"layer_{i}": {"kernel": state_dict[f"{index}.weight"].numpy().T, "bias": state_dict[f"{index}.bias"].numpy()}
        for i, index in enumerate(indices)
    }


# ----------------------------------------------------------------------------------------------
# nnx_scan_fit: an NNX model trained by plain SGD inside one lax.scan.


class MLP(nnx.Module):
    """The notebook's two-layer MLP: x [B, in] -> [B, out], a ReLU between."""

    def __init__(self, in_size: int, hidden: int, out_size: int, *, rngs: nnx.Rngs):
        self.hidden = nnx.Linear(in_size, hidden, rngs=rngs)
        self.out = nnx.Linear(hidden, out_size, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.out(jax.nn.relu(self.hidden(x)))


def _scan_fit_inputs(rng: np.random.Generator) -> tuple:
    steps, batch, features = int(rng.integers(3, 11)), int(rng.integers(4, 17)), int(rng.integers(1, 5))
    model = MLP(features, int(rng.integers(4, 17)), 1, rngs=nnx.Rngs(params=int(rng.integers(1 << 30))))
    xs = rng.normal(size=(steps, batch, features)).astype(np.float32)
    ys = np.sin(xs.sum(axis=-1, keepdims=True)).astype(np.float32)
    return model, xs, ys, np.float32(rng.uniform(0.02, 0.2))


def _scan_fit_reference(model, xs, ys, learning_rate):
    graphdef, state = nnx.split(model)

    def squared_error(state, x, y):
        return jnp.mean(jnp.square(nnx.merge(graphdef, state)(x) - y))

    def sgd_step(state, batch):
        loss, grad = jax.value_and_grad(squared_error)(state, *batch)
        return jax.tree.map(lambda p, g: p - learning_rate * g, state, grad), loss

    final, losses = jax.lax.scan(sgd_step, state, (xs, ys))
    return nnx.to_pure_dict(final), losses


class UnrolledLoop(ValueError):
    """The answer trains with a Python loop, which jit unrolls into one copy of the step per step."""


def _fresh_copy(model: nnx.Module) -> nnx.Module:
    """A new module with the same structure and parameters: an answer that trains in place leaves the input alone."""
    return nnx.merge(*nnx.split(model))


def _as_params_dict(params: Any) -> Any:
    """The trained parameters as a plain nested dict, whether the answer returns an nnx.State, a module or a dict."""
    if isinstance(params, nnx.Module):
        params = nnx.state(params, nnx.Param)
    if isinstance(params, nnx.State):
        return nnx.to_pure_dict(params)
    return params


def _as_one_compiled_loop(fit: Callable[..., Any]) -> Callable[..., Any]:
    """``fit``, refused when its program holds no loop (a Python ``for`` over the steps gives the same
    numbers, but jit unrolls it); the trained parameters come back as a plain dict."""

    def checked(model, xs, ys, learning_rate):
        program = str(jax.make_jaxpr(lambda xs, ys: fit(_fresh_copy(model), xs, ys, learning_rate))(xs, ys))
        if not re.search(r"\b(scan|while)\[", program):
            raise UnrolledLoop("the program has no loop: a Python for over the steps is unrolled by jit into one "
                               "copy per step; carry the parameters through jax.lax.scan instead")
        params, losses = fit(_fresh_copy(model), xs, ys, learning_rate)
        return _as_params_dict(params), losses

    return checked


# ----------------------------------------------------------------------------------------------
# Worked solutions, written as a learner would write them.


def torch_to_nnx(state_dict):
    # A state_dict keeps the Sequential's order; the ReLUs have indices (1, 3, ...) but no parameters.
    weight_names = [name for name in state_dict if name.endswith(".weight")]
    params = {}
    for i, weight_name in enumerate(weight_names):
        prefix = weight_name.removesuffix(".weight")
        params[f"layer_{i}"] = {
            "kernel": jnp.asarray(state_dict[weight_name].numpy().T),  # torch [out, in] -> Flax [in, out]
            "bias": jnp.asarray(state_dict[prefix + ".bias"].numpy()),
        }
    return params


def nnx_scan_fit(model, xs, ys, learning_rate):
    graphdef, params = nnx.split(model)  # structure (static) and parameters (a pytree)

    def loss_fn(params, x, y):
        module = nnx.merge(graphdef, params)  # rebuilt from ITS argument, so the gradient reaches params
        return jnp.mean((module(x) - y) ** 2)

    def step(params, batch):
        x, y = batch
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)  # the loss BEFORE this step
        params = jax.tree.map(lambda p, g: p - learning_rate * g, params, grads)
        return params, loss

    params, losses = jax.lax.scan(step, params, (xs, ys))
    return params, losses


class NoisyLinear(nnx.Module):
    def __init__(self, in_features: int, out_features: int, *, rngs: nnx.Rngs):
        self.in_features, self.out_features = in_features, out_features
        bound = math.sqrt(3.0 / in_features)
        self.kernel = nnx.Param(jax.random.uniform(rngs.params(), (in_features, out_features),
                                                   minval=-bound, maxval=bound))
        self.bias = nnx.Param(jax.random.uniform(rngs.params(), (out_features,), minval=-bound, maxval=bound))
        self.sigma_kernel = nnx.Param(jnp.full((in_features, out_features), 0.017))  # trainable: an nnx.Param
        self.sigma_bias = nnx.Param(jnp.full((out_features,), 0.017))

    def noise(self, key):
        kernel_key, bias_key = jax.random.split(key)  # one key each: never the same draw twice
        eps_kernel = jax.random.normal(kernel_key, (self.in_features, self.out_features))  # one per weight
        eps_bias = jax.random.normal(bias_key, (self.out_features,))
        return eps_kernel, eps_bias

    def __call__(self, x, noise_key=None):
        if noise_key is None:  # a Python test on the argument, decided while tracing: the mean weights
            return x @ self.kernel[...] + self.bias[...]
        eps_kernel, eps_bias = self.noise(noise_key)
        kernel = self.kernel[...] + self.sigma_kernel[...] * eps_kernel  # the WEIGHTS are perturbed
        bias = self.bias[...] + self.sigma_bias[...] * eps_bias
        return x @ kernel + bias


# ----------------------------------------------------------------------------------------------
# Classic mistakes. Each runs and returns the right structure (or, for the NoisyLinear ones, holds the
# right parameters), so that check compares values and can name the mistake.


def _torch_to_nnx_not_transposed(state_dict):
    names = [name.removesuffix(".weight") for name in state_dict if name.endswith(".weight")]
    return {f"layer_{i}": {"kernel": state_dict[f"{n}.weight"].numpy(), "bias": state_dict[f"{n}.bias"].numpy()}
            for i, n in enumerate(names)}


def _torch_to_nnx_reshaped(state_dict):
    names = [name.removesuffix(".weight") for name in state_dict if name.endswith(".weight")]
    out = {}
    for i, n in enumerate(names):
        weight = state_dict[f"{n}.weight"].numpy()
        out[f"layer_{i}"] = {"kernel": weight.reshape(weight.shape[1], weight.shape[0]),
                             "bias": state_dict[f"{n}.bias"].numpy()}
    return out


def _torch_to_nnx_sorted_names(state_dict):
    names = sorted(name.removesuffix(".weight") for name in state_dict if name.endswith(".weight"))
    return {f"layer_{i}": {"kernel": state_dict[f"{n}.weight"].numpy().T, "bias": state_dict[f"{n}.bias"].numpy()}
            for i, n in enumerate(names)}


def _torch_to_nnx_sequential_indices(state_dict):
    names = [name.removesuffix(".weight") for name in state_dict if name.endswith(".weight")]
    return {f"layer_{n}": {"kernel": state_dict[f"{n}.weight"].numpy().T, "bias": state_dict[f"{n}.bias"].numpy()}
            for n in names}


def _sgd_scan(graphdef, loss_of, params, xs, ys, learning_rate, loss_after_step=False):
    def step(params, batch):
        loss, grads = jax.value_and_grad(loss_of)(params, *batch)
        params = jax.tree.map(lambda p, g: p - learning_rate * g, params, grads)
        return params, (loss_of(params, *batch) if loss_after_step else loss)

    return jax.lax.scan(step, params, (xs, ys))


def _scan_fit_module_outside_the_loss(model, xs, ys, learning_rate):
    graphdef, params = nnx.split(model)
    # The loss calls `model`, built before the loop, not nnx.merge(graphdef, p): it does not depend
    # on p, so its gradient is zero and nothing trains.
    return _sgd_scan(graphdef, lambda p, x, y: jnp.mean((model(x) - y) ** 2), params, xs, ys, learning_rate)


def _scan_fit_loss_after_step(model, xs, ys, learning_rate):
    graphdef, params = nnx.split(model)
    loss_of = lambda p, x, y: jnp.mean((nnx.merge(graphdef, p)(x) - y) ** 2)  # noqa: E731
    return _sgd_scan(graphdef, loss_of, params, xs, ys, learning_rate, loss_after_step=True)


def _scan_fit_carry_not_threaded(model, xs, ys, learning_rate):
    graphdef, params = nnx.split(model)

    def loss_of(p, x, y):
        return jnp.mean((nnx.merge(graphdef, p)(x) - y) ** 2)

    def step(carry, batch):
        loss, grads = jax.value_and_grad(loss_of)(params, *batch)  # `params`, not `carry`
        return carry, (jax.tree.map(lambda p, g: p - learning_rate * g, params, grads), loss)

    _, (every_step, losses) = jax.lax.scan(step, params, (xs, ys))
    return jax.tree.map(lambda leaf: leaf[-1], every_step), losses


class _NoiseOnTheOutput(NoisyLinear):
    def __call__(self, x, noise_key=None):
        if noise_key is None:
            return x @ self.kernel[...] + self.bias[...]
        eps_kernel, eps_bias = self.noise(noise_key)
        noise = jnp.sum(self.sigma_kernel[...] * eps_kernel, axis=0) + self.sigma_bias[...] * eps_bias
        return x @ self.kernel[...] + self.bias[...] + noise


class _NoBiasNoise(NoisyLinear):
    def __call__(self, x, noise_key=None):
        if noise_key is None:
            return x @ self.kernel[...] + self.bias[...]
        eps_kernel, _ = self.noise(noise_key)
        return x @ (self.kernel[...] + self.sigma_kernel[...] * eps_kernel) + self.bias[...]


class _FactorisedNoise(NoisyLinear):
    def noise(self, key):
        def scaled(e):
            return jnp.sign(e) * jnp.sqrt(jnp.abs(e))

        in_key, out_key = jax.random.split(key)
        eps_in = scaled(jax.random.normal(in_key, (self.in_features,)))
        eps_out = scaled(jax.random.normal(out_key, (self.out_features,)))
        return jnp.outer(eps_in, eps_out), eps_out


class _NoiseWithoutAKey(NoisyLinear):
    def __call__(self, x, noise_key=None):
        return super().__call__(x, jax.random.key(0) if noise_key is None else noise_key)


class _OneDrawForKernelAndBias(NoisyLinear):
    def noise(self, key):
        return (jax.random.normal(key, (self.in_features, self.out_features)),
                jax.random.normal(key, (self.out_features,)))


def catalogue() -> list[Exercise]:
    """This notebook's exercises, in the order the notebook checks them."""
    return [
        Exercise(
            name="torch_to_nnx",
            description="A PyTorch nn.Sequential(Linear, ReLU, ..., Linear) checkpoint as the parameters of an NNX MLP: "
            "state_dict {'0.weight': [out, in], '0.bias': [out], '2.weight': ..., ...} (torch tensors) -> "
            "{'layer_0': {'kernel': [in, out], 'bias': [out]}, 'layer_1': ..., ...}.\n"
            "The i-th Linear becomes 'layer_i': the ReLUs take Sequential indices (1, 3, ...) but hold no "
            "parameters, so Sequential index 2 is layer_1. Take the layers in the state_dict's own order (it is "
            "the module's order; sorting the names as strings puts '10' before '2'), and transpose each weight "
            "(.numpy().T): PyTorch stores [out, in], Flax's kernel is [in, out]; a reshape gives the right shape "
            "and the wrong numbers.",
            reference=_torch_to_nnx_reference,
            make_inputs=_torch_checkpoint_inputs,
            rtol=0.0,  # copied, not computed: exact
            atol=0.0,
            solution=torch_to_nnx,
            mistakes=(
                ("the weights are not transposed: PyTorch stores [out, in], Flax's kernel is [in, out]",
                 _torch_to_nnx_not_transposed),
                ("reshaped to [in, out] instead of transposed: the right shape, scrambled numbers",
                 _torch_to_nnx_reshaped),
                ("the layers are taken in the string order of their names: '10.weight' sorts before '2.weight'",
                 _torch_to_nnx_sorted_names),
                ("the layers are numbered by their nn.Sequential index (0, 2, 4, ...: the ReLUs count there), "
                 "not 0, 1, 2, ...", _torch_to_nnx_sequential_indices),
            ),
        ),
        Exercise(
            name="nnx_dqn_train_step",
            description="DQN's update, the NNX way: (model, target_model, optimizer, batch, gamma) -> the loss, "
            "computed before the step; model (an online QNetwork) and optimizer (nnx.Optimizer(model, optax.adam, "
            "wrt=nnx.Param)) change in place. batch = (obs [B, D], actions [B], rewards [B], next_obs [B, D], "
            "terminated [B] bool).\n"
            "The target is reward + gamma * (1 - terminated) * max_a' target_model(next_obs): from the TARGET "
            "network, no bootstrap past a terminal state, the reward kept, and no gradient through it (compute "
            "it outside the loss, or stop_gradient). The loss is DQN's: labcore.losses.huber_loss(Q(s, a) - "
            "target) averaged over the batch, Q(s, a) the online network's Q-value of the action taken. Then "
            "loss, grads = nnx.value_and_grad(loss_fn)(model) and optimizer.update(model, grads). The checker "
            "builds both networks from a PyTorch checkpoint, runs your step a few times (copying the online "
            "network into the target every few steps, as DQN does) and compares the losses and both networks' "
            "Q-values with labcore's own DQN update given the same weights.",
            reference=dqn_step.reference,
            make_inputs=dqn_step.inputs,
            run_with=dqn_step.run_steps,
            trials=3,
            rtol=1e-4,
            atol=1e-5,
            solution=dqn_step.nnx_dqn_train_step,
            mistakes=dqn_step.MISTAKES,
            core=True,
        ),
        Exercise(
            name="nnx_scan_fit",
            description="Train an NNX model by plain SGD inside one jax.lax.scan: (model, xs [T, B, D], ys [T, B, 1], "
            "learning_rate) -> (final parameters, losses [T]), where losses[t] = mean((model(xs[t]) - ys[t])**2) is "
            "measured BEFORE step t, and each step is params - learning_rate * grad.\n"
            "graphdef, params = nnx.split(model) once; the loss takes the parameters as its argument and rebuilds "
            "the module from them with nnx.merge(graphdef, params) INSIDE the loss (a loss that calls `model` does "
            "not depend on its argument: zero gradient). The scan's carry is the parameters, its xs are (xs, ys). "
            "The parameters may come back as an nnx.State, a plain dict or a module; the checker refuses a "
            "Python for over the steps.",
            reference=_scan_fit_reference,
            make_inputs=_scan_fit_inputs,
            run_with=_as_one_compiled_loop,
            trials=4,
            # T <= 10 SGD steps on float32 inputs of order 1: a right answer differs from the reference only
            # in the order of float32 sums (1e-6 relative); each mistake moves the losses or the parameters by
            # 1e-3 or more.
            rtol=1e-4,
            atol=1e-5,
            solution=nnx_scan_fit,
            mistakes=(
                ("the loss calls the module built outside it, not nnx.merge(graphdef, params) of its argument: the "
                 "gradient is zero and nothing trains", _scan_fit_module_outside_the_loss),
                ("each loss is measured after its step, on the updated parameters (off by one)",
                 _scan_fit_loss_after_step),
                ("the carry is not threaded: every step starts again from the initial parameters",
                 _scan_fit_carry_not_threaded),
            ),
        ),
        Exercise(
            name="noisy_linear_nnx",
            description="NoisyLinear as an nnx.Module: NoisyLinear(in_features, out_features, *, rngs), noise(key) -> "
            "(eps_kernel [in, out], eps_bias [out]), __call__(x, noise_key=None) -> [B, out].\n"
            "Parameters, each an nnx.Param: kernel [in, out] and bias [out] drawn with rngs.params() from "
            "U(-sqrt(3/in), sqrt(3/in)); sigma_kernel [in, out] and sigma_bias [out] = 0.017 "
            "everywhere. noise(key): standard normals of shape [in, out] and [out], each from a key of its own "
            "derived from key: kernel_key, bias_key = jax.random.split(key) for instance; any way passes (the "
            "other order, fold_in(key, 0) and fold_in(key, 1)), but never one key for both draws. __call__: "
            "without a key, x @ kernel + bias (the mean weights); with one, eps_kernel, eps_bias = "
            "self.noise(noise_key) and x @ (kernel + sigma_kernel * eps_kernel) + (bias + sigma_bias * eps_bias): "
            "independent noise on every WEIGHT, not factorised, not added to the output. Nothing random is kept "
            "in the module (no rngs attribute). The checker builds your layer, checks its parameters and their "
            "initial values, then judges the noise by what it does, jitted through nnx.split/merge: noise(key) "
            "gives standard normals (mean and variance over a large layer), consumes no key twice (JAX's "
            "key-reuse checker), and gives the same draws for the same key and others for another; on random "
            "parameters, the output with a key is the formula above for YOUR draws noise(key), without a key the "
            "mean weights'.",
            reference=noisy_layer_reference,
            make_inputs=noisy_layer_inputs,
            judge=judge_noisy_layer,
            run_with=built_and_checked,
            # Each trial draws new sizes, so it compiles the small layer's noise and outputs anew; the
            # statistics layer has one size, compiled once per check: 3 to 5 seconds a check on a 2-core CPU.
            trials=4,
            solution=NoisyLinear,
            mistakes=(
                ("the noise is added to the layer's output (summed over the inputs), not to the weights that x "
                 "multiplies", _NoiseOnTheOutput),
                ("no noise on the bias: only the kernel is perturbed", _NoBiasNoise),
                ("factorised noise (an outer product of f(eps_in) and f(eps_out)), not an independent draw for "
                 "every weight", _FactorisedNoise),
                ("noise even without a key (a fallback key): with noise_key=None the layer must use the mean "
                 "weights, kernel and bias", _NoiseWithoutAKey),
                ("one key for both draws: noise_key is not split into a kernel key and a bias key",
                 _OneDrawForKernelAndBias),
            ),
            core=True,
        ),
    ]
