"""An actor-critic MLP in Flax Linen, initialised the way PPO implementations do.

Orthogonal weights (gain sqrt(2) in hidden layers, 0.01 on the policy head so the first policy is
near uniform, 1.0 on the value head), zero biases, tanh activations, separate actor and critic
trunks.

    network = ActorCritic(num_actions=13, hidden_size=256, num_layers=2)
    params = network.init(key, obs)                 # obs: [B, D]
    logits, value = network.apply(params, obs)      # [B, A], [B]

``dtype=jnp.bfloat16`` runs the matmuls and activations in bfloat16 (mixed precision): the
parameters are created and kept in float32 (``param_dtype``), each layer casts its kernel and
input to bfloat16, and the outputs (logits, value) come back as float32, so the loss, the
gradients' sum and the optimizer all stay in float32.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np


class ActorCritic(nn.Module):
    num_actions: int
    hidden_size: int = 256
    num_layers: int = 2
    activation: str = "tanh"  # or 'relu'
    dtype: jnp.dtype = jnp.float32  # compute dtype of the layers; parameters stay float32

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        act = jnp.tanh if self.activation == "tanh" else nn.relu
        hidden_init = nn.initializers.orthogonal(np.sqrt(2))
        zeros = nn.initializers.constant(0.0)

        def trunk(x: jax.Array, name: str) -> jax.Array:
            for layer in range(self.num_layers):
                x = act(nn.Dense(self.hidden_size, kernel_init=hidden_init, bias_init=zeros, dtype=self.dtype,
                                 param_dtype=jnp.float32, name=f"{name}_{layer}")(x))
            return x

        x = obs.astype(self.dtype)
        logits = nn.Dense(self.num_actions, kernel_init=nn.initializers.orthogonal(0.01), bias_init=zeros,
                          dtype=self.dtype, param_dtype=jnp.float32, name="policy")(trunk(x, "actor"))
        value = nn.Dense(1, kernel_init=nn.initializers.orthogonal(1.0), bias_init=zeros, dtype=self.dtype,
                         param_dtype=jnp.float32, name="value")(trunk(x, "critic"))
        # float32 out: the softmax, log-probabilities, ratios and the loss are computed in float32
        return logits.astype(jnp.float32), jnp.squeeze(value, axis=-1).astype(jnp.float32)
