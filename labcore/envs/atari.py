"""Atari through gymnasium and ale-py, with the Nature DQN preprocessing.

    env = make_atari("ALE/Breakout-v5", seed=0)            # one env, obs [4, 84, 84] uint8
    envs = make_atari_vector("ALE/Breakout-v5", 8, seed=0)  # 8 envs, obs [8, 4, 84, 84] uint8

The pipeline, in the order the wrappers apply it to what the game emits:

1. the base env with ``frameskip=1``: AtariPreprocessing does its own frame skipping, and
   takes the max of the last two raw frames of each skip (Atari sprites flicker);
2. ``AtariPreprocessing``: up to 30 no-op actions after each reset, action repeat 4,
   84x84 grayscale, uint8;
3. ``RecordEpisodeStatistics``: the *game* score and length (before reward clipping),
   reported in ``info["episode"]`` when the game ends;
4. ``LifeLossInfo``: ``info["life_lost"]`` is True on the step a life is lost. The game goes
   on (the env is not reset); a training loop treats the transition as terminal for
   bootstrapping, an evaluation loop ignores it. This is the Nature "life loss as terminal
   for training only", without the full resets that ``terminal_on_life_loss=True`` does;
5. ``ClipReward`` to [-1, 1] (training only; evaluation reports the game score anyway);
6. ``FrameStackObservation(4)``: the last 4 frames, [4, 84, 84]; at a reset the stack is
   padded with copies of the first frame (``padding_type="reset"``), which is what
   ``labcore.agents.dqn.frame_replay`` rebuilds at sample time.

``ALE/*-v5`` ids use sticky actions (the previous action repeats with probability 0.25);
``repeat_action_probability=0.0`` turns that off.
"""

from __future__ import annotations

from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np

FRAME_SHAPE = (84, 84)
FRAME_STACK = 4


def register() -> None:
    """Register the ALE environments with gymnasium (idempotent). ale-py ships the ROMs."""
    import ale_py

    gym.register_envs(ale_py)


def is_atari_id(env_id: str) -> bool:
    """Whether ``env_id`` names an ALE environment (``ALE/Breakout-v5`` style)."""
    return env_id.startswith("ALE/")


class LifeLossInfo(gym.Wrapper):
    """Adds ``info["life_lost"]``: True on the step the ALE life counter went down.

    Never ends the episode itself: whether a lost life is a terminal transition is the
    learner's choice (terminal for training, not for evaluation).
    """

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self._lives = 0

    def reset(self, **kwargs: Any):
        obs, info = self.env.reset(**kwargs)
        self._lives = self.env.unwrapped.ale.lives()
        info["life_lost"] = False
        return obs, info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        lives = self.env.unwrapped.ale.lives()
        info["life_lost"] = lives < self._lives
        self._lives = lives
        return obs, reward, terminated, truncated, info


class ClipReward(gym.RewardWrapper):
    """Rewards clipped to [-1, 1], so one learning rate suits every game (Nature DQN)."""

    def reward(self, reward: SupportsFloat) -> float:
        return float(np.clip(reward, -1.0, 1.0))


def make_atari(
    env_id: str = "ALE/Breakout-v5",
    *,
    seed: int | None = None,
    clip_rewards: bool = True,
    noop_max: int = 30,
    frame_skip: int = 4,
    repeat_action_probability: float = 0.25,
    max_episode_steps: int | None = 27_000,
    render_mode: str | None = None,
) -> gym.Env:
    """One Atari env with the Nature preprocessing: obs [4, 84, 84] uint8, Discrete actions.

    max_episode_steps: agent steps before truncation (27,000 = 108,000 frames = 30 minutes
    of play, the usual cap); None keeps ALE's own limit.
    """
    if not is_atari_id(env_id):
        raise ValueError(f"make_atari needs an ALE id such as 'ALE/Breakout-v5', got {env_id!r}")
    register()
    env = gym.make(
        env_id,
        frameskip=1,
        repeat_action_probability=repeat_action_probability,
        full_action_space=False,
        render_mode=render_mode,
        max_num_frames_per_episode=None if max_episode_steps is None else max_episode_steps * frame_skip,
    )
    env = gym.wrappers.AtariPreprocessing(
        env, noop_max=noop_max, frame_skip=frame_skip, screen_size=FRAME_SHAPE[0], grayscale_obs=True, scale_obs=False
    )
    env = gym.wrappers.RecordEpisodeStatistics(env)
    env = LifeLossInfo(env)
    if clip_rewards:
        env = ClipReward(env)
    env = gym.wrappers.FrameStackObservation(env, FRAME_STACK, padding_type="reset")
    if seed is not None:
        env.reset(seed=seed)
        env.action_space.seed(seed)
    return env


def make_atari_vector(
    env_id: str = "ALE/Breakout-v5", num_envs: int = 8, *, seed: int = 0, asynchronous: bool = False, **kwargs: Any
) -> gym.vector.VectorEnv:
    """``num_envs`` Atari envs stepped together: obs [num_envs, 4, 84, 84] uint8.

    Auto-reset happens in the same step (``AutoresetMode.SAME_STEP``): a finished env's last
    observation is in ``info["final_obs"]`` and the returned one already starts the next game,
    so every step yields a usable transition. ``asynchronous=True`` runs each env in its own
    process (worth it when the emulator, not the learner, is the bottleneck).
    Env ``i`` is seeded with ``seed + i``; other keyword arguments go to ``make_atari``.
    """
    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    register()
    factories = [lambda: make_atari(env_id, **kwargs) for _ in range(num_envs)]
    vector_cls = gym.vector.AsyncVectorEnv if asynchronous else gym.vector.SyncVectorEnv
    envs = vector_cls(factories, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    envs.reset(seed=[seed + i for i in range(num_envs)])
    envs.action_space.seed(seed)
    return envs
