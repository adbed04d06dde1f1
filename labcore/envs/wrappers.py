"""The masked-env interface and pure-JAX wrappers for it (gymnax 1.x API).

A masked env is anything with

    reset(key, params) -> (obs, state)
    step(key, state, action, params) -> (obs, state, reward, terminated, truncated, info)
    action_mask(state, params) -> [num_actions] bool        (legal actions in ``state``)
    num_actions, default_params, observation_space(params)

``step`` resets by itself when an episode ends (the returned obs and state are then the new
episode's, and ``action_mask`` of that state is the new episode's mask). Wrappers keep this
interface, so they stack:

    env = LogEpisodeStats(FlattenObservation(Vault()))
    env = LogEpisodeStats(AllValidMask(gymnax.make("CartPole-v1")[0]))
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import spaces


class Wrapper:
    """Forwards everything to the wrapped env; subclasses override what they change."""

    def __init__(self, env: Any):
        self._env = env

    def __getattr__(self, name: str) -> Any:
        return getattr(self._env, name)

    @property
    def unwrapped(self) -> Any:
        return getattr(self._env, "unwrapped", self._env)


class AllValidMask(Wrapper):
    """A gymnax env without action masks (CartPole and friends): every action is always legal."""

    @property
    def num_actions(self) -> int:
        return int(self._env.action_space(self._env.default_params).n)

    def reset(self, key: jax.Array, params: Any = None):
        return self._env.reset(key, params)

    def step(self, key: jax.Array, state: Any, action: jax.Array, params: Any = None):
        return self._env.step(key, state, action, params)

    def action_mask(self, state: Any, params: Any = None) -> jax.Array:
        return jnp.ones(self.num_actions, bool)


def _flatten(obs: Any) -> jax.Array:
    """Every leaf of an observation pytree, raveled and concatenated (leaf order), as float32."""
    return jnp.concatenate([jnp.ravel(leaf).astype(jnp.float32) for leaf in jax.tree_util.tree_leaves(obs)])


class FlattenObservation(Wrapper):
    """A structured observation (e.g. Vault's grid + player features) as one [D] float32 vector."""

    def reset(self, key: jax.Array, params: Any = None):
        obs, state = self._env.reset(key, params)
        return _flatten(obs), state

    def step(self, key: jax.Array, state: Any, action: jax.Array, params: Any = None):
        obs, state, reward, terminated, truncated, info = self._env.step(key, state, action, params)
        if "final_observation" in info:
            info = {**info, "final_observation": _flatten(info["final_observation"])}
        return _flatten(obs), state, reward, terminated, truncated, info

    def observation_space(self, params: Any = None) -> spaces.Box:
        params = self._env.default_params if params is None else params
        example = self._env.reset(jax.random.key(0), params)[0]
        size = int(sum(jnp.size(leaf) for leaf in jax.tree_util.tree_leaves(example)))
        return spaces.Box(-jnp.inf, jnp.inf, (size,), jnp.float32)


@struct.dataclass
class EpisodeStatsState:
    env_state: Any
    episode_return: jax.Array  # [] float32, the running episode's return so far
    episode_length: jax.Array  # [] int32
    returned_episode_return: jax.Array  # [] float32, the last finished episode's return
    returned_episode_length: jax.Array  # [] int32


class LogEpisodeStats(Wrapper):
    """Tracks episode return and length inside the state and reports finished episodes in info.

    info["returned_episode"]: [] bool, an episode ended at this step;
    info["returned_episode_return"], info["returned_episode_length"]: that episode's totals
    (else the previous finished episode's).
    """

    def reset(self, key: jax.Array, params: Any = None):
        obs, env_state = self._env.reset(key, params)
        zero_f, zero_i = jnp.float32(0.0), jnp.int32(0)
        return obs, EpisodeStatsState(env_state, zero_f, zero_i, zero_f, zero_i)

    def step(self, key: jax.Array, state: EpisodeStatsState, action: jax.Array, params: Any = None):
        obs, env_state, reward, terminated, truncated, info = self._env.step(key, state.env_state, action, params)
        done = terminated | truncated
        episode_return = state.episode_return + reward
        episode_length = state.episode_length + 1
        new_state = EpisodeStatsState(
            env_state=env_state,
            episode_return=jnp.where(done, 0.0, episode_return),
            episode_length=jnp.where(done, 0, episode_length),
            returned_episode_return=jnp.where(done, episode_return, state.returned_episode_return),
            returned_episode_length=jnp.where(done, episode_length, state.returned_episode_length),
        )
        info = {
            **info,
            "returned_episode": done,
            "returned_episode_return": new_state.returned_episode_return,
            "returned_episode_length": new_state.returned_episode_length,
        }
        return obs, new_state, reward, terminated, truncated, info

    def action_mask(self, state: EpisodeStatsState, params: Any = None) -> jax.Array:
        return self._env.action_mask(state.env_state, params)
