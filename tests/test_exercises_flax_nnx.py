"""Notebook 02 (flax_nnx)'s exercises: each checker passes right answers written independently of
its worked solution, and rejects the classic wrong ones with a message that says what is wrong.

NoisyLinear is a whole nnx.Module, so its wrong answers are small classes: the ones that hold the
wrong things (a sigma that is not an nnx.Param, a PyTorch initial bound, an RNG stream inside the
module...) fail with an exception named after the problem; the ones that hold the right parameters
but compute something else (noise on the output, no bias noise, factorised noise...) fail on what the
judge sees them do, and the checker names the classic mistake. The last test reads the notebook:
it checks these exercises, in this order, each on the learner's unfinished stub.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from labcore.course import exercises
from labcore.course.lessons.nb02_flax_nnx import exercises as nb02_flax_nnx

NAMES = ["torch_to_nnx", "nnx_dqn_train_step", "nnx_scan_fit", "noisy_linear_nnx"]


def failure(name: str, answer, capsys, seed: int = 0) -> str:
    """The checker's printed verdict on a wrong answer (which must fail without raising)."""
    assert exercises.check(name, answer, seed=seed) is False
    out = capsys.readouterr().out
    assert out.startswith(f"FAIL  {name}"), out
    return out


# ----------------------------------------------------------------------------------------------
# torch_to_nnx


def torch_to_nnx_right(state_dict):
    linear = [key[: -len(".weight")] for key in state_dict if key.endswith(".weight")]
    return {f"layer_{i}": {"kernel": np.ascontiguousarray(state_dict[k + ".weight"].detach().numpy().transpose()),
                           "bias": state_dict[k + ".bias"].detach().numpy().copy()}
            for i, k in enumerate(linear)}


def torch_to_nnx_without_bias(state_dict):
    right = torch_to_nnx_right(state_dict)
    return {name: {"kernel": layer["kernel"]} for name, layer in right.items()}


def test_torch_to_nnx_passes_a_right_answer(capsys):
    assert exercises.check("torch_to_nnx", torch_to_nnx_right, seed=0) is True
    assert capsys.readouterr().out.startswith("PASS  torch_to_nnx")


def test_torch_to_nnx_answers_load_into_an_nnx_mlp_that_computes_what_pytorch_does():
    import torch

    (state_dict,) = nb02_flax_nnx._torch_checkpoint_inputs(np.random.default_rng(3))
    sizes = [state_dict["0.weight"].shape[1]] + [w.shape[0] for k, w in state_dict.items() if k.endswith(".weight")]

    class DeepMLP(nnx.Module):
        def __init__(self, sizes, *, rngs):
            self.depth = len(sizes) - 1
            for i in range(self.depth):
                setattr(self, f"layer_{i}", nnx.Linear(sizes[i], sizes[i + 1], rngs=rngs))

        def __call__(self, x):
            for i in range(self.depth):
                x = getattr(self, f"layer_{i}")(x)
                x = jax.nn.relu(x) if i < self.depth - 1 else x
            return x

    model = DeepMLP(sizes, rngs=nnx.Rngs(params=0))
    params = nnx.state(model, nnx.Param)
    nnx.replace_by_pure_dict(params, nb02_flax_nnx.torch_to_nnx(state_dict))
    nnx.update(model, params)
    modules = []
    for n_in, n_out in zip(sizes[:-1], sizes[1:]):
        modules += [torch.nn.Linear(n_in, n_out), torch.nn.ReLU()]
    reference = torch.nn.Sequential(*modules[:-1])
    reference.load_state_dict(state_dict)
    x = np.random.default_rng(4).normal(size=(5, sizes[0])).astype(np.float32)
    with jax.default_matmul_precision("float32"):
        got = np.asarray(model(jnp.asarray(x)))
    np.testing.assert_allclose(got, reference(torch.from_numpy(x)).detach().numpy(), rtol=1e-4, atol=1e-5)


def test_torch_to_nnx_rejects_a_missing_bias(capsys):
    out = failure("torch_to_nnx", torch_to_nnx_without_bias, capsys)
    assert "structure" in out


# ----------------------------------------------------------------------------------------------
# nnx_scan_fit


def nnx_scan_fit_right(model, xs, ys, learning_rate):
    graphdef, state = nnx.split(model, nnx.Param)  # only parameters in this model: the same split

    def body(params, batch):
        x, y = batch

        def mse(p):
            prediction = nnx.merge(graphdef, p)(x)
            return jnp.mean(jnp.square(prediction - y))

        loss, grads = jax.value_and_grad(mse)(params)
        return jax.tree.map(lambda p, g: p - learning_rate * g, params, grads), loss

    final, losses = jax.lax.scan(body, state, (xs, ys))
    return nnx.merge(graphdef, final), losses  # a module back: the checker reads its parameters


def nnx_scan_fit_python_loop(model, xs, ys, learning_rate):
    graphdef, params = nnx.split(model)
    losses = []
    for x, y in zip(xs, ys):
        loss, grads = jax.value_and_grad(lambda p: jnp.mean((nnx.merge(graphdef, p)(x) - y) ** 2))(params)
        params = jax.tree.map(lambda p, g: p - learning_rate * g, params, grads)
        losses.append(loss)
    return params, jnp.stack(losses)


def nnx_scan_fit_optimizer_in_place(model, xs, ys, learning_rate):
    import optax

    optimizer = nnx.Optimizer(model, optax.sgd(learning_rate), wrt=nnx.Param)

    def step(carry, batch):
        model, optimizer = carry
        x, y = batch
        loss, grads = nnx.value_and_grad(lambda m: jnp.mean((m(x) - y) ** 2))(model)
        optimizer.update(model, grads)
        return (model, optimizer), loss

    graphdef, state = nnx.split((model, optimizer))

    def pure_step(state, batch):
        carry = nnx.merge(graphdef, state)
        carry, loss = step(carry, batch)
        return nnx.state(carry), loss

    state, losses = jax.lax.scan(pure_step, state, (xs, ys))
    trained, _ = nnx.merge(graphdef, state)
    return nnx.state(trained, nnx.Param), losses


def test_nnx_scan_fit_passes_right_answers_in_two_styles(capsys):
    assert exercises.check("nnx_scan_fit", nnx_scan_fit_right, seed=0) is True
    assert exercises.check("nnx_scan_fit", nnx_scan_fit_optimizer_in_place, seed=1) is True
    out = capsys.readouterr().out
    assert out.count("PASS  nnx_scan_fit") == 2, out


def test_nnx_scan_fit_refuses_a_python_loop(capsys):
    out = failure("nnx_scan_fit", nnx_scan_fit_python_loop, capsys)
    assert "UnrolledLoop" in out and "lax.scan" in out


# ----------------------------------------------------------------------------------------------
# noisy_linear_nnx: a right answer written independently of the worked solution, and wrong ones.


class NoisyLinearRight(nnx.Module):
    def __init__(self, in_features, out_features, *, rngs):
        limit = (3.0 / in_features) ** 0.5
        draw = lambda shape: jax.random.uniform(rngs.params(), shape, jnp.float32, -limit, limit)  # noqa: E731
        self.kernel = nnx.Param(draw((in_features, out_features)))
        self.bias = nnx.Param(draw((out_features,)))
        self.sigma_kernel = nnx.Param(0.017 * jnp.ones((in_features, out_features)))
        self.sigma_bias = nnx.Param(0.017 * jnp.ones(out_features))

    def noise(self, key):
        keys = jax.random.split(key, 2)
        return jax.random.normal(keys[0], self.kernel.shape), jax.random.normal(keys[1], self.bias.shape)

    def __call__(self, x, noise_key=None):
        w, b = self.kernel[...], self.bias[...]
        if noise_key is not None:
            eps_w, eps_b = self.noise(noise_key)
            w = w + self.sigma_kernel[...] * eps_w
            b = b + self.sigma_bias[...] * eps_b
        return jnp.dot(x, w) + b


def test_noisy_linear_passes_a_right_class_and_a_function_that_builds_it(capsys):
    assert exercises.check("noisy_linear_nnx", NoisyLinearRight, seed=0) is True

    def make_noisy_linear(in_features, out_features, rngs):  # how the notebook hands its class to the checker
        return NoisyLinearRight(in_features, out_features, rngs=rngs)

    assert exercises.check("noisy_linear_nnx", make_noisy_linear, seed=1) is True
    assert capsys.readouterr().out.count("PASS  noisy_linear_nnx") == 2


def test_noisy_linear_accepts_a_different_but_valid_initial_draw(capsys):
    # The checker does not ask for labcore's exact initial numbers: any U(-sqrt(3/in), sqrt(3/in)) draw.
    class OneKeySplitForInit(NoisyLinearRight):
        def __init__(self, in_features, out_features, *, rngs):
            super().__init__(in_features, out_features, rngs=rngs)
            limit = math.sqrt(3.0 / in_features)
            kernel_key, bias_key = jax.random.split(jax.random.fold_in(rngs.params(), 7))
            self.kernel[...] = jax.random.uniform(kernel_key, self.kernel.shape, minval=-limit, maxval=limit)
            self.bias[...] = jax.random.uniform(bias_key, self.bias.shape, minval=-limit, maxval=limit)

    assert exercises.check("noisy_linear_nnx", OneKeySplitForInit, seed=2) is True


def test_an_unfinished_noisy_linear_is_reported_as_not_written(capsys):
    class NoisyLinear(nnx.Module):
        def __init__(self, in_features, out_features, *, rngs):
            raise NotImplementedError

    assert exercises.check("noisy_linear_nnx", NoisyLinear) is False
    out = capsys.readouterr().out
    assert out.startswith("WRITE noisy_linear_nnx: not written yet")


# Wrong answers that hold the wrong things: each fails with an exception that names the problem.


class SigmaAsAPlainArray(NoisyLinearRight):
    def __init__(self, in_features, out_features, *, rngs):
        super().__init__(in_features, out_features, rngs=rngs)
        self.sigma_kernel = jnp.full((in_features, out_features), 0.017)  # not an nnx.Param: never trained


class SigmaAsAVariable(NoisyLinearRight):
    def __init__(self, in_features, out_features, *, rngs):
        super().__init__(in_features, out_features, rngs=rngs)
        self.sigma_bias = nnx.Variable(jnp.full((out_features,), 0.017))


class TorchLinearBound(NoisyLinearRight):
    def __init__(self, in_features, out_features, *, rngs):
        super().__init__(in_features, out_features, rngs=rngs)
        limit = 1.0 / math.sqrt(in_features)  # nn.Linear's default, not NoisyLinear's
        self.kernel[...] = jax.random.uniform(rngs.params(), self.kernel.shape, minval=-limit, maxval=limit)
        self.bias[...] = jax.random.uniform(rngs.params(), self.bias.shape, minval=-limit, maxval=limit)


class UniformWithoutMinval(NoisyLinearRight):
    def __init__(self, in_features, out_features, *, rngs):
        super().__init__(in_features, out_features, rngs=rngs)
        self.kernel[...] = jax.random.uniform(rngs.params(), self.kernel.shape, maxval=math.sqrt(3.0 / in_features))


class ZeroBias(NoisyLinearRight):
    def __init__(self, in_features, out_features, *, rngs):
        super().__init__(in_features, out_features, rngs=rngs)
        self.bias[...] = jnp.zeros(out_features)


class FactorisedSigmaInit(NoisyLinearRight):
    def __init__(self, in_features, out_features, *, rngs):
        super().__init__(in_features, out_features, rngs=rngs)
        self.sigma_kernel[...] = jnp.full(self.sigma_kernel.shape, 0.5 / math.sqrt(in_features))


class KernelInTorchLayout(NoisyLinearRight):
    def __init__(self, in_features, out_features, *, rngs):
        super().__init__(in_features, out_features, rngs=rngs)
        self.kernel = nnx.Param(self.kernel[...].T)


class KeepsAnRngStream(NoisyLinearRight):
    def __init__(self, in_features, out_features, *, rngs):
        super().__init__(in_features, out_features, rngs=rngs)
        self.rngs = rngs

    def __call__(self, x, noise_key=None):
        return super().__call__(x, self.rngs.params() if noise_key is None else noise_key)


class FixedNoiseKey(NoisyLinearRight):
    def __call__(self, x, noise_key=None):
        return super().__call__(x, None if noise_key is None else jax.random.key(42))


class NoNoiseAtAll(NoisyLinearRight):
    def __call__(self, x, noise_key=None):
        return super().__call__(x)


class MissingSigmaBias(nnx.Module):
    def __init__(self, in_features, out_features, *, rngs):
        right = NoisyLinearRight(in_features, out_features, rngs=rngs)
        self.kernel, self.bias, self.sigma_kernel = right.kernel, right.bias, right.sigma_kernel


HOLDS_THE_WRONG_THINGS = [
    (SigmaAsAPlainArray, "NotTrainable", "sigma_kernel is a plain jax.Array, not an nnx.Param"),
    (SigmaAsAVariable, "NotTrainable", "sigma_bias is a Variable, not an nnx.Param"),
    (TorchLinearBound, "WrongInitBound", "at most 1/sqrt(in)"),
    (UniformWithoutMinval, "WrongInitBound", "no negative values"),
    (ZeroBias, "WrongInitBound", "bias starts at 0 everywhere"),
    (FactorisedSigmaInit, "WrongSigmaInit", "factorised"),
    (KernelInTorchLayout, "WrongShape", "PyTorch's layout"),
    (KeepsAnRngStream, "RandomStateInModule", "an RNG stream"),
    (FixedNoiseKey, "NoiseIgnoresKey", "two different noise keys give the same output"),
    (NoNoiseAtAll, "NoiseIgnoresKey", "two different noise keys give the same output"),
    (MissingSigmaBias, "MissingParameter", "no attribute 'sigma_bias'"),
]


@pytest.mark.parametrize(("wrong", "problem", "words"), HOLDS_THE_WRONG_THINGS, ids=lambda v: getattr(v, "__name__", ""))
def test_noisy_linear_names_what_the_layer_holds_wrong(wrong, problem, words, capsys):
    out = failure("noisy_linear_nnx", wrong, capsys)
    assert f"it raised {problem}: " in out and words in out, out


# Wrong answers that hold the right parameters and compute something else: the checker names each.


class NoiseOnTheOutput(NoisyLinearRight):
    def __call__(self, x, noise_key=None):
        y = x @ self.kernel[...] + self.bias[...]
        if noise_key is None:
            return y
        eps_w, eps_b = self.noise(noise_key)
        return y + (self.sigma_kernel[...] * eps_w).sum(0) + self.sigma_bias[...] * eps_b


class NoBiasNoise(NoisyLinearRight):
    def __call__(self, x, noise_key=None):
        if noise_key is None:
            return x @ self.kernel[...] + self.bias[...]
        eps_w, _ = self.noise(noise_key)
        return x @ (self.kernel[...] + self.sigma_kernel[...] * eps_w) + self.bias[...]


class FactorisedNoise(NoisyLinearRight):
    def noise(self, key):
        f = lambda e: jnp.sign(e) * jnp.sqrt(jnp.abs(e))  # noqa: E731
        k_in, k_out = jax.random.split(key)
        eps_in, eps_out = f(jax.random.normal(k_in, (self.kernel.shape[0],))), f(jax.random.normal(k_out, self.bias.shape))
        return eps_in[:, None] * eps_out[None, :], eps_out


class NoiseWithoutAKey(NoisyLinearRight):
    def __call__(self, x, noise_key=None):
        return super().__call__(x, jax.random.key(0) if noise_key is None else noise_key)


class OneDrawForKernelAndBias(NoisyLinearRight):
    def noise(self, key):
        return jax.random.normal(key, self.kernel.shape), jax.random.normal(key, self.bias.shape)


# What the judge says it saw (the behaviour, not an output's element: the noise convention is free),
# and the classic mistake it names.
COMPUTES_THE_WRONG_THING = [
    (NoiseOnTheOutput, "the noise is added to the layer's output", "added to the layer's output"),
    (NoBiasNoise, "the bias is not perturbed", "no noise on the bias"),
    (FactorisedNoise, "eps_kernel has rank 1", "factorised noise"),
    (NoiseWithoutAKey, "without a key, the output is not x @ kernel + bias", "noise even without a key"),
    (OneDrawForKernelAndBias, "JAX's key-reuse checker", "not split into a kernel key and a bias key"),
]


@pytest.mark.parametrize(("wrong", "seen", "label"), COMPUTES_THE_WRONG_THING, ids=lambda v: getattr(v, "__name__", ""))
def test_noisy_linear_names_the_classic_mistake_a_layer_makes(wrong, seen, label, capsys):
    out = failure("noisy_linear_nnx", wrong, capsys)
    assert seen in out, out
    assert "this is a classic mistake: " in out and label in out, out


def test_the_exercises_are_registered_in_the_notebooks_order():
    assert [exercise.name for exercise in nb02_flax_nnx.catalogue()] == NAMES
    assert all(name in exercises.names() for name in NAMES)
    assert exercises.get("noisy_linear_nnx").core


def test_the_notebook_checks_them_on_the_learners_stubs():
    import nbformat
    from conftest import NOTEBOOKS_DIR
    from test_notebooks import exercise_problems

    problems = exercise_problems(nbformat.read(NOTEBOOKS_DIR / "02_flax_nnx.ipynb", as_version=4))
    assert problems["checked"] == NAMES
    assert problems["errors"] == []
