"""What notebook 02's core exercise, ``noisy_linear_nnx``, asks of a learner's NNX NoisyLinear.

The checker builds the learner's layer (through the class itself, or a function
``(in_features, out_features, rngs) -> layer``) and checks what the module holds (four ``nnx.Param``s of
the right shapes, the initial sigmas and the initial bounds, no random state kept inside); a layer that
holds the wrong things fails with an exception that says what is wrong. The noise is then judged by
behaviour, since how ``noise(key)`` gets a key for each draw is free (split either way round, fold in 0
and 1): standard normal draws of the right shapes, no key consumed twice, the same draws for the same key
and others for another, and, on random parameters, the output x @ (kernel + sigma_kernel * eps_kernel) +
(bias + sigma_bias * eps_bias) for the layer's own draws (the mean weights without a key). Everything runs
through ``nnx.split`` / ``nnx.merge`` inside ``jax.jit``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from labcore.course.exercises import behaviour
from labcore.course.exercises.checking import first_mismatch

PARAMETERS = ("kernel", "bias", "sigma_kernel", "sigma_bias")
SIGMA_INIT = 0.017


def noisy_layer_inputs(rng: np.random.Generator) -> tuple:
    # out_features >= 24 and in_features * out_features >= 48: a draw from U(-sqrt(3/in), sqrt(3/in))
    # then exceeds 1/sqrt(in) somewhere, in the bias too, except with probability below 1e-5, so the
    # init-bound test tells the two bounds apart without failing right answers.
    n_in, n_out, batch = int(rng.integers(2, 13)), int(rng.integers(24, 41)), int(rng.integers(1, 9))
    bound = math.sqrt(3.0 / n_in)
    params = {
        "kernel": rng.uniform(-bound, bound, size=(n_in, n_out)).astype(np.float32),
        "bias": rng.uniform(-bound, bound, size=(n_out,)).astype(np.float32),
        # sigmas far from their 0.017 start, so that a wrong noise term shows at float32 precision
        "sigma_kernel": rng.uniform(0.05, 0.5, size=(n_in, n_out)).astype(np.float32),
        "sigma_bias": rng.uniform(0.05, 0.5, size=(n_out,)).astype(np.float32),
    }
    key_a, key_b = (jax.random.key(int(k)) for k in rng.integers(1 << 30, size=2))
    seed = int(rng.integers(1 << 30))
    return n_in, n_out, seed, rng.normal(size=(batch, n_in)).astype(np.float32), key_a, key_b, params


def outputs(layer: nnx.Module, x, key_a, key_b) -> dict[str, jax.Array]:
    """What the checker compares: the layer's draws for key_a, and its output without a key and with each key.
    Run as a pure function of the layer's state, merged inside jax.jit (graphdef static)."""
    graphdef, state = nnx.split(layer)

    @jax.jit
    def run(state, x, key_a, key_b):
        module = nnx.merge(graphdef, state)
        eps_kernel, eps_bias = module.noise(key_a)
        return {
            "eps_kernel": eps_kernel,
            "eps_bias": eps_bias,
            "mean_output": module(x),
            "noisy_output": module(x, key_a),
            "noisy_output_key_b": module(x, key_b),
        }

    return run(state, x, key_a, key_b)


def with_params(layer: nnx.Module, params: dict[str, np.ndarray]) -> nnx.Module:
    state = nnx.state(layer, nnx.Param)
    nnx.replace_by_pure_dict(state, {name: jnp.asarray(value) for name, value in params.items()})
    nnx.update(layer, state)
    return layer


def noisy_layer_reference(n_in, n_out, seed, x, key_a, key_b, params):
    from labcore.nets.functional import Functional
    from labcore.nets.noisy import NoisyLinear

    # labcore's layer holding ``params``: bound to them without drawing an initial value first
    layer = Functional(lambda rngs: NoisyLinear(n_in, n_out, rngs=rngs)).bind(params)
    return outputs(layer, x, key_a, key_b)


# What a layer that holds the wrong things raises: the exception's name and message are what check prints.
class NotAnNNXModule(TypeError):
    """The built object is not an nnx.Module."""


class MissingParameter(AttributeError):
    """One of kernel, bias, sigma_kernel, sigma_bias is not there, or there are others."""


class NotTrainable(TypeError):
    """A parameter is held as something other than nnx.Param, so nnx.grad and nnx.Optimizer skip it."""


class RandomStateInModule(ValueError):
    """The layer keeps an RNG stream (or other state) besides its parameters."""


class WrongShape(ValueError):
    """A parameter's shape is not the layer's."""


class WrongSigmaInit(ValueError):
    """The sigmas do not start at 0.017 everywhere."""


class WrongInitBound(ValueError):
    """kernel or bias is not drawn from U(-sqrt(3 / in), sqrt(3 / in))."""


class NoiseIgnoresKey(ValueError):
    """Two different noise keys give the same output."""


def check_holdings(layer: Any, n_in: int, n_out: int) -> None:
    """Raise, with what is wrong and why it matters, unless ``layer`` holds exactly the four parameters as
    nnx.Param, of the right shapes and initial values, and nothing else."""
    if not isinstance(layer, nnx.Module):
        raise NotAnNNXModule(f"building the layer returned a {type(layer).__name__}, not an nnx.Module")
    wanted = "kernel [in, out], bias [out], sigma_kernel [in, out] and sigma_bias [out], each an nnx.Param"
    for name in PARAMETERS:
        value = getattr(layer, name, None)
        if value is None:
            raise MissingParameter(f"the layer has no attribute {name!r}; it needs {wanted}")
        if not isinstance(value, nnx.Param):
            held = "a plain jax.Array" if isinstance(value, jax.Array) else f"a {type(value).__qualname__}"
            raise NotTrainable(
                f"{name} is {held}, not an nnx.Param: nnx.grad and "
                f"nnx.Optimizer(..., wrt=nnx.Param) leave it out, so it would never be trained. "
                f"Wrap it: self.{name} = nnx.Param(...)")
    params = nnx.to_pure_dict(nnx.state(layer, nnx.Param))
    if set(params) != set(PARAMETERS):
        raise MissingParameter(f"the layer's parameters are {sorted(params)}; it needs exactly {wanted}")
    others = jax.tree_util.tree_flatten_with_path(nnx.to_pure_dict(nnx.state(layer, nnx.Not(nnx.Param))))[0]
    if others:
        where = ", ".join(jax.tree_util.keystr(path) for path, _ in others)
        kind = "an RNG stream (nnx.Rngs)" if nnx.state(layer, nnx.RngState) else "state that is not an nnx.Param"
        raise RandomStateInModule(
            f"the layer keeps {kind} ({where}): its noise must come from the noise_key argument only, so that a "
            "call without a key uses the mean weights and the same key always gives the same draws")
    shapes = {"kernel": (n_in, n_out), "bias": (n_out,), "sigma_kernel": (n_in, n_out), "sigma_bias": (n_out,)}
    for name, shape in shapes.items():
        have = tuple(np.shape(params[name]))
        if have != shape:
            torch_layout = (" ([out, in] is PyTorch's layout; Flax's is [in, out], y = x @ kernel)"
                            if have == shape[::-1] else "")
            raise WrongShape(f"{name} has shape {have}, but a NoisyLinear({n_in}, {n_out}) needs {shape}{torch_layout}")
    for name in ("sigma_kernel", "sigma_bias"):
        value = np.asarray(params[name])
        if not np.allclose(value, SIGMA_INIT, rtol=0.0, atol=1e-7):
            factorised = (" (0.5 / sqrt(in) is the factorised variant's start)"
                          if np.allclose(value, 0.5 / math.sqrt(n_in), rtol=1e-6) else "")
            raise WrongSigmaInit(f"{name} starts between {value.min():.4g} and {value.max():.4g}; independent noise "
                                 f"starts both sigmas at {SIGMA_INIT} everywhere{factorised}")
    bound = math.sqrt(3.0 / n_in)
    for name in ("kernel", "bias"):
        value = np.asarray(params[name])
        largest = float(np.max(np.abs(value)))
        if np.all(value == value.flat[0]):
            raise WrongInitBound(f"{name} starts at {value.flat[0]:.4g} everywhere; draw it from "
                                 f"U(-sqrt(3/in), sqrt(3/in)) = U(-{bound:.4g}, {bound:.4g}) with rngs.params()")
        if largest > bound * (1 + 1e-6):
            raise WrongInitBound(f"{name} starts with values up to {largest:.4g} in size, beyond sqrt(3/in) = {bound:.4g}; "
                                 "draw it from U(-sqrt(3/in), sqrt(3/in))")
        if float(np.min(value)) >= 0.0:
            raise WrongInitBound(f"{name} starts with no negative values: jax.random.uniform draws from [0, maxval) "
                                 f"unless minval is given; draw from U(-{bound:.4g}, {bound:.4g})")
        if largest <= (1 + 1e-6) / math.sqrt(n_in):
            raise WrongInitBound(
                f"every |{name}| is at most 1/sqrt(in) = {1 / math.sqrt(n_in):.4g}: that is U(-1/sqrt(in), 1/sqrt(in)), "
                f"the bound of PyTorch's nn.Linear and of factorised noise; independent NoisyLinear draws "
                f"U(-sqrt(3/in), sqrt(3/in)) = U(-{bound:.4g}, {bound:.4g})")


def built_and_checked(make_layer: Callable[..., Any]) -> Callable[[int, int, int], nnx.Module]:
    """The learner's layer as the judge gets it: ``build(in_features, out_features, seed)`` calls
    ``make_layer(in_features, out_features, rngs=nnx.Rngs(params=seed))`` (the class, or a function that
    builds it) and checks what the layer holds, raising what is wrong."""

    def build(n_in: int, n_out: int, seed: int) -> nnx.Module:
        layer = make_layer(n_in, n_out, rngs=nnx.Rngs(params=seed))
        check_holdings(layer, n_in, n_out)
        return layer

    return build


# ----------------------------------------------------------------------------------------------
# The judge: how noise(key) draws from its key is the learner's choice (split in either order, fold_in
# 0 and 1, ...); what every right layer does is checked instead.

# The noise statistics are taken on a [32, 256] layer and 4 keys: 32,768 kernel draws and 1,024 bias
# draws, whose mean and variance a standard normal keeps within 6 standard deviations (below 2e-9 of
# failing); factorised noise's kernel variance, (E|e|)^2 = 2 / pi, is 46 of them below 1 (its rank of 1
# is found first), uniform draws of variance 1 have no tail beyond 2, where a normal has 4.6%.
_STATISTICS_SHAPE = (32, 256)
_STATISTICS_KEYS = 4
_BEYOND_TWO = math.erfc(2.0 / math.sqrt(2.0))  # P(|e| > 2) for a standard normal, 0.0455


def _noise(graphdef, state, key):
    return nnx.merge(graphdef, state).noise(key)


# Module-level and with the graph definition static, so that a layer of a shape already seen (the
# statistics layer, every trial) reuses its compiled program.
_noise_jitted = jax.jit(_noise, static_argnums=0)


@functools.partial(jax.jit, static_argnums=0)
def _behaviour(graphdef, state, x, key_a, key_b) -> dict[str, Any]:
    """Everything the judge reads off the small layer, in one compiled program."""
    module = nnx.merge(graphdef, state)
    return {"draws_a": module.noise(key_a), "draws_b": module.noise(key_b), "noisy_a": module(x, key_a),
            "noisy_b": module(x, key_b), "mean": module(x)}


def _key_reuse_problem(graphdef, state, key) -> str | None:
    """JAX's key-reuse checker on noise(key), read off its trace alone (nothing compiled). One sentence
    whatever the checker's own words, which name the primitive where the reuse happened: so that the
    classic mistake is named however the learner wrote it (one key drawn twice, or a split key or a
    folded one drawn twice)."""
    reused, _ = behaviour.key_reuse_problem(
        lambda key: jax.make_jaxpr(functools.partial(_noise, graphdef))(state, key), key)
    if reused is None:
        return None
    return ("noise(key) consumes a key twice (JAX's key-reuse checker), so two draws that should be independent "
            "share their numbers: the kernel's and the bias's noise each need a key of their own (split the key, "
            "or fold in 0 and 1)")


def _normal_problem(draws: np.ndarray, what: str) -> str | None:
    """None if ``draws`` look like standard normals: their mean and variance within SIGMAS standard errors
    of 0 and 1, and the fraction beyond 2 in size near a normal's (which uniform draws of variance 1 lack)."""
    n = draws.size
    mean, variance = float(draws.mean()), float(draws.var())
    mean_spread, variance_spread = behaviour.SIGMAS / math.sqrt(n), behaviour.SIGMAS * math.sqrt(2.0 / n)
    if abs(mean) > mean_spread:
        return f"{what} have mean {mean:.3f} over {n} draws, where standard normals give 0 (+- {mean_spread:.3f})"
    if abs(variance - 1.0) > variance_spread:
        return (f"{what} have variance {variance:.3f} over {n} draws, where standard normals give 1 "
                f"(+- {variance_spread:.3f})")
    problem = behaviour.frequency_problem(int(np.sum(np.abs(draws) > 2.0)), n, _BEYOND_TWO,
                                          f"the fraction of {what} beyond 2 in size")
    return problem + ": they are not normal" if problem else None


def _draws_problem(draws: Any, n_in: int, n_out: int) -> str | None:
    if not isinstance(draws, tuple | list) or len(draws) != 2:
        return "noise(key) does not return the pair (eps_kernel, eps_bias)"
    return (behaviour.shape_problem(draws[0], (n_in, n_out), "f", "noise(key)'s eps_kernel")
            or behaviour.shape_problem(draws[1], (n_out,), "f", "noise(key)'s eps_bias"))


def _statistics_problem(build: Callable[[int, int, int], nnx.Module], seed: int, keys: list) -> str | None:
    """What is wrong with the draws of a large layer, if anything: draws shared, or not N(0, 1)."""
    graphdef, state = nnx.split(build(*_STATISTICS_SHAPE, seed))
    kernels, biases = [], []
    for key in keys:
        eps_kernel, eps_bias = (np.asarray(draw, np.float64) for draw in _noise_jitted(graphdef, state, key))
        singular = np.linalg.svd(eps_kernel, compute_uv=False)
        if singular[1] <= 1e-4 * singular[0]:
            return ("eps_kernel has rank 1, an outer product: factorised noise, or one draw shared by a whole row "
                    "or column, where independent noise draws every weight on its own")
        if np.mean(np.isin(eps_bias, eps_kernel)) > 0.5:
            return ("eps_bias repeats numbers of eps_kernel: both are drawn from one key, where each needs a key of "
                    "its own (split the key, or fold in 0 and 1)")
        kernels.append(eps_kernel)
        biases.append(eps_bias)
    return (_normal_problem(np.stack(kernels), "the kernel's noise draws")
            or _normal_problem(np.stack(biases), "the bias's noise draws"))


def _output_problem(got: np.ndarray, x: np.ndarray, draws: tuple, params: dict[str, np.ndarray]) -> str | None:
    """What is wrong with the layer's output ``got`` for a key, given its own draws noise(key), if anything."""
    eps_kernel, eps_bias = (np.asarray(draw, np.float64) for draw in draws)
    kernel, bias, sigma_kernel, sigma_bias = (np.asarray(params[name], np.float64) for name in PARAMETERS)
    x, got = np.asarray(x, np.float64), np.asarray(got, np.float64)

    # 1e-5: each output sums at most 12 float32 products of order 1 (x and eps ~ N(0, 1), means below 1.3,
    # sigmas below 0.5), a few 1e-7 from the float64 formula; every fault diagnosed below leaves out, adds
    # or moves sigma * eps terms with sigma >= 0.05, far outside 1e-5 + 1e-5 |y|.
    def matches(expected):
        return got.shape == expected.shape and np.allclose(got, expected, rtol=1e-5, atol=1e-5)

    expected = x @ (kernel + sigma_kernel * eps_kernel) + (bias + sigma_bias * eps_bias)
    if matches(expected):
        return None
    # Diagnoses without numbers: the same sentence for the same fault, whatever the draws.
    if matches(x @ kernel + bias + np.sum(sigma_kernel * eps_kernel, axis=0) + sigma_bias * eps_bias):
        return ("with a key, the noise is added to the layer's output (sigma_kernel * eps_kernel summed over the "
                "inputs), where it perturbs the weights that x multiplies")
    if matches(x @ (kernel + sigma_kernel * eps_kernel) + bias):
        return "with a key, the bias is not perturbed: the output lacks sigma_bias * eps_bias"
    if matches(x @ kernel + bias):
        return "with a key, the output is the mean weights' x @ kernel + bias: the noise is not used"
    return ("with a key, the output is not x @ (kernel + sigma_kernel * eps_kernel) + (bias + sigma_bias * eps_bias) "
            f"computed from noise(key)'s own draws: {first_mismatch(got, expected, rtol=1e-5, atol=1e-5)}")


def judge_noisy_layer(build: Callable[[int, int, int], nnx.Module], rng: np.random.Generator) -> str | None:
    """Any NoisyLinear passes, however noise(key) gets a key for each draw: standard normal draws of the
    right shapes, no key consumed twice, a function of the key, and outputs computed from them (a layer
    that holds the wrong things raises, in ``build``)."""
    n_in, n_out, seed, x, key_a, key_b, params = noisy_layer_inputs(rng)
    statistics_keys = [jax.random.key(int(k)) for k in rng.integers(1 << 30, size=_STATISTICS_KEYS)]
    graphdef, state = nnx.split(with_params(build(n_in, n_out, seed), params))
    # 1. noise(key): each key consumed once (JAX's key-reuse checker), draws of the right shapes.
    problem = _key_reuse_problem(graphdef, state, behaviour.copy_key(key_a))
    if problem:
        return problem
    seen = _behaviour(graphdef, state, x, behaviour.copy_key(key_a), behaviour.copy_key(key_b))
    problem = _draws_problem(seen["draws_a"], n_in, n_out)
    if problem:
        return problem
    # 2. A function of the key: the same key again gives the same draws, another key others.
    again = _behaviour(graphdef, state, x, behaviour.copy_key(key_a), behaviour.copy_key(key_b))
    if not all(np.array_equal(a, b) for a, b in zip(again["draws_a"], seen["draws_a"], strict=True)):
        return "the same key gave two different noise draws: they must come from `key` alone"
    if any(np.array_equal(a, b) for a, b in zip(seen["draws_b"], seen["draws_a"], strict=True)):
        return "two different keys gave the same noise draws: noise(key) does not draw from `key`"
    # 3. The outputs: the mean weights without a key; with a key, the weights perturbed by noise(key)'s draws.
    if np.allclose(seen["noisy_a"], seen["noisy_b"], rtol=1e-6, atol=1e-6):
        raise NoiseIgnoresKey("two different noise keys give the same output: the layer's noise must come from "
                              "noise_key, not from a fixed key or none")
    mean = x.astype(np.float64) @ params["kernel"].astype(np.float64) + params["bias"].astype(np.float64)
    if not np.allclose(seen["mean"], mean, rtol=1e-5, atol=1e-5):
        return "without a key, the output is not x @ kernel + bias: with noise_key=None the layer uses the mean weights"
    problem = (_output_problem(seen["noisy_a"], x, seen["draws_a"], params)
               or _output_problem(seen["noisy_b"], x, seen["draws_b"], params))
    if problem:
        return problem
    # 4. The draws' statistics, on a large layer.
    return _statistics_problem(build, seed, statistics_keys)
