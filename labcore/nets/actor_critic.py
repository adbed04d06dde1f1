"""An actor-critic MLP in Flax NNX, initialised the way PPO implementations do.

Orthogonal weights (gain sqrt(2) in hidden layers, 0.01 on the policy head so the first policy is
near uniform, 1.0 on the value head), zero biases, tanh activations, separate actor and critic
trunks. The orthogonal matrices are nnx's, drawn one agent at a time under ``jax.vmap`` (``orthogonal``).

    model = ActorCritic(obs_size=8, num_actions=13, hidden_size=256, num_layers=2, rngs=nnx.Rngs(params=0))
    logits, value = model(obs)                      # obs [B, D] -> [B, A], [B]

PPO's jitted program uses it through ``make_actor_critic(...)``: ``init(key)`` returns the
parameters as a plain dict ({'actor_0': {'kernel' [D, H], 'bias' [H]}, ..., 'policy', 'value'})
and ``apply(params, obs)`` runs the module on them (``labcore.nets.functional``).

``dtype=jnp.bfloat16`` runs the matmuls and activations in bfloat16 (mixed precision): the
parameters are created and kept in float32 (``param_dtype``), each layer casts its kernel and
input to bfloat16, and the outputs (logits, value) come back as float32, so the loss, the
gradients' sum and the optimizer all stay in float32.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from labcore.nets.functional import Functional

ACTIVATIONS = {"tanh": jnp.tanh, "relu": jax.nn.relu}


def orthogonal(gain: float):
    """nnx's orthogonal initializer (a QR decomposition of a normal matrix, times ``gain``), the same numbers,
    but under ``jax.vmap`` the agents' matrices are decomposed one after another (a ``lax.map``) instead of as
    one batched QR.

    Why: jaxlib 0.10.2's CPU QR kernel splits a batch across XLA's CPU thread pool and waits for the pieces
    on a pool thread. When as many independent batched QRs run at once as the pool has threads (the actor's
    and the critic's layers, two threads on a 2-core machine), every thread waits for work queued behind it
    and the program never finishes: ``jax.jit(jax.vmap(train))`` over 128 PPO agents hung here so, in the
    kernel's wait, before its first update. A batch of one runs on the calling thread. Initialising is a
    few hundred small matrices at most, so doing them in turn costs nothing that shows.
    """
    one_matrix = nnx.initializers.orthogonal(gain)

    def init(key: jax.Array, shape: tuple[int, ...], dtype: jnp.dtype = jnp.float32) -> jax.Array:
        @jax.custom_batching.custom_vmap
        def draw(key):
            return one_matrix(key, shape, dtype)

        @draw.def_vmap
        def draw_in_turn(axis_size, in_batched, keys):
            if not in_batched[0]:  # one key for every agent: one matrix, shared
                return draw(keys), False
            return jax.lax.map(draw, keys), True

        return draw(key)

    return init


class ActorCritic(nnx.Module):
    """obs [B, obs_size] (or [B, ...] of obs_size values, flattened: MinAtar's grids) -> (logits [B, num_actions],
    value [B]), float32 out whatever ``dtype``."""

    def __init__(self, obs_size: int, num_actions: int, hidden_size: int = 256, num_layers: int = 2,
                 activation: str = "tanh", dtype: jnp.dtype = jnp.float32, *, rngs: nnx.Rngs):
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
        self.activation, self.num_layers = activation, num_layers
        zeros = nnx.initializers.constant(0.0)

        def dense(in_size: int, out_size: int, gain: float) -> nnx.Linear:
            return nnx.Linear(in_size, out_size, kernel_init=orthogonal(gain), bias_init=zeros,
                              dtype=dtype, param_dtype=jnp.float32, rngs=rngs)

        self.dtype = dtype
        for trunk in ("actor", "critic"):
            for layer in range(num_layers):
                setattr(self, f"{trunk}_{layer}", dense(obs_size if layer == 0 else hidden_size, hidden_size,
                                                        np.sqrt(2)))
        self.policy = dense(hidden_size, num_actions, 0.01)
        self.value = dense(hidden_size, 1, 1.0)

    def trunk(self, x: jax.Array, name: str) -> jax.Array:
        for layer in range(self.num_layers):
            x = ACTIVATIONS[self.activation](getattr(self, f"{name}_{layer}")(x))
        return x

    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        x = obs.reshape(obs.shape[0], -1).astype(self.dtype)
        logits = self.policy(self.trunk(x, "actor"))
        value = self.value(self.trunk(x, "critic"))
        # float32 out: the softmax, log-probabilities, ratios and the loss are computed in float32
        return logits.astype(jnp.float32), jnp.squeeze(value, axis=-1).astype(jnp.float32)


def make_actor_critic(obs_size: int, num_actions: int, hidden_size: int = 256, num_layers: int = 2,
                      activation: str = "tanh", dtype: jnp.dtype = jnp.float32) -> Functional:
    """The actor-critic as pure functions of a plain parameter dict: ``init(key)``, ``apply(params, obs)``."""
    return Functional(lambda rngs: ActorCritic(obs_size, num_actions, hidden_size, num_layers, activation, dtype,
                                               rngs=rngs))
