"""DQN built once: ``make_dqn`` returns the pure functions every DQN driver runs.

    agent = make_dqn(config, env=env, env_params=env_params)  # a gymnax env: collect and evaluate too
    agent = make_dqn(config, num_actions=4, obs_shape=(4, 84, 84), obs_dtype=np.uint8)  # gymnasium

    state = agent.init(params_key)                   # TrainState: parameters, a target copy, the optimiser
    actions = agent.act(params, obs, epsilon, key)   # epsilon-greedy: obs [N, *obs_shape] -> [N] int32
    state, metrics = agent.learn(state, batch)       # one gradient step and the target update
    env_state, next_obs, transitions, done = agent.collect(params, env_state, obs, epsilon, act_key, env_key)
    returns = agent.evaluate(params, key)            # [eval_episodes] returns at config.eval_epsilon
    agent.example                                    # one zero Transition: a replay buffer's template
    buffer = agent.buffer.init(agent.example)        # the replay buffer: pure init, add, sample, can_sample
    buffer = agent.buffer.add(buffer, transitions, done)
    batch = agent.buffer.sample(buffer, key)         # [batch_size, ...] leaves

Who uses what: every driver replays through ``buffer``; the jitted DQN (``scan.make_parts``, which the
data-parallel ``multi_process`` runs on every replica) loops over ``collect`` and ``learn``; the Ray actor-learner's actors call
``collect`` and its learner ``learn``; the host loop over gymnasium (whose envs are not JAX
functions, so it has no ``collect`` or ``evaluate`` here) calls ``act`` and ``learn``. All of them
are pure and unjitted: each driver jits them where it runs them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import haiku as hk
import jax
import jax.numpy as jnp
import optax

from labcore import envs, evaluation, replay
from labcore.agents.dqn import core as dqn
from labcore.agents.dqn import frame_replay
from labcore.nets.q_networks import make_q_network


class DQN(NamedTuple):
    """DQN's pure functions for one config and one observation and action space (``make_dqn``)."""

    config: dqn.DQNConfig
    network: hk.Transformed
    optimizer: optax.GradientTransformation
    init: Callable[[jax.Array], dqn.TrainState]  # params_key -> a fresh TrainState
    act: Callable[[Any, jax.Array, Any, jax.Array], jax.Array]  # (params, obs [N, ...], epsilon, key) -> [N]
    learn: Callable[[dqn.TrainState, dqn.Transition], tuple[dqn.TrainState, dict[str, jax.Array]]]
    example: dqn.Transition  # one transition of zeros, shaped and typed as the env's
    # the replay buffer's pure functions (init(example), add(state, transitions, episode_end), sample(state, key),
    # can_sample(state)): Atari frames stored once for config.replay_storage "frames", else whole transitions
    buffer: replay.Buffer
    # (params, env_state, obs [num_envs, ...], epsilon, act_key, env_key) -> (env_state, next_obs,
    # transitions [num_envs, ...], done [num_envs]); None without a gymnax env
    collect: Callable[..., tuple[Any, jax.Array, dqn.Transition, jax.Array]] | None
    evaluate: Callable[[Any, jax.Array], jax.Array] | None  # (params, key) -> [eval_episodes] returns


def make_dqn(config: dqn.DQNConfig, *, env: Any = None, env_params: Any = None, num_actions: int | None = None,
             obs_shape: tuple[int, ...] | None = None, obs_dtype: Any = jnp.float32, num_envs: int | None = None,
             axis_name: str | tuple[str, ...] | None = None) -> DQN:
    """DQN's functions for ``config``: for a gymnax ``env`` (``env_params`` default: its own; the
    spaces and ``collect`` / ``evaluate`` come from it), or for given ``num_actions``, ``obs_shape``
    and ``obs_dtype`` (a gymnasium env, which the host loop steps itself).

    num_envs: envs ``collect`` steps at once (default ``config.num_envs``). axis_name: average each
    update's gradients over this mapped axis, or axes (``dqn.make_update``), for data parallelism.
    """
    if env is not None:
        env_params = env.default_params if env_params is None else env_params
        num_actions = env.action_space(env_params).n
        obs_shape = tuple(env.observation_space(env_params).shape)
        obs_dtype = env.observation_space(env_params).dtype
    elif num_actions is None or obs_shape is None:
        raise ValueError("make_dqn needs a gymnax env, or num_actions and obs_shape")
    num_envs = config.num_envs if num_envs is None else num_envs
    network = make_q_network(config.network, num_actions, config.hidden_sizes)
    optimizer = dqn.make_optimizer(config)
    example = dqn.Transition(obs=jnp.zeros(obs_shape, obs_dtype), action=jnp.int32(0), reward=jnp.float32(0.0),
                             next_obs=jnp.zeros(obs_shape, obs_dtype), terminated=jnp.bool_(False))

    def init(params_key: jax.Array) -> dqn.TrainState:
        return dqn.init_train_state(config, network, optimizer, jnp.zeros(obs_shape, jnp.float32), params_key)

    def act(params: Any, obs: jax.Array, epsilon: Any, key: jax.Array) -> jax.Array:
        return dqn.select_action(network, params, obs, epsilon, key)

    collect = evaluate = None
    if env is not None:
        step_envs = jax.vmap(env.step, in_axes=(0, 0, 0, None))

        def collect(params, env_state, obs, epsilon, act_key, env_key):
            """One agent step of each of the num_envs envs: act, step them all, the transitions."""
            actions = act(params, obs, epsilon, act_key)
            next_obs, env_state, reward, terminated, truncated, info = step_envs(
                jax.random.split(env_key, num_envs), env_state, actions, env_params
            )
            transitions = dqn.Transition(
                obs=obs,
                action=actions,
                reward=reward.astype(jnp.float32),
                next_obs=info["final_observation"],  # the true next state, also when the env just reset
                terminated=terminated,  # a time-limit truncation still bootstraps
            )
            return env_state, next_obs, transitions, terminated | truncated

        def evaluate(params: Any, key: jax.Array) -> jax.Array:
            """One episode per env at ``config.eval_epsilon``, all side by side, no learning."""
            def choose(choose_key, obs, _mask):
                return act(params, obs[None], config.eval_epsilon, choose_key)[0]

            return evaluation.play_episodes(env, env_params, choose, key, config.eval_episodes)

    return DQN(config, network, optimizer, init, act, dqn.make_update(config, network, optimizer, axis_name=axis_name),
               example, make_buffer(config), collect, evaluate)


def make_buffer(config: dqn.DQNConfig) -> replay.Buffer:
    """The replay buffer every DQN driver stores into and samples from (``labcore.replay.Buffer``): Atari frames
    stored once (``replay_storage="frames"``: ``frame_replay.frame_buffer``, ALE's vector env padding a new
    game's stack with zeros), or whole transitions in a uniform ring (``replay.uniform_buffer``)."""
    if config.replay_storage == "frames":
        return frame_replay.frame_buffer(config.buffer_size, config.batch_size, padding="zero")
    return replay.uniform_buffer(config.buffer_size, config.batch_size)


def make_dqn_for(config: dqn.DQNConfig, **options: Any) -> DQN:
    """``make_dqn`` for the gymnax env ``config.env_id`` (``labcore.envs.make_jax_env``)."""
    env, env_params = envs.make_jax_env(config.env_id)
    return make_dqn(config, env=env, env_params=env_params, **options)

