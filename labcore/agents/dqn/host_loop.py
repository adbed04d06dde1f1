"""DQN on gymnasium environments: the host training loop, greedy evaluation, checkpoints.

The environment runs in Python; everything else is two compiled functions:

* ``act(params, obs, step, key) -> actions``: epsilon-greedy with the scheduled epsilon;
* ``learn(train_state, replay, chunk, episode_end, step, key, num_updates)``: store a chunk
  of transitions and apply the updates that fell due while they were collected.

Both are pure and jitted once; ``learn`` donates its inputs, so the replay buffer (7 GB for
a million Atari frames) is updated in place. The host steps the envs, collects
``train_frequency`` agent steps of transitions in numpy, then makes one ``learn`` call: an
update happens every ``train_frequency`` steps anyway, so one call per update replaces one
call per agent step. Since an update only ever falls due at the end of a chunk, this is the
same algorithm as storing every step at once. PRNG keys are
``fold_in(key, step)``, so a run is a pure function of its seed, however it is chunked.

    result = train(DQNConfig(env_id="CartPole-v1", total_steps=50_000), "runs/cartpole")
    scores = play(result.config, params(result.state), episodes=20)          # each game's score
    print(evaluate(result.config, params(result.state), seed=0))             # {"eval_return_mean": ...}

A run directory (``labcore.runs.RunDir``) holds ``config.json``, ``metrics.jsonl`` / ``metrics.csv``
(rows with the "update" and "timesteps", agent steps; TensorBoard event files of the same rows,
at their agent step), ``checkpoints/`` (by agent step), ``summary.json`` (``labcore.training_run``:
the entries every driver writes, then "episodes" and the evaluation's) and ``metrics.png``;
``train`` with ``resume=True`` continues from the newest checkpoint there, drops the rows logged
after it (they are logged again), and, when the replay buffer and the environments were saved with
it, continues exactly as if never stopped.

Why this driver keeps a loop of its own instead of ``labcore.loop.train``: that driver runs a pure
``run(state, n)`` compiled whole, and a gymnasium env is a Python object stepped on the host: a
compiled program reaches one only through a callback per step (``labcore.envs.ale_jax`` does that
for ALE's vector env, where its XLA calls are not available). It uses the same pieces as the shared
driver: ``labcore.training_run.TrainingRun`` (run folder, progress bar, rows, resume from the newest intact
checkpoint, summary, plot), ``labcore.checkpoint``, and returns its result type,
``labcore.training_run.RunResult`` (``state`` is the final ``TrainState``).
"""

from __future__ import annotations

import os
import pickle
import time
import warnings
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import Any

import gymnasium as gym
import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np

from labcore import checkpoint, envs, replay, runs, training_run
from labcore.agents.dqn import frame_replay
from labcore.agents.dqn import core as dqn
from labcore.agents.dqn.agent import DQN, make_dqn
from labcore.agents.dqn.config import HOST_LOOP
from labcore.agents.dqn.config import HOST_LOOP_NAME as ALGORITHM  # the registry name its checkpoints record
from labcore.training_run import TrainingRun

PLOTTED = ("episode_return", "loss", "epsilon")
EVAL_SEED = 10_000  # the evaluation at the end of train: its envs seeded apart from training's


def env_spec(config: dqn.DQNConfig) -> tuple[tuple[int, ...], np.dtype, int]:
    """(observation shape, dtype, number of actions), checked before anything is built.

    Raises ValueError for an unknown env id or a non-Discrete action space.
    """
    env = envs.make_vector_env(config.env_id, 1, **_atari_kwargs(config))
    space = env.single_observation_space
    shape, dtype, num_actions = space.shape, space.dtype, int(env.single_action_space.n)
    env.close()
    if config.network == "nature_cnn" and len(shape) != 3:
        raise ValueError(f"DQNConfig.network 'nature_cnn' needs stacked frames, but {config.env_id} observes {shape}")
    if config.network == "mlp" and len(shape) != 1:
        raise ValueError(f"DQNConfig.network 'mlp' needs vector observations, but {config.env_id} observes {shape}")
    return shape, dtype, num_actions


def _atari_kwargs(config: dqn.DQNConfig) -> dict[str, Any]:
    if envs.atari.is_atari_id(config.env_id):
        return {"repeat_action_probability": config.repeat_action_probability}
    return {}


def make_agent(config: dqn.DQNConfig) -> DQN:
    """DQN's functions (``labcore.agents.dqn.agent.make_dqn``) for the gymnasium env ``config.env_id``."""
    obs_shape, obs_dtype, num_actions = env_spec(config)
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
    buffer = make_buffer(config)

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


def make_buffer(config: dqn.DQNConfig) -> replay.Buffer:
    """The run's replay buffer (one interface, ``labcore.replay.Buffer``): Atari frames stored once
    (``replay_storage="frames"``), or whole transitions."""
    if config.replay_storage == "frames":  # ALE's vector env pads a new game's stack with zeros
        return frame_replay.frame_buffer(config.buffer_size, config.batch_size, padding="zero")
    return replay.uniform_buffer(config.buffer_size, config.batch_size)


def init_replay(config: dqn.DQNConfig, obs_shape, obs_dtype):
    """An empty replay buffer of the run (``make_buffer``) for observations of this shape and type."""
    example = dqn.Transition(
        obs=np.zeros(obs_shape, obs_dtype),
        action=np.int32(0),
        reward=np.float32(0),
        next_obs=np.zeros(obs_shape, obs_dtype),
        terminated=np.bool_(False),
    )
    return make_buffer(config).init(example)


def _empty_chunk(rows: int, num_envs: int, obs_shape, obs_dtype) -> tuple[dqn.Transition, np.ndarray]:
    """Host arrays for ``rows`` env steps of ``num_envs`` envs: a Transition [rows, N, ...] and episode ends [rows, N]."""
    transition = dqn.Transition(
        obs=np.empty((rows, num_envs, *obs_shape), obs_dtype),
        action=np.empty((rows, num_envs), np.int32),
        reward=np.empty((rows, num_envs), np.float32),
        next_obs=np.empty((rows, num_envs, *obs_shape), obs_dtype),
        terminated=np.empty((rows, num_envs), bool),
    )
    return transition, np.empty((rows, num_envs), bool)


def _updates_due(step_before: int, step_after: int, config: dqn.DQNConfig) -> int:
    """Updates owed for agent steps (step_before, step_after]: one per multiple of train_frequency."""
    if step_after <= config.learning_starts:
        return 0
    start = max(step_before, config.learning_starts)
    return step_after // config.train_frequency - start // config.train_frequency


def _final_observations(next_obs: np.ndarray, done: np.ndarray, info: dict) -> np.ndarray:
    """The true next observations: for envs that just finished, the last one before the reset."""
    if not done.any():
        return next_obs
    real = next_obs.copy()
    for i in np.flatnonzero(done):
        real[i] = info["final_obs"][i]
    return real


def _finished_episodes(done: np.ndarray, info: dict) -> list[tuple[float, int]]:
    """(game score, length) of each env that finished this step."""
    if not done.any():
        return []
    stats = info["final_info"]["episode"]
    return [(float(stats["r"][i]), int(stats["l"][i])) for i in np.flatnonzero(done)]


def _life_lost(info: dict, num_envs: int) -> np.ndarray:
    return np.asarray(info.get("life_lost", np.zeros(num_envs, bool)), bool)


def train(
    config: dqn.DQNConfig,
    run_dir: str | os.PathLike | None = None,
    *,
    log_every: int | None = None,
    checkpoint_every: int | None = None,
    save_replay: bool = HOST_LOOP.save_replay,
    resume: bool = False,
    stop_at: int | None = None,
    progress: bool = True,
    overwrite: bool = False,
    evaluate: bool = True,
    tensorboard: bool = True,
) -> training_run.RunResult:
    """Train a DQN agent on ``config.env_id`` for ``config.total_steps`` agent steps.

    run_dir: where metrics and checkpoints go (None: metrics in memory, no checkpoints).
    log_every: updates between metric rows, counted as on every driver (``labcore.loop``): one
      update is ``train_frequency`` agent steps and (past ``learning_starts``) one gradient step,
      so a row every ``log_every * train_frequency`` agent steps (default
      ``training_run.default_log_every`` of the run's ``total_steps // train_frequency`` updates: about 100
      rows). A row holds its "update" and "timesteps" (agent steps); the folder orders them, and a
      resume cuts them, by agent step, as the checkpoints are numbered.
    checkpoint_every: updates between checkpoints (None: only at the end, if run_dir).
    save_replay: include the replay buffer and the pickled envs in checkpoints, which makes a
      resumed run continue exactly; without them a resume refills the buffer from scratch.
    resume: continue from the newest checkpoint in ``run_dir/checkpoints`` (one must exist, written
      with the same config); the metrics rows logged after it are dropped and logged again.
    stop_at: stop after this many agent steps (and checkpoint), as if interrupted; the
      schedules still follow ``total_steps``.
    overwrite: replace an earlier run in ``run_dir`` (without it, or resume, one is refused).
    evaluate: end with ``evaluate`` of the final parameters (``config.eval_episodes`` games at
      ``config.eval_epsilon``, seed ``EVAL_SEED``), its entries into the summary: eval_episodes,
      eval_epsilon, eval_return_mean and eval_return_std (as the jitted DQN's), min and max.
    tensorboard: also write the metrics as TensorBoard event files in ``run_dir`` (labcore.runs).

    The summary (``labcore.training_run``): env, seeds, timesteps (agent steps), updates, compile_s
    (None: the loop compiles as it goes), run_s, steps_per_second, final_episode_return, then
    episodes and the evaluation's entries.
    """
    if log_every is None:
        log_every = training_run.default_log_every(config.total_steps // config.train_frequency)
    if log_every < 1:
        raise ValueError(f"log_every must be >= 1, got {log_every}")
    if checkpoint_every is not None and checkpoint_every < 1:
        raise ValueError(f"checkpoint_every must be >= 1 or None, got {checkpoint_every}")
    if (checkpoint_every is not None or resume) and run_dir is None:
        raise ValueError("checkpoints need a run_dir")
    log_steps = log_every * config.train_frequency  # agent steps
    checkpoint_steps = None if checkpoint_every is None else checkpoint_every * config.train_frequency
    obs_shape, obs_dtype, num_actions = env_spec(config)  # fails early on a bad env
    end_step = config.total_steps if stop_at is None else min(stop_at, config.total_steps)
    # Ordered by agent step: the checkpoints are numbered by agent step, and a resume cuts the rows at one.
    host = TrainingRun.open(run_dir, config, name=f"DQN on {config.env_id}", total_steps=end_step, plotted=PLOTTED,
                            shown={"ret": "episode_return", "eps": "epsilon"}, step_key="timesteps", resume=resume,
                            overwrite=overwrite, tensorboard=tensorboard, progress=progress)
    run = host.folder

    agent = make_dqn(config, num_actions=num_actions, obs_shape=obs_shape, obs_dtype=obs_dtype)
    act, learn = make_act(config, agent), make_learn(config, agent)

    init_key, key = jax.random.split(jax.random.key(config.seed))  # key: the base of every act/learn key
    train_state = agent.init(init_key)
    replay_state = init_replay(config, obs_shape, obs_dtype)
    vector_env = envs.make_vector_env(config.env_id, config.num_envs, seed=config.seed, **_atari_kwargs(config))
    obs, _ = vector_env.reset(seed=[config.seed + i for i in range(config.num_envs)])
    step, episode_returns, metrics, elapsed_before = 0, [], None, 0.0

    if resume:
        restored = _restore(run, config, train_state, replay_state)
        train_state, replay_state, key = restored["train_state"], restored["replay"], restored["key"]
        step, episode_returns, obs = restored["step"], restored["episode_returns"], restored["obs"]
        metrics, elapsed_before = restored["metrics"], restored["elapsed_s"]
        if restored["envs"] is not None:
            vector_env.close()
            vector_env = _vector_env_from(restored["envs"])
        else:
            obs, _ = vector_env.reset(seed=[config.seed + step + i for i in range(config.num_envs)])
    act_key, learn_key = jax.random.split(key)

    # Transitions wait on the host until an update is due: chunks end at multiples of
    # train_frequency agent steps (or every step when num_envs does not divide it).
    # Each chunk is written in place into fresh numpy arrays [rows, N, ...] (fresh, because the
    # arrays handed to `learn` must not change afterwards).
    steps_per_chunk = config.train_frequency if config.train_frequency % config.num_envs == 0 else config.num_envs
    chunk_rows = steps_per_chunk // config.num_envs
    chunk, chunk_ends = _empty_chunk(chunk_rows, config.num_envs, obs_shape, obs_dtype)
    chunk_row, chunk_start = 0, step

    recent = deque(episode_returns[-20:], maxlen=20)
    host.start(steps=step)
    started, last_log_time, last_log_step = time.perf_counter(), time.perf_counter(), step
    life_loss_terminal = config.life_loss_terminal and envs.atari.is_atari_id(config.env_id)

    while step < end_step:
        actions = np.asarray(act(train_state.params, obs, step, act_key))
        next_obs, reward, terminated, truncated, info = vector_env.step(actions)
        done = terminated | truncated
        chunk.obs[chunk_row] = obs
        chunk.action[chunk_row] = actions
        chunk.reward[chunk_row] = reward
        chunk.next_obs[chunk_row] = _final_observations(next_obs, done, info)
        chunk.terminated[chunk_row] = (terminated | _life_lost(info, config.num_envs)) if life_loss_terminal else terminated
        chunk_ends[chunk_row] = done
        obs, step, chunk_row = next_obs, step + config.num_envs, chunk_row + 1
        for score, _length in _finished_episodes(done, info):
            episode_returns.append(score)
            recent.append(score)
        host.advance(step)
        if step % steps_per_chunk and step < end_step:
            continue

        # End of a chunk: store it and apply the updates that fell due while collecting it.
        num_updates = _updates_due(chunk_start, step, config)
        if chunk_row < chunk_rows:  # a short chunk: after a resume, or at the end of the run
            chunk, chunk_ends = jax.tree_util.tree_map(lambda leaf: leaf[:chunk_row], (chunk, chunk_ends))
        train_state, replay_state, update_metrics = learn(
            train_state, replay_state, chunk, chunk_ends, step, learn_key, num_updates=num_updates
        )
        if num_updates:
            metrics = update_metrics
        chunk, chunk_ends = _empty_chunk(chunk_rows, config.num_envs, obs_shape, obs_dtype)
        chunk_row, chunk_start = 0, step

        if step // log_steps > last_log_step // log_steps or step >= end_step:
            now = time.perf_counter()
            row = {
                "episodes": len(episode_returns),
                "episode_return": float(np.mean(recent)) if recent else None,
                "epsilon": float(dqn.linear_epsilon(step, config)),
                "steps_per_second": (step - last_log_step) / max(now - last_log_time, 1e-9),
                "time": elapsed_before + now - started,  # a resumed run's clock goes on from its checkpoint
            }
            if metrics is not None:
                row.update({name: float(value) for name, value in metrics.items()})
            host.log(step // config.train_frequency, row, steps=step)
            last_log_time, last_log_step = now, step
        if run.checkpoints is not None and (
            step >= end_step or (checkpoint_steps is not None and step // checkpoint_steps > (step - steps_per_chunk) // checkpoint_steps)
        ):
            counters = {"step": step, "episode_returns": episode_returns, "metrics": metrics,
                        "elapsed_s": elapsed_before + time.perf_counter() - started}
            _save(run.checkpoints, config, counters, train_state, replay_state, key, obs, vector_env, save_replay)

    vector_env.close()
    host.stop()
    finished = step >= config.total_steps  # not a run cut short by stop_at: its parameters are half-trained
    evaluation = _summary(play(config, train_state.params, seed=EVAL_SEED), config.eval_epsilon) if evaluate and finished else {}
    return host.finish(train_state, updates=step // config.train_frequency, steps=step,
                       extra={"episodes": len(episode_returns)}, evaluation=evaluation)


def _save(directory, config, counters, train_state, replay_state, key, obs, vector_env, save_replay):
    """Checkpoint ``counters["step"]``: the learner, the key, the observations, and (save_replay) the
    replay buffer and the pickled envs; the loop's counters and last update metrics as metadata."""
    step = counters["step"]
    state = {"train_state": train_state, "key": jax.random.key_data(key), "obs": obs}
    env_bytes = None
    if save_replay:
        state["replay"] = replay_state
        try:  # gymnasium's envs, or ALE's vector env as its games' seeds and actions (replayed on load)
            env_bytes = pickle.dumps(getattr(vector_env, "envs", vector_env))
        except Exception as error:  # an env whose state cannot be pickled resumes from a reset
            warnings.warn(f"environment state not saved ({error}); a resume starts new episodes", stacklevel=3)
    if env_bytes is not None:
        state["envs"] = np.frombuffer(env_bytes, np.uint8)
    metrics = counters["metrics"]
    checkpoint.save_run(
        directory, step, state, algorithm=ALGORITHM, driver=__name__, config=config,
        episode_returns=counters["episode_returns"],
        last_metrics=None if metrics is None else {name: float(value) for name, value in metrics.items()},
        elapsed_s=counters["elapsed_s"],
        has_replay=save_replay,
        has_envs=env_bytes is not None,
        envs_bytes=0 if env_bytes is None else len(env_bytes),
    )


def checkpoint_template(config: dqn.DQNConfig, train_state: Any = None) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """What a checkpoint of this loop holds, as a function of its metadata (whether it saved the
    replay buffer and the envs): the template ``labcore.checkpoint.restore`` fills. train_state:
    a train state to take the parameters' shapes from (default: a fresh one)."""
    obs_shape, obs_dtype, num_actions = env_spec(config)
    if train_state is None:
        train_state = make_dqn(config, num_actions=num_actions, obs_shape=obs_shape, obs_dtype=obs_dtype).init(
            jax.random.key(0))

    def like(metadata: dict[str, Any]) -> dict[str, Any]:
        saved = {"train_state": train_state, "key": np.zeros(2, np.uint32),
                 "obs": np.zeros((config.num_envs, *obs_shape), obs_dtype)}
        if metadata["has_replay"]:
            saved["replay"] = jax.eval_shape(lambda: init_replay(config, obs_shape, obs_dtype))
        if metadata["has_envs"]:
            saved["envs"] = np.zeros(metadata["envs_bytes"], np.uint8)
        return saved

    return like


def _restore(run: runs.RunDir, config: dqn.DQNConfig, train_state, replay_state) -> dict[str, Any]:
    """The loop's state at the run's newest intact checkpoint (RunDir.open has checked its config;
    a checkpoint of another algorithm is refused here, before its arrays are read)."""
    like = checkpoint.expecting(ALGORITHM, run.path, checkpoint_template(config, train_state))
    state, metadata = run.restore(like).restored
    return {
        "train_state": jax.tree_util.tree_map(jnp.asarray, state["train_state"]),
        "replay": jax.tree_util.tree_map(jnp.asarray, state["replay"]) if metadata["has_replay"] else replay_state,
        "key": jax.random.wrap_key_data(jnp.asarray(state["key"])),
        "obs": np.asarray(state["obs"]),
        "step": int(metadata["step"]),
        "episode_returns": list(metadata["episode_returns"]),
        "metrics": metadata.get("last_metrics"),
        "elapsed_s": float(metadata.get("elapsed_s", 0.0)),
        "envs": pickle.loads(np.asarray(state["envs"]).tobytes()) if metadata["has_envs"] else None,
    }


def _vector_env_from(restored: list[gym.Env] | Any) -> gym.vector.SyncVectorEnv | Any:
    """A vector env around already-running envs (restored from a checkpoint): no reset. ALE's vector
    env (``labcore.envs.ale_vector.AtariVector``) comes back whole, its games replayed."""
    if not isinstance(restored, list):
        return restored
    return gym.vector.SyncVectorEnv(
        [lambda env=env: env for env in restored], autoreset_mode=gym.vector.AutoresetMode.SAME_STEP
    )


def load_checkpoint(path: str | os.PathLike, step: int | None = None) -> tuple[dqn.DQNConfig, dqn.TrainState]:
    """(config, train state) from a run directory or its ``checkpoints`` folder, for evaluation; a
    checkpoint of another algorithm is refused (``labcore.checkpoint.WrongCheckpoint``)."""
    directory, metadata, config = checkpoint.open_run(path, ALGORITHM, dqn.DQNConfig, step)
    state, _ = checkpoint.restore(directory, checkpoint_template(config)(metadata), step)
    return config, jax.tree_util.tree_map(jnp.asarray, state["train_state"])


def params(train_state: dqn.TrainState) -> hk.Params:
    """The Q-network's parameters in a state of ``train`` or ``load_checkpoint`` (both a ``TrainState``)."""
    return train_state.params


def evaluate(config: dqn.DQNConfig, params: hk.Params, seed: int = EVAL_SEED, *, episodes: int | None = None,
             epsilon: float | None = None, max_episode_steps: int | None = None) -> dict[str, Any]:
    """The trained policy's games (``play``, defaults from the config) as numbers: eval_episodes, eval_epsilon
    and the scores' mean, std, min and max (the entries ``train``'s summary ends with; the default seed is its)."""
    scores = play(config, params, episodes=episodes, epsilon=epsilon, seed=seed, max_episode_steps=max_episode_steps)
    return _summary(scores, config.eval_epsilon if epsilon is None else epsilon)


def _summary(scores: list[float], epsilon: float) -> dict[str, Any]:
    scores = np.asarray(scores)
    return {"eval_episodes": int(scores.size), "eval_epsilon": epsilon,
            "eval_return_mean": float(scores.mean()), "eval_return_std": float(scores.std()),
            "eval_return_min": float(scores.min()), "eval_return_max": float(scores.max())}


def play(
    config: dqn.DQNConfig,
    params: hk.Params,
    *,
    episodes: int | None = None,
    epsilon: float | None = None,
    seed: int = EVAL_SEED,
    num_envs: int | None = None,
    max_steps: int = 1_000_000,
    max_episode_steps: int | None = None,
) -> list[float]:
    """Game scores of ``episodes`` episodes with epsilon-greedy actions and no learning.

    Defaults come from the config (eval_episodes, eval_epsilon). Atari rewards are not
    clipped and a lost life does not end the episode: the score is the whole game's.
    Episodes are spread over ``num_envs`` envs (default: up to 8), each running its share to
    the end, so short episodes are not favoured. max_episode_steps caps an Atari game's
    length (default 27,000 agent steps), e.g. for an untrained agent that never serves.
    """
    episodes = config.eval_episodes if episodes is None else episodes
    epsilon = config.eval_epsilon if epsilon is None else epsilon
    num_envs = min(episodes, 8) if num_envs is None else num_envs
    act = make_agent(config).act
    policy = jax.jit(lambda p, o, step, k: act(p, o, epsilon, jax.random.fold_in(k, step)))
    env_kwargs = _atari_kwargs(config)
    if max_episode_steps is not None and env_kwargs:
        env_kwargs["max_episode_steps"] = max_episode_steps
    vector_env = envs.make_vector_env(config.env_id, num_envs, seed=seed, training=False, **env_kwargs)
    quota = np.array([episodes // num_envs + (i < episodes % num_envs) for i in range(num_envs)])
    scores: list[list[float]] = [[] for _ in range(num_envs)]
    obs, _ = vector_env.reset(seed=[seed + i for i in range(num_envs)])
    key = jax.random.key(seed)
    for step in range(max_steps):
        obs, _, terminated, truncated, info = vector_env.step(np.asarray(policy(params, obs, step, key)))
        done = terminated | truncated
        if done.any():
            stats = info["final_info"]["episode"]
            for i in np.flatnonzero(done):
                if len(scores[i]) < quota[i]:
                    scores[i].append(float(stats["r"][i]))
        if all(len(s) >= q for s, q in zip(scores, quota)):
            break
    else:
        raise RuntimeError(f"evaluation did not finish {episodes} episodes within {max_steps} steps")
    vector_env.close()
    return [score for env_scores in scores for score in env_scores]
