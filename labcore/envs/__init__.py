"""Environments: host envs for the DQN loops (classic control through gymnasium, Atari through ALE's
vector env, ``labcore.envs.ale_vector``), and
labcore's own pure-JAX games with the gymnax interface (stateless env object, params dataclass,
``reset(key, params)``, ``step(key, state, action, params)``): ``vault.Vault`` and
``hypergrid_env.HyperGridEnv`` (masked, through ``make_masked_env``) and the multi-agent
``treasurehunt_env.Treasurehunt``.

``make_vector_env`` is how the DQN host loops make their envs: it checks the id and the action
space before anything is built, so a typo or a continuous-control env fails with a message
naming it instead of deep inside a wrapper; ``final_observations``, ``finished_episodes`` and
``lives_lost`` read what one of its steps returns. (PQN steps ALE's vector env from inside its compiled
program: ``labcore.envs.ale_jax``.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from labcore.envs import atari


def check_env_id(env_id: str) -> None:
    """Raise ValueError unless gymnasium knows ``env_id`` (after registering ALE)."""
    if atari.is_atari_id(env_id):
        atari.register()
    if env_id not in gym.registry:
        close = [name for name in gym.registry if env_id.split("/")[-1].split("-")[0].lower() in name.lower()][:5]
        hint = f"; similar ids: {', '.join(close)}" if close else ""
        raise ValueError(f"unknown environment id {env_id!r}{hint}")


def make_single_env(env_id: str, *, seed: int | None = None) -> gym.Env:
    """One gymnasium env with episode statistics (Atari ids: ``make_vector_env``, ALE's vector env)."""
    check_env_id(env_id)
    if atari.is_atari_id(env_id):
        raise ValueError(f"{env_id!r} is an Atari id: make_vector_env plays it through ALE's vector env")
    env = gym.wrappers.RecordEpisodeStatistics(gym.make(env_id))
    if seed is not None:
        env.reset(seed=seed)
        env.action_space.seed(seed)
    if not isinstance(env.action_space, gym.spaces.Discrete):
        env.close()
        raise ValueError(
            f"{env_id!r} has a {type(env.action_space).__name__} action space; DQN needs a Discrete one "
            "(one Q-value per action)"
        )
    return env


def make_vector_env(
    env_id: str, num_envs: int = 1, *, seed: int = 0, training: bool = True, **atari_kwargs: Any
) -> gym.vector.SyncVectorEnv | Any:
    """``num_envs`` envs stepped in lock-step, auto-resetting in the same step.

    A finished env's last observation is ``info["final_obs"][i]`` and its score
    ``info["final_info"]["episode"]["r"][i]``; env ``i`` is seeded with ``seed + i``. Atari ids play
    through ALE's vector env with the Nature preprocessing (``labcore.envs.ale_vector.AtariVector``:
    the same interface, a lost life in ``info["life_lost"]``, every game seeded); ``atari_kwargs``
    are ``AtariSettings`` fields (repeat_action_probability, max_episode_steps, ...), and
    training=False keeps the rewards unclipped (the score counts the game's points either way).
    """
    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    if atari.is_atari_id(env_id):
        from labcore.envs import ale_vector

        settings = ale_vector.AtariSettings(env_id, num_envs=num_envs, **atari_kwargs)
        vector = ale_vector.AtariVector(settings, seed=seed, clip_rewards=training)
        vector.reset(seed=seed)
        return vector
    make_single_env(env_id).close()  # validate before building N
    envs = gym.vector.SyncVectorEnv(
        [lambda: make_single_env(env_id) for _ in range(num_envs)],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    envs.reset(seed=[seed + i for i in range(num_envs)])
    envs.action_space.seed(seed)
    return envs


def final_observations(next_obs: np.ndarray, done: np.ndarray, info: dict[str, Any]) -> np.ndarray:
    """A ``make_vector_env`` step's true next observations [N, ...]: for the envs that just finished
    (``done`` [N] bool), the episode's last one (``info["final_obs"]``) rather than the reset's."""
    if not done.any():
        return next_obs
    real = next_obs.copy()
    for i in np.flatnonzero(done):
        real[i] = info["final_obs"][i]
    return real


def finished_episodes(done: np.ndarray, info: dict[str, Any]) -> list[tuple[int, float, int]]:
    """(env index, game score, length) of each env of a ``make_vector_env`` step that finished."""
    if not done.any():
        return []
    stats = info["final_info"]["episode"]
    return [(int(i), float(stats["r"][i]), int(stats["l"][i])) for i in np.flatnonzero(done)]


def lives_lost(info: dict[str, Any], num_envs: int) -> np.ndarray:
    """[N] bool: the envs of a ``make_vector_env`` step that lost a life (only Atari games have lives)."""
    return np.asarray(info.get("life_lost", np.zeros(num_envs, bool)), bool)


def vector_env_around(restored: list[gym.Env] | Any) -> gym.vector.SyncVectorEnv | Any:
    """A ``make_vector_env`` env around envs already running (unpickled from a checkpoint), without a reset:
    gymnasium envs in a list are wrapped again; ALE's vector env (``ale_vector.AtariVector``) comes back whole."""
    if not isinstance(restored, list):
        return restored
    return gym.vector.SyncVectorEnv(
        [lambda env=env: env for env in restored], autoreset_mode=gym.vector.AutoresetMode.SAME_STEP
    )


def make_jax_env(env_id: str) -> tuple[Any, Any]:
    """A pure-JAX gymnax env and its default params, for loops that run entirely under ``jit``.

    ``env.step(key, state, action, params) -> (obs, state, reward, terminated, truncated, info)``
    resets by itself when an episode ends; ``info["final_observation"]`` is the observation the
    episode ended on. Raises ValueError for unknown ids and non-discrete action spaces.
    """
    import gymnax
    from gymnax.environments import spaces

    if env_id not in gymnax.registered_envs:
        stem = env_id.split("-")[0].lower()
        close = [name for name in gymnax.registered_envs if stem in name.lower()][:5]
        hint = f"; similar ids: {', '.join(close)}" if close else ""
        raise ValueError(f"unknown gymnax environment id {env_id!r}{hint}")
    env, env_params = gymnax.make(env_id)
    if not isinstance(env.action_space(env_params), spaces.Discrete):
        raise ValueError(f"{env_id!r} has a {type(env.action_space(env_params)).__name__} action space; DQN needs a Discrete one")
    return env, env_params


def env_and_params(env: Any, env_params: Any, env_id: str, make: Callable[[str], tuple[Any, Any]],
                   field: str) -> tuple[Any, Any]:
    """(env, env_params) a jitted driver runs: ``env`` if given, else ``make(env_id)``'s
    (``make_jax_env`` or ``make_masked_env``); ``env_params`` if given, else that env's defaults.

    An id ``make`` refuses raises ValueError naming ``field``, the config field it came from
    ("PPOConfig.env_id"), before anything is traced.
    """
    if env is None:
        try:
            env, default_params = make(env_id)
        except ValueError as err:
            raise ValueError(f"{field}: {err}") from None
        return env, default_params if env_params is None else env_params
    return env, env.default_params if env_params is None else env_params


MASKED_ENVS = ("Vault-v0", "HyperGrid-v0")  # labcore's own masked games (labcore.envs.vault, labcore.envs.hypergrid)


def _masked_game(env_id: str) -> Any:
    """A fresh env of one of MASKED_ENVS (imported here, so ``import labcore.envs`` stays light)."""
    if env_id == "Vault-v0":
        from labcore.envs.vault import Vault

        return Vault()
    from labcore.envs.hypergrid_env import HyperGridEnv

    return HyperGridEnv()


def make_masked_env(env_id: str) -> tuple[Any, Any]:
    """A masked env (labcore.envs.wrappers interface) with flat observations and episode stats.

    'Vault-v0' is labcore's masked grid game; 'HyperGrid-v0' is the GFlowNet benchmark (8 x 8)
    with one trajectory an episode; any gymnax id with a Discrete action space (CartPole-v1,
    Acrobot-v1, ...) runs with an all-valid mask. Returns (env, default params).
    """
    from labcore.envs import wrappers

    if env_id in MASKED_ENVS:
        base = _masked_game(env_id)
        return wrappers.LogEpisodeStats(wrappers.FlattenObservation(base)), base.default_params
    try:
        base, params = make_jax_env(env_id)
    except ValueError as err:
        raise ValueError(f"{err}; labcore's masked games: {', '.join(MASKED_ENVS)}") from None
    return wrappers.LogEpisodeStats(wrappers.FlattenObservation(wrappers.AllValidMask(base))), params
