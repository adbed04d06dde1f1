"""The IQN network of sorrel's iRainbow in Flax NNX (implicit quantile network, Dabney et al. 2018).

    x [B, in_features] --head1 (Linear), ReLU------------------------------------> h [B, L]
    taus [B, n_tau, 1] --cos(tau * pi * [1..n_cos]), cos_embedding (Linear), ReLU-> c [B, n_tau, L]
    z = h[:, None, :] * c, as [B * n_tau, L] --ff_1 (NoisyLinear), ReLU--> z
    quantiles = value(z) + advantage(z) - mean_a advantage(z)       (dueling; both NoisyLinear)
              -> [B, n_tau, n_actions]

in_features = n_frames * obs_size (the agent feeds a flattened stack of frames). head1 and
cos_embedding start from PyTorch's default ``nn.Linear`` distribution, U(+-1/sqrt(in)) for kernel
and bias, so a fresh port and a fresh original are draws from the same distribution; the noisy
layers use ``labcore.nets.noisy.NoisyLinear``'s own initialisation.

The parameter names ('head1', 'cos_embedding', 'ff_1', 'advantage', 'value', each holding
'kernel' [in, out] and 'bias' [out], the noisy ones also 'sigma_kernel' and 'sigma_bias') are
fixed: ``labcore.torch_ref.irainbow_network``'s bridge copies PyTorch weights into exactly these
leaves, and they are the leaves of the plain dict the agent keeps (``make_iqn(...).init(key)``).

The noise is an explicit key: ``noise_key=None`` uses the mean weights (acting, the original's eval
mode); a key draws fresh independent noise for the three noisy layers (the original's train mode),
and ``noise_draws(key)`` returns exactly those draws.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from labcore.nets.functional import Functional
from labcore.nets.noisy import NoisyLinear, uniform_init

NOISY_LAYERS = ("ff_1", "advantage", "value")


def torch_linear(in_features: int, out_features: int, rngs: nnx.Rngs) -> nnx.Linear:
    """nnx.Linear initialised as torch.nn.Linear(in_features, out_features): kernel and bias U(+-1/sqrt(in))."""
    bound = 1.0 / math.sqrt(in_features)
    return nnx.Linear(in_features, out_features, kernel_init=uniform_init(bound), bias_init=uniform_init(bound),
                      rngs=rngs)


class IQN(nnx.Module):
    """Implicit quantile network: (x [B, in_features], taus [B, n_tau, 1]) -> quantiles [B, n_tau, n_actions]."""

    def __init__(self, in_features: int, n_actions: int, layer_size: int = 250, n_cos: int = 64, *,
                 rngs: nnx.Rngs):
        self.in_features, self.n_actions, self.layer_size, self.n_cos = in_features, n_actions, layer_size, n_cos
        self.head1 = torch_linear(in_features, layer_size, rngs)
        self.cos_embedding = torch_linear(n_cos, layer_size, rngs)
        self.ff_1 = NoisyLinear(layer_size, layer_size, rngs=rngs)
        self.advantage = NoisyLinear(layer_size, n_actions, rngs=rngs)
        self.value = NoisyLinear(layer_size, 1, rngs=rngs)

    def __call__(self, x: jax.Array, taus: jax.Array, noise_key: jax.Array | None = None) -> jax.Array:
        if x.ndim != 2 or x.shape[1] != self.in_features:
            raise ValueError(f"IQN expects x of shape [B, in_features={self.in_features}], got {tuple(x.shape)}")
        batch = x.shape[0]
        if taus.ndim != 3 or taus.shape[0] != batch or taus.shape[2] != 1:
            raise ValueError(f"IQN expects taus of shape [B={batch}, n_tau, 1], got {tuple(taus.shape)}")
        n_tau, size = taus.shape[1], self.layer_size
        head = jax.nn.relu(self.head1(x))  # [B, L]
        # pi * [1 .. n_cos]: the original starts the cosine frequencies at 1, not 0, and forms the
        # products in float64 before rounding once to float32 (a float32 product can be 1 ulp off).
        frequencies = jnp.asarray(np.pi * np.arange(1, self.n_cos + 1, dtype=np.float64), jnp.float32)
        cosines = jnp.cos(taus * frequencies)  # [B, n_tau, n_cos]
        embedding = jax.nn.relu(self.cos_embedding(cosines))  # [B, n_tau, L]
        z = (head[:, None, :] * embedding).reshape(batch * n_tau, size)
        ff_key, advantage_key, value_key = layer_keys(noise_key)
        z = jax.nn.relu(self.ff_1(z, ff_key))
        advantage = self.advantage(z, advantage_key)  # [B * n_tau, A]
        value = self.value(z, value_key)  # [B * n_tau, 1]
        quantiles = value + advantage - advantage.mean(axis=1, keepdims=True)
        return quantiles.reshape(batch, n_tau, self.n_actions)

    def get_qvalues(self, x: jax.Array, taus: jax.Array, noise_key: jax.Array | None = None) -> jax.Array:
        """Q(x, a) as the mean of the quantiles over the n_tau sampled fractions: [B, n_actions]."""
        return self(x, taus, noise_key).mean(axis=1)

    def noise_draws(self, noise_key: jax.Array) -> dict[str, dict[str, jax.Array]]:
        """The draws a call with ``noise_key`` uses: {'ff_1' | 'advantage' | 'value': {'eps_kernel' [in, out], 'eps_bias' [out]}}."""
        draws = {}
        for name, key in zip(NOISY_LAYERS, layer_keys(noise_key), strict=True):
            eps_kernel, eps_bias = getattr(self, name).noise(key)
            draws[name] = {"eps_kernel": eps_kernel, "eps_bias": eps_bias}
        return draws


def layer_keys(noise_key: jax.Array | None) -> tuple[Any, Any, Any]:
    """One key per noisy layer (ff_1, advantage, value), or three Nones for the mean network."""
    if noise_key is None:
        return None, None, None
    return tuple(jax.random.split(noise_key, len(NOISY_LAYERS)))


def make_iqn(in_features: int, n_actions: int, layer_size: int = 250, n_cos: int = 64) -> Functional:
    """The IQN as pure functions of a plain parameter dict: ``init(key) -> params``, ``apply(params, x, taus, noise_key)``."""
    return Functional(lambda rngs: IQN(in_features, n_actions, layer_size, n_cos, rngs=rngs))


def sample_taus(key: jax.Array, batch: int, n_tau: int) -> jax.Array:
    """Quantile fractions tau ~ U(0, 1): [batch, n_tau, 1] float32 (fresh for every forward)."""
    return jax.random.uniform(key, (batch, n_tau, 1), jnp.float32)


def q_values(
    network: Functional,
    params: Any,
    x: jax.Array,
    key: jax.Array,
    n_tau: int,
    deterministic: bool,
    taus: jax.Array | None = None,
) -> jax.Array:
    """Q-values [B, n_actions] of x [B, in_features], averaged over n_tau fresh taus.

    ``key`` is split into the taus' key and the noise key (unused when ``deterministic``: the mean
    weights). ``taus`` [B, n_tau, 1], when given, replaces the sampled fractions (parity tests
    inject the PyTorch side's taus).
    """
    tau_key, noise_key = jax.random.split(key)
    if taus is None:
        taus = sample_taus(tau_key, x.shape[0], n_tau)
    return network.apply(params, x, taus, None if deterministic else noise_key, method="get_qvalues")
