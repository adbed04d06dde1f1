"""DQN on gymnasium environments: the host training loop, greedy evaluation, checkpoints.

The environment runs in Python; everything else is two compiled functions
(``labcore.agents.dqn.host_parts``): ``act`` (epsilon-greedy with the scheduled epsilon) and ``learn``
(store a chunk of transitions and apply the updates that fell due while they were collected). The
host steps the envs, collects ``train_frequency`` agent steps of transitions in numpy
(``host_parts.Chunk``), then makes one ``learn`` call: an update happens every ``train_frequency``
steps anyway, so one call per update replaces one call per agent step. Since an update only ever
falls due at the end of a chunk, this is the same algorithm as storing every step at once. PRNG keys
are ``fold_in(key, step)``, so a run is a pure function of its seed, however it is chunked.

    result = train(DQNConfig(env_id="CartPole-v1", total_steps=50_000), "runs/cartpole")
    scores = play(result.config, params(result.state), episodes=20)          # each game's score
    print(evaluate(result.config, params(result.state), seed=0))             # {"eval_return_mean": ...}

A run directory (``labcore.runs.RunDir``) holds ``config.json``, ``metrics.jsonl`` / ``metrics.csv``
(rows with the "update" and "timesteps", agent steps; TensorBoard event files of the same rows,
at their agent step), ``checkpoints/`` (by agent step), ``summary.json`` (``labcore.training_run``:
the entries every driver writes, then "episodes" and the evaluation's) and ``metrics.png``;
``train`` with ``resume=True`` continues from the newest checkpoint there, drops the rows logged
after it (they are logged again), and, when the replay buffer and the environments were saved with
it, continues exactly as if never stopped (``labcore.agents.dqn.host_checkpoints``: what a checkpoint holds).

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
import time
from collections import deque
from typing import Any

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np

from labcore import checkpoint, envs, training_run
from labcore.agents.dqn import core as dqn
from labcore.agents.dqn import host_checkpoints
from labcore.agents.dqn.agent import DQN
from labcore.agents.dqn.config import HOST_LOOP
from labcore.agents.dqn.host_checkpoints import ALGORITHM, LoopState, checkpoint_template
from labcore.agents.dqn.host_parts import make_agent, make_parts, open_envs, updates_due
from labcore.training_run import TrainingRun

PLOTTED = ("episode_return", "loss", "epsilon")
EVAL_SEED = 10_000  # the evaluation at the end of train: its envs seeded apart from training's


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
    parts = make_parts(config)  # fails early on a bad env
    act, learn, chunk, steps_per_chunk = parts.act, parts.learn, parts.chunk, parts.steps_per_chunk
    log_steps = log_every * config.train_frequency  # agent steps
    checkpoint_steps = None if checkpoint_every is None else checkpoint_every * config.train_frequency
    end_step = config.total_steps if stop_at is None else min(stop_at, config.total_steps)
    # Ordered by agent step: the checkpoints are numbered by agent step, and a resume cuts the rows at one.
    host = TrainingRun.open(run_dir, config, name=f"DQN on {config.env_id}", total_steps=end_step, plotted=PLOTTED,
                            shown={"ret": "episode_return", "eps": "epsilon"}, step_key="timesteps", resume=resume,
                            overwrite=overwrite, tensorboard=tensorboard, progress=progress)
    run = host.folder
    vector_env = None
    try:
        state, vector_env = host_checkpoints.start(config, parts.agent, run if resume else None)
        train_state, replay_state, key, obs = state.train_state, state.replay, state.key, state.obs
        step, episode_returns, metrics = state.step, state.episode_returns, state.metrics
        act_key, learn_key = jax.random.split(key)
        chunk_start = step

        recent = deque(episode_returns[-20:], maxlen=20)
        host.start(steps=step)
        started, last_log_time, last_log_step = time.perf_counter(), time.perf_counter(), step

        while step < end_step:
            actions = np.asarray(act(train_state.params, obs, step, act_key))
            next_obs, reward, terminated, truncated, info = vector_env.step(actions)
            done = terminated | truncated
            if parts.life_loss_terminal:  # a lost life ends the learner's episode (the game goes on)
                terminated = terminated | envs.lives_lost(info, config.num_envs)
            chunk.put(obs, actions, reward, envs.final_observations(next_obs, done, info), terminated, done)
            obs, step = next_obs, step + config.num_envs
            for _env, score, _length in envs.finished_episodes(done, info):
                episode_returns.append(score)
                recent.append(score)
            host.advance(step)
            if step % steps_per_chunk and step < end_step:
                continue

            # End of a chunk: store it and apply the updates that fell due while collecting it.
            num_updates = updates_due(chunk_start, step, config)
            train_state, replay_state, update_metrics = learn(
                train_state, replay_state, *chunk.take(), step, learn_key, num_updates=num_updates
            )
            if num_updates:
                metrics = update_metrics
            chunk_start = step

            if step // log_steps > last_log_step // log_steps or step >= end_step:
                now = time.perf_counter()
                row = {
                    "episodes": len(episode_returns),
                    "episode_return": float(np.mean(recent)) if recent else None,
                    "epsilon": float(dqn.linear_epsilon(step, config)),
                    "steps_per_second": (step - last_log_step) / max(now - last_log_time, 1e-9),
                    "time": state.elapsed_s + now - started,  # a resumed run's clock goes on from its checkpoint
                }
                if metrics is not None:
                    row.update({name: float(value) for name, value in metrics.items()})
                host.log(step // config.train_frequency, row, steps=step)
                last_log_time, last_log_step = now, step
            passed_a_checkpoint_step = (checkpoint_steps is not None
                                        and step // checkpoint_steps > (step - steps_per_chunk) // checkpoint_steps)
            if run.checkpoints is not None and (step >= end_step or passed_a_checkpoint_step):
                now_state = LoopState(train_state, replay_state, key, obs, step, episode_returns, metrics,
                                      state.elapsed_s + time.perf_counter() - started)
                host_checkpoints.save(run.checkpoints, config, now_state, vector_env, save_replay)
    except BaseException:  # a refused resume, an error mid-run: the bar and the metrics files close too
        host.close()
        raise
    finally:
        if vector_env is not None:
            vector_env.close()
    host.stop()
    finished = step >= config.total_steps  # not a run cut short by stop_at: its parameters are half-trained
    evaluation = (_summary(play(config, train_state.params, seed=EVAL_SEED, agent=parts.agent), config.eval_epsilon)
                  if evaluate and finished else {})
    return host.finish(train_state, updates=step // config.train_frequency, steps=step,
                       extra={"episodes": len(episode_returns)}, evaluation=evaluation)


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
    agent: DQN | None = None,
) -> list[float]:
    """Game scores of ``episodes`` episodes with epsilon-greedy actions and no learning.

    Defaults come from the config (eval_episodes, eval_epsilon). Atari rewards are not
    clipped and a lost life does not end the episode: the score is the whole game's.
    Episodes are spread over ``num_envs`` envs (default: up to 8), each running its share to
    the end, so short episodes are not favoured. max_episode_steps caps an Atari game's
    length (default 27,000 agent steps), e.g. for an untrained agent that never serves. agent: the
    run's (``make_agent(config)``, made here if not given).
    """
    episodes = config.eval_episodes if episodes is None else episodes
    epsilon = config.eval_epsilon if epsilon is None else epsilon
    num_envs = min(episodes, 8) if num_envs is None else num_envs
    act = (make_agent(config) if agent is None else agent).act
    policy = jax.jit(lambda p, o, step, k: act(p, o, epsilon, jax.random.fold_in(k, step)))
    vector_env = open_envs(config, num_envs, seed=seed, training=False, max_episode_steps=max_episode_steps)
    quota = np.array([episodes // num_envs + (i < episodes % num_envs) for i in range(num_envs)])
    scores: list[list[float]] = [[] for _ in range(num_envs)]
    obs, _ = vector_env.reset(seed=[seed + i for i in range(num_envs)])
    key = jax.random.key(seed)
    for step in range(max_steps):
        obs, _, terminated, truncated, info = vector_env.step(np.asarray(policy(params, obs, step, key)))
        for i, score, _length in envs.finished_episodes(terminated | truncated, info):
            if len(scores[i]) < quota[i]:
                scores[i].append(score)
        if all(len(s) >= q for s, q in zip(scores, quota)):
            break
    else:
        raise RuntimeError(f"evaluation did not finish {episodes} episodes within {max_steps} steps")
    vector_env.close()
    return [score for env_scores in scores for score in env_scores]
