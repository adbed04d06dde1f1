"""The pieces of the DQN host loop (``labcore.agents.dqn.host_loop``), made once from a config by
``make_parts``: the agent, two compiled functions, and the chunk of transitions waiting on the host.

* ``act(params, obs, step, key) -> actions``: epsilon-greedy with the scheduled epsilon;
* ``learn(train_state, replay, chunk, episode_end, step, key, num_updates)``: store a chunk
  of transitions and apply the updates that fell due while they were collected.

Both are pure and jitted once; ``learn`` donates its inputs, so the replay buffer (the agent's,
``DQN.buffer``: 7 GB for a million Atari frames) is updated in place. PRNG keys are ``fold_in(key, step)``, so a run is a
pure function of its seed, however it is chunked.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from labcore import envs
from labcore.agents.dqn import core as dqn
from labcore.agents.dqn.agent import DQN, make_dqn


def open_envs(config: dqn.DQNConfig, num_envs: int, *, seed: int = 0, training: bool = True,
              max_episode_steps: int | None = None) -> Any:
    """``num_envs`` envs of ``config.env_id`` (``labcore.envs.make_vector_env``), with the config's sticky actions
    (``repeat_action_probability``) for an Atari id; max_episode_steps caps an Atari game's length (default:
    ``labcore.envs.ale_vector.AtariSettings.max_episode_steps``, 27,000 agent steps; another id's own limit stays)."""
    atari_settings = {}
    if envs.atari.is_atari_id(config.env_id):
        atari_settings["repeat_action_probability"] = config.repeat_action_probability
        if max_episode_steps is not None:
            atari_settings["max_episode_steps"] = max_episode_steps
    return envs.make_vector_env(config.env_id, num_envs, seed=seed, training=training, **atari_settings)


def env_spec(config: dqn.DQNConfig) -> tuple[tuple[int, ...], np.dtype, int]:
    """(observation shape, dtype, number of actions), checked before anything is built.

    Raises ValueError for an unknown env id or a non-Discrete action space.
    """
    env = open_envs(config, 1)
    space = env.single_observation_space
    shape, dtype, num_actions = space.shape, space.dtype, int(env.single_action_space.n)
    env.close()
    if config.network == "nature_cnn" and len(shape) != 3:
        raise ValueError(f"DQNConfig.network 'nature_cnn' needs stacked frames, but {config.env_id} observes {shape}")
    if config.network == "mlp" and len(shape) != 1:
        raise ValueError(f"DQNConfig.network 'mlp' needs vector observations, but {config.env_id} observes {shape}")
    return shape, dtype, num_actions


def make_agent(config: dqn.DQNConfig, spec: tuple[tuple[int, ...], np.dtype, int] | None = None) -> DQN:
    """DQN's functions (``labcore.agents.dqn.agent.make_dqn``) for the gymnasium env ``config.env_id``;
    spec: its ``env_spec`` (default: read here, which opens the env once)."""
    obs_shape, obs_dtype, num_actions = env_spec(config) if spec is None else spec
    return make_dqn(config, num_actions=num_actions, obs_shape=obs_shape, obs_dtype=obs_dtype)


def make_act(config: dqn.DQNConfig, agent: DQN):
    """Jitted ``act(params, obs [N, ...], step, key) -> [N] int32`` with the scheduled epsilon."""

    @jax.jit
    def act(params, obs, step, key):
        return agent.act(params, obs, dqn.linear_epsilon(step, config), jax.random.fold_in(key, step))

    return act


def make_learn(config: dqn.DQNConfig, agent: DQN):
    """Jitted ``learn(train_state, replay_state, chunk, episode_end, step, key, num_updates)``.

    chunk: a Transition with leaves [T, N, ...] (T env steps of N envs); episode_end: [T, N]
    bool; step: agent steps taken after the chunk (seeds the update keys); num_updates: how
    many updates to apply after storing the chunk.
    Returns (train_state, replay_state, metrics); metrics are the last update's (zeros if none).
    """
    buffer = agent.buffer

    def store(replay_state, chunk, episode_end):
        # [T, N, ...] -> [T * N, ...], step by step in time order (a frame buffer's one env: N = 1)
        flat = jax.tree_util.tree_map(lambda leaf: leaf.reshape(-1, *leaf.shape[2:]), (chunk, episode_end))
        return buffer.add(replay_state, *flat)

    # num_updates is static: one compiled version per count (0 while filling the buffer, then
    # 1 per chunk). A dynamic fori_loop would compile once, but XLA's CPU backend runs the
    # convolutions inside a while loop about 6x slower than at the top level.
    @partial(jax.jit, donate_argnums=(0, 1), static_argnames="num_updates")
    def learn(train_state, replay_state, chunk, episode_end, step, key, num_updates):
        replay_state = store(replay_state, chunk, episode_end)
        step_key = jax.random.fold_in(key, step)
        metrics = {name: jnp.float32(0) for name in ("loss", "grad_norm", "q_mean", "td_abs_mean")}
        for i in range(num_updates):
            train_state, metrics = agent.learn(train_state, buffer.sample(replay_state, jax.random.fold_in(step_key, i)))
        return train_state, replay_state, metrics

    return learn


def updates_due(step_before: int, step_after: int, config: dqn.DQNConfig) -> int:
    """Updates owed for agent steps (step_before, step_after]: one per multiple of train_frequency."""
    if step_after <= config.learning_starts:
        return 0
    start = max(step_before, config.learning_starts)
    return step_after // config.train_frequency - start // config.train_frequency


class Chunk:
    """Transitions waiting on the host for the next ``learn`` call: ``rows`` env steps of ``num_envs`` envs.

    Each step is written in place into numpy arrays [rows, N, ...]; ``take`` hands them over and starts
    fresh ones (fresh, because the arrays handed to ``learn`` must not change afterwards).
    """

    def __init__(self, rows: int, num_envs: int, obs_shape: tuple[int, ...], obs_dtype: np.dtype):
        self.rows, self.num_envs, self.obs_shape, self.obs_dtype = rows, num_envs, obs_shape, obs_dtype
        self._fresh()

    def _fresh(self) -> None:
        rows, num_envs = self.rows, self.num_envs
        self.transition = dqn.Transition(
            obs=np.empty((rows, num_envs, *self.obs_shape), self.obs_dtype),
            action=np.empty((rows, num_envs), np.int32),
            reward=np.empty((rows, num_envs), np.float32),
            next_obs=np.empty((rows, num_envs, *self.obs_shape), self.obs_dtype),
            terminated=np.empty((rows, num_envs), bool),
        )
        self.episode_end = np.empty((rows, num_envs), bool)
        self.filled = 0

    def put(self, obs, action, reward, next_obs, terminated, episode_end) -> None:
        """One env step of every env ([N, ...] each) into the next row."""
        row = self.filled
        for leaf, value in zip(self.transition, (obs, action, reward, next_obs, terminated)):
            leaf[row] = value
        self.episode_end[row] = episode_end
        self.filled += 1

    def take(self) -> tuple[dqn.Transition, np.ndarray]:
        """The rows written (a Transition [T, N, ...] and episode ends [T, N]; T < rows for a short chunk, after
        a resume or at the end of a run), and a fresh chunk to write into."""
        filled, transition, episode_end = self.filled, self.transition, self.episode_end
        self._fresh()
        if filled < self.rows:
            return jax.tree_util.tree_map(lambda leaf: leaf[:filled], (transition, episode_end))
        return transition, episode_end


class HostParts(NamedTuple):
    """What the host loop runs, made from a config once (``make_parts``)."""

    agent: DQN  # DQN's functions for the config's gymnasium env (its replay buffer: agent.buffer)
    act: Callable  # make_act's
    learn: Callable  # make_learn's
    chunk: Chunk  # the transitions waiting for the next learn call
    steps_per_chunk: int  # agent steps between learn calls: train_frequency, or num_envs where it does not divide it
    life_loss_terminal: bool  # a lost life ends the learner's episode (an Atari game with life_loss_terminal)


def make_parts(config: dqn.DQNConfig) -> HostParts:
    """The host loop's pieces for ``config``; the env is checked first (``env_spec``)."""
    spec = env_spec(config)
    agent = make_agent(config, spec)
    obs_shape, obs_dtype, _ = spec
    # Transitions wait on the host until an update is due: chunks end at multiples of
    # train_frequency agent steps (or every step when num_envs does not divide it).
    steps_per_chunk = config.train_frequency if config.train_frequency % config.num_envs == 0 else config.num_envs
    return HostParts(agent, make_act(config, agent), make_learn(config, agent),
                     Chunk(steps_per_chunk // config.num_envs, config.num_envs, obs_shape, obs_dtype), steps_per_chunk,
                     config.life_loss_terminal and envs.atari.is_atari_id(config.env_id))
