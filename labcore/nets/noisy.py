"""NoisyLinear in Flax NNX: independent Gaussian noise on every weight, as sorrel's iRainbow.

Noisy Networks (Fortunato et al., 2018) come in two flavours. This is the *independent* one that
the PyTorch original uses, NOT the factorised one (``f(x) = sign(x) sqrt|x|`` outer products) of
other libraries, and the noise perturbs the WEIGHTS, not the layer's output:

    with a noise key:    y = x @ (kernel + sigma_kernel * eps_k) + (bias + sigma_bias * eps_b)
                         eps_k [in, out], eps_b [out] ~ N(0, 1), drawn from the key
    noise_key=None:      y = x @ kernel + bias                  (the mean weights: evaluation)

Initialisation (the original's): kernel and bias ~ U(-sqrt(3 / in), sqrt(3 / in)); sigma_kernel
and sigma_bias = 0.017 everywhere (trainable).

    layer = NoisyLinear(4, 3, rngs=nnx.Rngs(params=0))   # built eagerly, as torch.nn.Module is
    y = layer(x, noise_key)                                # x [..., 4] -> [..., 3]
    eps_kernel, eps_bias = layer.noise(noise_key)          # the draws that call used

The noise is an explicit key, not an RNG stream kept inside the module: the same key gives the same
draws, a call without a key is the mean network, and ``noise(key)`` returns the draws so the
parity tests can hand them to the PyTorch layer's ``set_noise`` (transposed: PyTorch stores
weights as [out, in]). ``in_features`` is checked against the input's last axis, so a wrong input
width is a clear ValueError rather than a silently different layer.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
from flax import nnx

SIGMA_INIT = 0.017  # the original's sigma for independent noise (Fortunato et al.'s value)


def uniform_init(bound: float) -> Callable[..., jax.Array]:
    """An initializer drawing U(-bound, bound): (key, shape, dtype=float32) -> array."""

    def init(key: jax.Array, shape: tuple[int, ...], dtype: jnp.dtype = jnp.float32) -> jax.Array:
        return jax.random.uniform(key, shape, dtype, minval=-bound, maxval=bound)

    return init


class NoisyLinear(nnx.Module):
    """x [..., in_features] -> [..., out_features], independent Gaussian weight noise.

    Parameters: 'kernel' [in, out], 'bias' [out], 'sigma_kernel' [in, out], 'sigma_bias' [out]
    (the PyTorch layer's weight, bias, sigma_weight, sigma_bias, with the matrices transposed).
    """

    def __init__(self, in_features: int, out_features: int, *, rngs: nnx.Rngs, sigma_init: float = SIGMA_INIT):
        self.in_features, self.out_features = in_features, out_features
        bound = math.sqrt(3.0 / in_features)
        shape = (in_features, out_features)
        self.kernel = nnx.Param(uniform_init(bound)(rngs.params(), shape))
        self.bias = nnx.Param(uniform_init(bound)(rngs.params(), (out_features,)))
        self.sigma_kernel = nnx.Param(jnp.full(shape, sigma_init, jnp.float32))
        self.sigma_bias = nnx.Param(jnp.full((out_features,), sigma_init, jnp.float32))

    def noise(self, key: jax.Array) -> tuple[jax.Array, jax.Array]:
        """The draws a call with ``key`` uses: eps_kernel [in, out], eps_bias [out] ~ N(0, 1)."""
        kernel_key, bias_key = jax.random.split(key)
        return (jax.random.normal(kernel_key, (self.in_features, self.out_features), jnp.float32),
                jax.random.normal(bias_key, (self.out_features,), jnp.float32))

    def __call__(self, x: jax.Array, noise_key: jax.Array | None = None) -> jax.Array:
        if x.shape[-1] != self.in_features:
            raise ValueError(
                f"NoisyLinear expects inputs with last axis in_features={self.in_features}, "
                f"got shape {tuple(x.shape)}"
            )
        kernel, bias = self.kernel[...], self.bias[...]
        if noise_key is None:
            return x @ kernel + bias
        eps_kernel, eps_bias = self.noise(noise_key)
        return x @ (kernel + self.sigma_kernel[...] * eps_kernel) + (bias + self.sigma_bias[...] * eps_bias)
