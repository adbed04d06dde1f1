"""NoisyLinear in Flax Linen: independent Gaussian noise on every weight, as sorrel's iRainbow.

Noisy Networks (Fortunato et al., 2018) come in two flavours. This is the *independent* one that
the PyTorch original uses, NOT the factorised one (``f(x) = sign(x) sqrt|x|`` outer products) of
other libraries, and the noise perturbs the WEIGHTS, not the layer's output:

    training (deterministic=False):  y = x @ (kernel + sigma_kernel * eps_k) + (bias + sigma_bias * eps_b)
                                      eps_k [in, out], eps_b [out] ~ N(0, 1), fresh on every call
    evaluation (deterministic=True): y = x @ kernel + bias                  (the mean weights only)

Initialisation (the original's): kernel and bias ~ U(-sqrt(3 / in), sqrt(3 / in)); sigma_kernel
and sigma_bias = 0.017 everywhere (trainable).

Flax conventions used here (one pattern for the whole module: ``@nn.compact``):

* the layer is called through ``apply``; the noise comes from the ``'noise'`` RNG stream, so a
  training-mode call needs ``rngs={'noise': key}``:

      layer = NoisyLinear(in_features=4, out_features=3)
      params = layer.init(jax.random.key(0), x, deterministic=True)["params"]
      y = layer.apply({"params": params}, x, deterministic=False, rngs={"noise": key})

* the draws are recorded with ``sow`` in the ``'noise_draws'`` collection ('eps_kernel',
  'eps_bias', each a 1-tuple), returned when the caller asks for it with
  ``mutable=['noise_draws']``; the parity tests hand them to the PyTorch layer's ``set_noise``
  (transposed: PyTorch stores weights as [out, in]).

* ``in_features`` is explicit (the PyTorch layer takes it too) and checked against the input's
  last axis, so a wrong input width is a clear ValueError rather than a silently different layer.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

SIGMA_INIT = 0.017  # the original's sigma for independent noise (Fortunato et al.'s value)


def uniform_init(bound: float) -> Callable[..., jax.Array]:
    """A Flax initializer drawing U(-bound, bound) (any shape, float32 by default)."""

    def init(key: jax.Array, shape: tuple[int, ...], dtype: jnp.dtype = jnp.float32) -> jax.Array:
        return jax.random.uniform(key, shape, dtype, minval=-bound, maxval=bound)

    return init


class NoisyLinear(nn.Module):
    """x [..., in_features] -> [..., out_features], independent Gaussian weight noise.

    Parameters: 'kernel' [in, out], 'bias' [out], 'sigma_kernel' [in, out], 'sigma_bias' [out]
    (the PyTorch layer's weight, bias, sigma_weight, sigma_bias, with the matrices transposed).
    """

    in_features: int
    out_features: int
    sigma_init: float = SIGMA_INIT

    @nn.compact
    def __call__(self, x: jax.Array, deterministic: bool) -> jax.Array:
        # Standalone (not inside another module) a layer has no name: say just "NoisyLinear".
        label = "NoisyLinear" if self.name is None else f"NoisyLinear {self.name!r}"
        if x.shape[-1] != self.in_features:
            raise ValueError(
                f"{label} expects inputs with last axis in_features={self.in_features}, "
                f"got shape {tuple(x.shape)}"
            )
        bound = math.sqrt(3.0 / self.in_features)
        shape = (self.in_features, self.out_features)
        kernel = self.param("kernel", uniform_init(bound), shape)
        bias = self.param("bias", uniform_init(bound), (self.out_features,))
        sigma_kernel = self.param("sigma_kernel", nn.initializers.constant(self.sigma_init), shape)
        sigma_bias = self.param("sigma_bias", nn.initializers.constant(self.sigma_init), (self.out_features,))
        if deterministic:
            return x @ kernel + bias
        if not self.has_rng("noise"):
            raise ValueError(
                f"{label} was called with deterministic=False but no 'noise' RNG: "
                "pass rngs={'noise': key} to apply (or deterministic=True for the mean weights)"
            )
        kernel_key, bias_key = jax.random.split(self.make_rng("noise"))
        eps_kernel = jax.random.normal(kernel_key, shape, kernel.dtype)
        eps_bias = jax.random.normal(bias_key, (self.out_features,), bias.dtype)
        # Recorded (not used by the layer itself) so a caller can replay the same draws elsewhere.
        self.sow("noise_draws", "eps_kernel", eps_kernel)
        self.sow("noise_draws", "eps_bias", eps_bias)
        return x @ (kernel + sigma_kernel * eps_kernel) + (bias + sigma_bias * eps_bias)
