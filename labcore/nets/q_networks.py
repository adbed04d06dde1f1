"""Q-networks for DQN, written in Haiku.

Haiku separates a network's definition from its parameters: ``hk.transform``
turns a function that builds modules into a pair of pure functions,
``init(key, obs) -> params`` and ``apply(params, None, obs) -> q_values``, and
the parameters are an ordinary pytree (a dict of dicts of arrays).

    network = make_q_network("nature_cnn", num_actions=4)
    params = network.init(key, dummy_obs)
    q = network.apply(params, None, obs)        # [B, num_actions]
"""

from __future__ import annotations

from collections.abc import Sequence

import haiku as hk
import jax
import jax.numpy as jnp

from labcore.nets import NETWORKS  # the kinds, importable without Haiku (the configs check them)
from labcore.nets.conv import Conv2D


class NatureCNN(hk.Module):
    """The Nature DQN network (Mnih et al., 2015).

    conv 32 8x8 stride 4 -> conv 64 4x4 stride 2 -> conv 64 3x3 stride 1 -> dense 512 -> Q per action,
    ReLU between. Frames arrive as uint8 and are scaled to [0, 1] inside the network, so the
    replay buffer can store uint8 (4x smaller than float32).

    obs: [B, 4, 84, 84] uint8, the 4 stacked frames first, as gymnasium's FrameStackObservation
    and ALE's vector env return them -> [B, num_actions] float32. The frames become channels inside
    (XLA's CPU and GPU convolutions prefer channels last), fused with the uint8 -> float conversion.
    The convolutions are ``labcore.nets.conv.Conv2D``: Haiku's, with a gradient that XLA's CPU
    backend also runs at full speed inside a loop (PQN's epochs of minibatch steps).

    layer_norm: PQN's Atari network as purejaxql writes it (``purejaxql/pqn_atari.py``, ``CNN``): a
    LayerNorm over the channels (the units) after each convolution and after the dense layer, before
    its ReLU, and He-normal weights in those four layers (Haiku's default otherwise).
    """

    def __init__(self, num_actions: int, layer_norm: bool = False, name: str | None = None):
        super().__init__(name=name)
        self.num_actions = num_actions
        self.layer_norm = layer_norm

    def __call__(self, obs: jax.Array) -> jax.Array:
        # He-normal, as flax's he_normal: variance 2 / fan_in from a normal truncated at 2 std
        w_init = hk.initializers.VarianceScaling(2.0, "fan_in", "truncated_normal") if self.layer_norm else None
        x = jnp.transpose(obs, (0, 2, 3, 1)).astype(jnp.float32) / 255.0
        for channels, kernel, stride in ((32, 8, 4), (64, 4, 2), (64, 3, 1)):
            x = Conv2D(channels, kernel_shape=kernel, stride=stride, w_init=w_init)(x)
            x = jax.nn.relu(_maybe_normalise(x, self.layer_norm))
        x = hk.Flatten()(x)
        x = jax.nn.relu(_maybe_normalise(hk.Linear(512, w_init=w_init)(x), self.layer_norm))
        return hk.Linear(self.num_actions)(x)


class MLPQNetwork(hk.Module):
    """A fully connected Q-network for vector observations (CartPole and friends).

    obs: [B, D] float (or [B, ...], flattened) -> [B, num_actions] float32. layer_norm: a LayerNorm
    after each hidden layer, before its ReLU (PQN's network: it keeps the TD updates stable
    without a target network).
    """

    def __init__(
        self, num_actions: int, hidden_sizes: Sequence[int] = (120, 84), layer_norm: bool = False, name: str | None = None
    ):
        super().__init__(name=name)
        self.num_actions = num_actions
        self.hidden_sizes = tuple(hidden_sizes)
        self.layer_norm = layer_norm

    def __call__(self, obs: jax.Array) -> jax.Array:
        x = obs.astype(jnp.float32)
        if x.ndim > 2:
            x = x.reshape(x.shape[0], -1)
        for size in self.hidden_sizes:
            x = jax.nn.relu(_maybe_normalise(hk.Linear(size)(x), self.layer_norm))
        return hk.Linear(self.num_actions)(x)


class MinAtarCNN(hk.Module):
    """The MinAtar paper's network (Young & Tian, 2019): conv 16 3x3 stride 1 -> dense 128 -> Q.

    obs: [B, 10, 10, C] MinAtar grids (one 0/1 channel per kind of object, channels last as
    gymnax returns them) -> [B, num_actions] float32. hidden_sizes: the dense layers after the
    convolution. layer_norm: a LayerNorm after the convolution (over its channels) and after each
    dense layer, before the ReLU.
    """

    def __init__(
        self, num_actions: int, hidden_sizes: Sequence[int] = (128,), layer_norm: bool = False, name: str | None = None
    ):
        super().__init__(name=name or "minatar_cnn")
        self.num_actions = num_actions
        self.hidden_sizes = tuple(hidden_sizes)
        self.layer_norm = layer_norm

    def __call__(self, obs: jax.Array) -> jax.Array:
        x = obs.astype(jnp.float32)
        x = jax.nn.relu(_maybe_normalise(hk.Conv2D(16, kernel_shape=3, stride=1, padding="VALID")(x), self.layer_norm))
        x = hk.Flatten()(x)
        for size in self.hidden_sizes:
            x = jax.nn.relu(_maybe_normalise(hk.Linear(size)(x), self.layer_norm))
        return hk.Linear(self.num_actions)(x)


def _maybe_normalise(x: jax.Array, layer_norm: bool) -> jax.Array:
    """LayerNorm over the last axis (with a learned scale and offset), or x unchanged."""
    return hk.LayerNorm(axis=-1, create_scale=True, create_offset=True)(x) if layer_norm else x


def make_q_network(
    kind: str, num_actions: int, hidden_sizes: Sequence[int] = (120, 84), layer_norm: bool = False
) -> hk.Transformed:
    """``hk.transform`` of a Q-network: ``init(key, obs)`` and ``apply(params, None, obs)``.

    kind: 'nature_cnn' (Atari frames), 'mlp' (vector observations) or 'minatar_cnn' (MinAtar's
    10x10 grids). hidden_sizes: the dense layers of 'mlp' and 'minatar_cnn'. layer_norm: a
    LayerNorm before each hidden ReLU (for 'nature_cnn', with purejaxql's He-normal weights).
    """
    if kind not in NETWORKS:
        raise ValueError(f"network kind must be one of {NETWORKS}, got {kind!r}")
    if num_actions < 1:
        raise ValueError(f"num_actions must be >= 1, got {num_actions}")

    def forward(obs: jax.Array) -> jax.Array:
        if kind == "nature_cnn":
            return NatureCNN(num_actions, layer_norm)(obs)
        if kind == "minatar_cnn":
            return MinAtarCNN(num_actions, hidden_sizes, layer_norm)(obs)
        return MLPQNetwork(num_actions, hidden_sizes, layer_norm)(obs)

    return hk.transform(forward)


def epsilon_greedy(q_values: jax.Array, epsilon: jax.Array | float, key: jax.Array) -> jax.Array:
    """A uniformly random action with probability epsilon, else argmax Q.

    q_values: [B, A] -> actions [B] int32. Each row draws its own coin and random action.
    """
    batch, num_actions = q_values.shape
    # One draw serves both coins: row 0 decides whether to explore, row 1 picks the random
    # action. (A split plus uniform plus randint costs several times more on a CPU, and
    # acting runs once per environment step.)
    coin, pick = jax.random.uniform(key, (2, batch))
    random_actions = jnp.minimum((pick * num_actions).astype(jnp.int32), num_actions - 1)
    return jnp.where(coin < epsilon, random_actions, jnp.argmax(q_values, axis=-1)).astype(jnp.int32)
