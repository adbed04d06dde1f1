"""The DQN host loop's state (``labcore.agents.dqn.host_loop``) and its checkpoints: the state a run starts
from (``start``: a new one, or a resume's, restored from the run's newest checkpoint), what a checkpoint holds,
and its save.

A checkpoint holds the learner (``train_state``), the key, the envs' observations and, with
``save_replay``, the replay buffer and the pickled envs (a resume then continues exactly); the loop's
counters (step, episode returns, the last update's metrics, the clock) are its metadata.
"""

from __future__ import annotations

import pickle
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from labcore import checkpoint, envs, runs
from labcore.agents.dqn import core as dqn
from labcore.agents.dqn.agent import DQN
from labcore.agents.dqn.config import HOST_LOOP_NAME as ALGORITHM  # the registry name its checkpoints record
from labcore.agents.dqn.host_parts import env_spec, make_agent, open_envs

DRIVER = "labcore.agents.dqn.host_loop"  # the module whose runs write them (the schema's "driver")


class LoopState(NamedTuple):
    """Where the host loop is: what a checkpoint saves and a resume restores (the envs aside)."""

    train_state: dqn.TrainState
    replay: Any  # the replay buffer's state (the agent's ``buffer``)
    key: jax.Array  # the base of every act and learn key
    obs: np.ndarray  # [N, *obs_shape] the envs' current observations
    step: int  # agent steps taken
    episode_returns: list[float]  # every finished game's score, in order
    metrics: dict[str, Any] | None  # the last update's (None before the first)
    elapsed_s: float  # the run's clock, earlier calls' included


def start(config: dqn.DQNConfig, agent: DQN, run: runs.RunDir | None = None) -> tuple[LoopState, Any]:
    """(the loop's state, its envs) where ``train`` starts. Without ``run``, a new run's: a fresh learner
    (``agent.init``), an empty replay buffer, the envs' first observations. With ``run`` (a resume's folder), its
    newest intact checkpoint's (``restore``): the saved envs as they were, so the run continues exactly, or, where
    the checkpoint saved none, new episodes seeded apart from the run's first ones."""
    init_key, key = jax.random.split(jax.random.key(config.seed))  # key: the base of every act/learn key
    vector_env = open_envs(config, config.num_envs, seed=config.seed)
    try:
        obs, _ = vector_env.reset(seed=[config.seed + i for i in range(config.num_envs)])
        state = LoopState(train_state=agent.init(init_key), replay=agent.buffer.init(agent.example), key=key,
                          obs=obs, step=0, episode_returns=[], metrics=None, elapsed_s=0.0)
        if run is None:
            return state, vector_env
        state, saved_envs = restore(run, config, agent, state)
        if saved_envs is None:  # new episodes, seeded apart from the run's first ones
            obs, _ = vector_env.reset(seed=[config.seed + state.step + i for i in range(config.num_envs)])
            return state._replace(obs=obs), vector_env
    except BaseException:
        vector_env.close()
        raise
    vector_env.close()  # the checkpoint's envs instead, as they were: the run continues exactly
    return state, envs.vector_env_around(saved_envs)


def save(directory, config: dqn.DQNConfig, state: LoopState, vector_env: Any, save_replay: bool) -> None:
    """Checkpoint ``state.step``: the learner, the key, the observations, and (save_replay) the replay buffer
    and the pickled envs; the loop's counters and last update metrics as metadata."""
    saved = {"train_state": state.train_state, "key": jax.random.key_data(state.key), "obs": state.obs}
    env_bytes = None
    if save_replay:
        saved["replay"] = state.replay
        try:  # gymnasium's envs, or ALE's vector env as its games' seeds and actions (replayed on load)
            env_bytes = pickle.dumps(getattr(vector_env, "envs", vector_env))
        except Exception as error:  # an env whose state cannot be pickled resumes from a reset
            warnings.warn(f"environment state not saved ({error}); a resume starts new episodes", stacklevel=3)
    if env_bytes is not None:
        saved["envs"] = np.frombuffer(env_bytes, np.uint8)
    checkpoint.save_run(
        directory, state.step, saved, algorithm=ALGORITHM, driver=DRIVER, config=config,
        episode_returns=state.episode_returns,
        last_metrics=None if state.metrics is None else {name: float(value) for name, value in state.metrics.items()},
        elapsed_s=state.elapsed_s,
        has_replay=save_replay,
        has_envs=env_bytes is not None,
        envs_bytes=0 if env_bytes is None else len(env_bytes),
    )


def checkpoint_template(config: dqn.DQNConfig, train_state: Any = None, *, agent: DQN | None = None,
                        obs: np.ndarray | None = None) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """What a checkpoint of this loop holds, as a function of its metadata (whether it saved the
    replay buffer and the envs): the template ``labcore.checkpoint.restore`` fills. train_state:
    a train state to take the parameters' shapes from (default: a fresh one); agent: the run's
    (``host_parts.make_agent``); obs: [num_envs, ...] observations as the envs give them, for their
    shape and dtype. Without ``agent`` and ``obs`` the env is opened once to read its spaces."""
    if agent is None or obs is None:
        spec = env_spec(config)
        agent = make_agent(config, spec) if agent is None else agent
        obs = np.zeros((config.num_envs, *spec[0]), spec[1]) if obs is None else obs
    train_state = agent.init(jax.random.key(0)) if train_state is None else train_state

    def like(metadata: dict[str, Any]) -> dict[str, Any]:
        saved = {"train_state": train_state, "key": np.zeros(2, np.uint32), "obs": np.zeros_like(obs)}
        if metadata["has_replay"]:
            saved["replay"] = jax.eval_shape(lambda: agent.buffer.init(agent.example))
        if metadata["has_envs"]:
            saved["envs"] = np.zeros(metadata["envs_bytes"], np.uint8)
        return saved

    return like


def restore(run: runs.RunDir, config: dqn.DQNConfig, agent: DQN, fresh: LoopState) -> tuple[LoopState, Any]:
    """(the loop's state at the run's newest intact checkpoint, its unpickled envs or None). ``agent``: the run's;
    ``fresh``: the state of a new run, whose replay buffer stays where the checkpoint saved none (RunDir.open has
    checked the config; a checkpoint of another algorithm is refused here, before its arrays are read)."""
    like = checkpoint.expecting(ALGORITHM, run.path, checkpoint_template(config, fresh.train_state, agent=agent, obs=fresh.obs))
    saved, metadata = run.restore(like).restored
    state = LoopState(
        train_state=jax.tree_util.tree_map(jnp.asarray, saved["train_state"]),
        replay=jax.tree_util.tree_map(jnp.asarray, saved["replay"]) if metadata["has_replay"] else fresh.replay,
        key=jax.random.wrap_key_data(jnp.asarray(saved["key"])),
        obs=np.asarray(saved["obs"]),
        step=int(metadata["step"]),
        episode_returns=list(metadata["episode_returns"]),
        metrics=metadata.get("last_metrics"),
        elapsed_s=float(metadata.get("elapsed_s", 0.0)),
    )
    return state, pickle.loads(np.asarray(saved["envs"]).tobytes()) if metadata["has_envs"] else None
