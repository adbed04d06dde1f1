"""Playing whole episodes of a pure-JAX env with a fixed policy: the one episode player.

    returns = play_episodes(env, env_params, choose, key, num_episodes=64)   # [64]

``choose(key, obs, mask) -> action`` is a policy for ONE env (greedy, sampled, epsilon-greedy or
random); ``mask`` is the env's ``action_mask(state, params)`` where it has one (Vault), else all
True. Every episode runs side by side (``vmap``) for the env's step limit inside one ``lax.scan``,
so the whole evaluation jits into one program; each return sums the rewards up to that episode's
first end (gymnax envs reset themselves after it). Agents build their policies on top:
``labcore.agents.ppo.core.policy_returns``, ``labcore.agents.dqn.scan.make_evaluate``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from labcore import losses

Policy = Callable[[jax.Array, jax.Array, jax.Array], jax.Array]


def legal_actions(env: Any, state: Any, env_params: Any) -> jax.Array:
    """[A] bool: the env's action mask, or every action where the env has no mask."""
    if hasattr(env, "action_mask"):
        return env.action_mask(state, env_params)
    return jnp.ones(env.action_space(env_params).n, bool)


def play_episodes(env: Any, env_params: Any, choose: Policy, key: jax.Array, num_episodes: int = 32) -> jax.Array:
    """Returns [num_episodes], one episode each, played at once for ``env_params.max_steps_in_episode``.

    Each episode gets its own key (split from ``key``), split again into its reset key and one
    key per step; each step's key is split into the policy's and the env's. Jit-able.
    """
    horizon = int(env_params.max_steps_in_episode)

    def one_episode(episode_key: jax.Array) -> jax.Array:
        reset_key, play_key = jax.random.split(episode_key)
        obs, state = env.reset(reset_key, env_params)

        def step(carry, step_key):
            obs, state, total, running = carry
            choose_key, env_key = jax.random.split(step_key)
            action = choose(choose_key, obs, legal_actions(env, state, env_params))
            obs, state, reward, terminated, truncated, _ = env.step(env_key, state, action, env_params)
            total = total + jnp.where(running, reward, 0.0)
            return (obs, state, total, running & ~(terminated | truncated)), None

        start = (obs, state, jnp.float32(0.0), jnp.bool_(True))
        (_, _, total, _), _ = jax.lax.scan(step, start, jax.random.split(play_key, horizon))
        return total

    return jax.vmap(one_episode)(jax.random.split(key, num_episodes))


def random_returns(env: Any, env_params: Any, key: jax.Array, num_episodes: int = 32, masked: bool = True) -> jax.Array:
    """[num_episodes] returns of uniform random play: over the legal actions, or over all (masked False)."""

    def choose(choose_key, obs, mask):
        return jax.random.categorical(choose_key, jnp.where(mask | (not masked), 0.0, losses.MASKED_LOGIT))

    return play_episodes(env, env_params, choose, key, num_episodes)
