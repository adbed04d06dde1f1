"""Many envs stepped as one inside a jitted program: the interface PQN's rollout steps.

A batched env holds ``num_envs`` envs and steps them together:

    obs, state = batch.reset(key)                           # obs [E, *obs_shape]
    obs, state, step = batch.step(key, state, actions)      # actions [E] int32; step: a VectorStep

An env whose episode ended is reset within the step: ``obs`` starts its next episode and
``step.final_obs`` holds the observation the episode ended on (to bootstrap a time limit from).
Two kinds:

* ``GymnaxBatch``: a gymnax env (CartPole, MinAtar, labcore's own games) under ``jax.vmap``, pure;
* ``labcore.envs.ale_jax.AtariJaxEnv``: Atari, ALE's C++ vector env called from the program. Its
  emulators live outside JAX, so it has a ``restore`` to bring them back after a checkpoint is read.

Learning and reporting may differ (Atari): ``reward`` and ``terminated`` are what the learner
uses (a clipped reward, a lost life as terminal), ``score`` and ``episode_done`` what an episode's
return counts (the game's points, all its lives).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax


class VectorStep(NamedTuple):
    """One step of E envs: leaves [E] (final_obs [E, *obs_shape])."""

    reward: jax.Array  # float32, for learning
    score: jax.Array  # float32, what the episode return adds up
    terminated: jax.Array  # bool: no bootstrap from the next observation
    truncated: jax.Array  # bool: a time limit; bootstrap from final_obs
    episode_done: jax.Array  # bool: the episode ended here (the env starts a new one)
    final_obs: jax.Array  # the observation this step reached, before any reset


class GymnaxBatch:
    """``num_envs`` copies of a gymnax env, vmapped: each env gets its own key at every reset and step."""

    restore = None  # a pure env's state is all in the checkpoint

    def __init__(self, env: Any, env_params: Any, num_envs: int):
        self.env, self.env_params, self.num_envs = env, env_params, num_envs
        self.num_actions = int(env.action_space(env_params).n)
        self.obs_shape = tuple(env.observation_space(env_params).shape)
        self._reset = jax.vmap(env.reset, in_axes=(0, None))
        self._step = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    def reset(self, key: jax.Array) -> tuple[jax.Array, Any]:
        return self._reset(jax.random.split(key, self.num_envs), self.env_params)

    def step(self, key: jax.Array, state: Any, actions: jax.Array) -> tuple[jax.Array, Any, VectorStep]:
        obs, state, reward, terminated, truncated, info = self._step(
            jax.random.split(key, self.num_envs), state, actions, self.env_params)
        reward = reward.astype("float32")
        return obs, state, VectorStep(reward, reward, terminated, truncated, terminated | truncated,
                                      info["final_observation"])
