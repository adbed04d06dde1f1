"""The IQN network of sorrel's iRainbow in Flax Linen (implicit quantile network, Dabney et al. 2018).

    x [B, in_features] --head1 (Dense), ReLU-------------------------------------> h [B, L]
    taus [B, n_tau, 1] --cos(tau * pi * [1..n_cos]), cos_embedding (Dense), ReLU--> c [B, n_tau, L]
    z = h[:, None, :] * c, as [B * n_tau, L] --ff_1 (NoisyLinear), ReLU--> z
    quantiles = value(z) + advantage(z) - mean_a advantage(z)       (dueling; both NoisyLinear)
              -> [B, n_tau, n_actions]

in_features = n_frames * obs_size (the agent feeds a flattened stack of frames). head1 and
cos_embedding start from PyTorch's default ``nn.Linear`` distribution, U(+-1/sqrt(in)) for kernel
and bias, so a fresh port and a fresh original are draws from the same distribution; the noisy
layers use ``labcore.nets.noisy.NoisyLinear``'s own initialisation.

The parameter names ('head1', 'cos_embedding', 'ff_1', 'advantage', 'value', each holding
'kernel' [in, out] and 'bias' [out], the noisy ones also 'sigma_kernel' and 'sigma_bias') are
fixed: ``labcore.torch_ref.irainbow_network``'s bridge copies PyTorch weights into exactly these leaves.

Everything goes through ``apply``: ``q_values`` below calls the ``get_qvalues`` method with
``method=IQN.get_qvalues``, and noisy (training-mode) calls take ``rngs={'noise': key}``.
"""

from __future__ import annotations

import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from labcore.nets.noisy import NoisyLinear, uniform_init


def _torch_linear(features: int, in_features: int, name: str) -> nn.Dense:
    """nn.Dense initialised as torch.nn.Linear(in_features, features): kernel and bias U(+-1/sqrt(in))."""
    bound = 1.0 / math.sqrt(in_features)
    return nn.Dense(features, kernel_init=uniform_init(bound), bias_init=uniform_init(bound), name=name)


class IQN(nn.Module):
    """Implicit quantile network: (x [B, in_features], taus [B, n_tau, 1]) -> quantiles [B, n_tau, n_actions].

    deterministic=True: the noisy layers use their mean weights (acting, the original's eval
    mode); False: fresh independent noise per call from the 'noise' RNG (the original's train mode).
    """

    in_features: int
    n_actions: int
    layer_size: int = 250
    n_cos: int = 64

    @nn.compact
    def __call__(self, x: jax.Array, taus: jax.Array, deterministic: bool) -> jax.Array:
        if x.ndim != 2 or x.shape[1] != self.in_features:
            raise ValueError(f"IQN expects x of shape [B, in_features={self.in_features}], got {tuple(x.shape)}")
        batch = x.shape[0]
        if taus.ndim != 3 or taus.shape[0] != batch or taus.shape[2] != 1:
            raise ValueError(f"IQN expects taus of shape [B={batch}, n_tau, 1], got {tuple(taus.shape)}")
        n_tau, size = taus.shape[1], self.layer_size
        head = nn.relu(_torch_linear(size, self.in_features, "head1")(x))  # [B, L]
        # pi * [1 .. n_cos]: the original starts the cosine frequencies at 1, not 0, and forms the
        # products in float64 before rounding once to float32 (a float32 product can be 1 ulp off).
        frequencies = jnp.asarray(np.pi * np.arange(1, self.n_cos + 1, dtype=np.float64), jnp.float32)
        cosines = jnp.cos(taus * frequencies)  # [B, n_tau, n_cos]
        embedding = nn.relu(_torch_linear(size, self.n_cos, "cos_embedding")(cosines))  # [B, n_tau, L]
        z = (head[:, None, :] * embedding).reshape(batch * n_tau, size)
        z = nn.relu(NoisyLinear(size, size, name="ff_1")(z, deterministic))
        advantage = NoisyLinear(size, self.n_actions, name="advantage")(z, deterministic)  # [B * n_tau, A]
        value = NoisyLinear(size, 1, name="value")(z, deterministic)  # [B * n_tau, 1]
        quantiles = value + advantage - advantage.mean(axis=1, keepdims=True)
        return quantiles.reshape(batch, n_tau, self.n_actions)

    def get_qvalues(self, x: jax.Array, taus: jax.Array, deterministic: bool) -> jax.Array:
        """Q(x, a) as the mean of the quantiles over the n_tau sampled fractions: [B, n_actions]."""
        return self(x, taus, deterministic).mean(axis=1)


def sample_taus(key: jax.Array, batch: int, n_tau: int) -> jax.Array:
    """Quantile fractions tau ~ U(0, 1): [batch, n_tau, 1] float32 (fresh for every forward)."""
    return jax.random.uniform(key, (batch, n_tau, 1), jnp.float32)


def noise_rngs(key: jax.Array | None, deterministic: bool) -> dict[str, jax.Array]:
    """The ``rngs`` argument of a call: {'noise': key} in training mode, {} in eval mode.

    Raises ValueError for a training-mode call without a key (rather than a Flax error later).
    """
    if deterministic:
        return {}
    if key is None:
        raise ValueError("a noisy (deterministic=False) IQN call needs a noise key")
    return {"noise": key}


def q_values(
    model: IQN,
    params: Any,
    x: jax.Array,
    key: jax.Array,
    n_tau: int,
    deterministic: bool,
    taus: jax.Array | None = None,
) -> jax.Array:
    """Q-values [B, n_actions] of x [B, in_features], averaged over n_tau fresh taus.

    ``key`` is split into the taus' key and the noise key. ``taus`` [B, n_tau, 1], when given,
    replaces the sampled fractions (parity tests inject the PyTorch side's taus).
    """
    tau_key, noise_key = jax.random.split(key)
    if taus is None:
        taus = sample_taus(tau_key, x.shape[0], n_tau)
    return model.apply(
        {"params": params}, x, taus, deterministic, rngs=noise_rngs(noise_key, deterministic), method=IQN.get_qvalues
    )
