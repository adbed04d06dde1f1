"""What notebook 10's core exercise, ``noisy_linear_nnx``, asks of a learner's NNX NoisyLinear.

The checker builds the learner's layer (through the class itself, or a function
``(in_features, out_features, rngs) -> layer``), checks what the module holds (four ``nnx.Param``s of
the right shapes, the initial sigmas and the initial bounds, no random state kept inside), then gives
it the same parameters as ``labcore.nets.noisy.NoisyLinear`` and compares the two layers' outputs and
noise draws, computed through ``nnx.split`` / ``nnx.merge`` inside ``jax.jit``. A layer that holds
the wrong things fails with an exception that says what is wrong.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

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


def build_and_run(make_layer: Callable[..., Any]) -> Callable[..., Any]:
    """Build the learner's layer with ``make_layer(in_features, out_features, rngs=...)`` (the class, or a
    function that builds it), check what it holds, give it the input's parameters and run it."""

    def run(n_in, n_out, seed, x, key_a, key_b, params):
        layer = make_layer(n_in, n_out, rngs=nnx.Rngs(params=seed))
        check_holdings(layer, n_in, n_out)
        got = outputs(with_params(layer, params), x, key_a, key_b)
        if np.allclose(got["noisy_output"], got["noisy_output_key_b"], rtol=1e-6, atol=1e-6):
            raise NoiseIgnoresKey("two different noise keys give the same output: the draws must come from "
                                  "noise_key (split into a kernel key and a bias key), not from a fixed key or none")
        return got

    return run
