"""Atari through ALE's own vector environment, ``ale_py.AtariVectorEnv``: the games, their seeds, host loops.

ALE ships a vector environment written in C++: ``num_envs`` emulators stepped by a pool of threads,
with the Nature preprocessing done there too (max of the last two frames of each action repeat,
grayscale, 84x84 area resize, a stack of the last 4 frames padded with zeros after a reset, no-op
actions after a reset, FIRE after a reset in games whose action set has it, sticky actions). With sticky
actions, no-ops and FIRE off, it plays the same games as gymnasium's ``AtariPreprocessing`` +
``FrameStackObservation(padding_type="zero")`` (tests/test_ale_vector.py compares them). Here:

* ``AtariSettings``: how the games are played; ``make_vector_env``: ALE's vector env for them;
* ``AtariVector``: it behind gymnasium's vector interface, for host loops (the DQN host loop),
  every game reset by a seed of its own, picklable (a checkpoint replays its games);
* ``replay_games``: bring the emulators back to recorded games by replaying them;
* ``play_games``: whole-game scores of a policy (evaluation);
* ``labcore.envs.ale_jax``: the same games stepped from inside jitted programs (PQN).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

FRAME_STACK = 4
FRAME_SHAPE = (84, 84)


@dataclasses.dataclass(frozen=True)
class AtariSettings:
    """How ``num_envs`` Atari games are played, learned from and reported.

    env_id: an ALE id ('ALE/Breakout-v5'). repeat_action_probability: sticky actions.
    life_loss_terminal: a lost life is terminal for learning (``labcore.envs.ale_jax``). noop_max: ALE
    draws a number from 0 to noop_max - 1 at each reset and plays that many no-op actions, less one
    where it pressed FIRE (fire_reset: press FIRE once after a reset in games whose action set has it),
    so Breakout gets FIRE and 0 to 28 no-ops with the default 30.
    max_episode_steps: agent steps before a game is truncated (27,000 = 108,000 frames, 30 minutes of play).
    """

    env_id: str = "ALE/Breakout-v5"
    num_envs: int = 8
    repeat_action_probability: float = 0.25
    life_loss_terminal: bool = False
    noop_max: int = 30
    fire_reset: bool = True
    frame_skip: int = 4
    max_episode_steps: int = 27_000

    def __post_init__(self) -> None:
        if self.num_envs < 1:
            raise ValueError(f"AtariSettings.num_envs must be >= 1, got {self.num_envs}")
        if not 0.0 <= self.repeat_action_probability < 1.0:
            raise ValueError(f"AtariSettings.repeat_action_probability must be in [0, 1), got {self.repeat_action_probability}")
        game_of(self.env_id)  # an unknown id fails here, before any emulator starts

    @property
    def obs_shape(self) -> tuple[int, int, int]:
        return (FRAME_STACK, *FRAME_SHAPE)


def game_of(env_id: str) -> str:
    """The ROM name ALE's vector env takes ('breakout') for a gymnasium id ('ALE/Breakout-v5')."""
    from labcore.envs import atari

    if not atari.is_atari_id(env_id):
        raise ValueError(f"an ALE id such as 'ALE/Breakout-v5' is needed, got {env_id!r}")
    import gymnasium as gym

    atari.register()
    if env_id not in gym.registry:
        close = [name for name in gym.registry if name.startswith("ALE/") and env_id[4:].split("-")[0].lower() in name.lower()][:5]
        raise ValueError(f"unknown Atari id {env_id!r}" + (f"; similar ids: {', '.join(close)}" if close else ""))
    return gym.registry[env_id].kwargs["game"]


def make_vector_env(settings: AtariSettings, num_envs: int | None = None):
    """ALE's vector env for ``settings`` (numpy API): obs [num_envs, 4, 84, 84] uint8, rewards
    unclipped, ``terminated`` only at a game's end, a finished env reset on its next step
    (ALE's next-step autoreset, which ``xla()`` needs) unless it is reset by seed before."""
    from ale_py.vector_env import AtariVectorEnv

    return AtariVectorEnv(
        game_of(settings.env_id),
        settings.num_envs if num_envs is None else num_envs,
        frameskip=settings.frame_skip,
        max_num_frames_per_episode=settings.max_episode_steps * settings.frame_skip,
        repeat_action_probability=settings.repeat_action_probability,
        noop_max=settings.noop_max,
        use_fire_reset=settings.fire_reset,
        episodic_life=False,
        life_loss_info=False,
        reward_clipping=False,
        stack_num=FRAME_STACK,
        img_height=FRAME_SHAPE[0],
        img_width=FRAME_SHAPE[1],
        grayscale=True,
        maxpool=True,
    )


def replay_games(vector, seeds: np.ndarray, steps: np.ndarray, actions: np.ndarray, obs: np.ndarray) -> int:
    """Bring ``vector``'s envs to where their current games were: env ``i`` reset with ``seeds[i]``
    and its ``steps[i]`` recorded ``actions[i, :steps[i]]`` replayed, envs with shorter games
    starting later so that all end together (the vector steps every env at once). Returns the replay's
    length in steps. Raises RuntimeError naming the first env whose replayed observation differs
    from ``obs``, rather than go on with other games than the ones recorded."""
    seeds = np.asarray(seeds, np.int32)
    longest = int(steps.max()) if steps.size else 0
    begin = longest - steps  # the replay step at which each env's game starts
    replayed, _ = vector.reset(seed=seeds.copy())
    for t in range(longest):
        starting = (begin == t) & (t > 0)
        if starting.any():
            replayed, _ = vector.reset(seed=seeds[starting], options={"reset_mask": starting})
        index = np.clip(t - begin, 0, None)
        taken = np.where(t >= begin, actions[np.arange(len(seeds)), index], 0).astype(np.int32)
        replayed, _, _, _, _ = vector.step(taken)
    wrong = np.flatnonzero((replayed != obs).reshape(len(seeds), -1).any(axis=1))
    if wrong.size:
        raise RuntimeError(
            f"the Atari games could not be restored: env {int(wrong[0])}'s replayed game (seed {int(seeds[wrong[0]])}, "
            f"{int(steps[wrong[0]])} steps) ends on another observation than the checkpoint's "
            f"({wrong.size} of {len(seeds)} envs differ)")
    return longest


def play_games(
    settings: AtariSettings,
    policy: Callable[[np.ndarray, int], np.ndarray],
    num_games: int,
    *,
    seed: int = 10_000,
    num_envs: int | None = None,
) -> list[float]:
    """Scores of ``num_games`` whole games (every life, points unclipped), played on the host.

    policy(obs [n, 4, 84, 84] uint8, step) -> actions [n]. Games are spread over ``num_envs``
    envs (default: up to 16), each playing its share to the end, so that short games are not
    favoured; each game is reset with its own seed from ``seed``. A game lasts at most
    ``settings.max_episode_steps`` agent steps (ALE truncates it), so this ends.
    """
    num_envs = min(num_games, 16) if num_envs is None else num_envs
    vector = make_vector_env(settings, num_envs=num_envs)
    quota = np.array([num_games // num_envs + (i < num_games % num_envs) for i in range(num_envs)])
    scores: list[list[float]] = [[] for _ in range(num_envs)]
    running = np.zeros(num_envs)
    next_seed = seed + num_envs
    obs, _ = vector.reset(seed=np.arange(seed, seed + num_envs, dtype=np.int32))
    step = 0
    while any(len(done) < wanted for done, wanted in zip(scores, quota)):
        obs, reward, over, truncated, _ = vector.step(np.asarray(policy(obs, step), np.int32))
        running += reward
        ended = over | truncated
        for i in np.flatnonzero(ended):
            if len(scores[i]) < quota[i]:
                scores[i].append(float(running[i]))
        running[ended] = 0.0
        if ended.any():  # each new game from a seed of its own
            seeds = np.arange(next_seed, next_seed + int(ended.sum()), dtype=np.int32)
            next_seed += int(ended.sum())
            obs, _ = vector.reset(seed=seeds, options={"reset_mask": ended})
        step += 1
    vector.close()
    return [score for env_scores in scores for score in env_scores]


def host_game_seed(seed: int, env_index: int, game: int) -> int:
    """The seed of game ``game`` of env ``env_index`` in a run seeded ``seed``, on the host (numpy):
    distinct across envs and games, the same for the same three."""
    return int(np.random.SeedSequence([seed, env_index, game]).generate_state(1)[0] >> 1)


class AtariVector:
    """ALE's vector env behind the part of gymnasium's vector API a host training loop steps
    (``labcore.agents.dqn.host_loop``): ``reset(seed=...) -> (obs, info)`` and ``step(actions) ->
    (obs, reward, terminated, truncated, info)`` with gymnasium's same-step resets.

    obs: [E, 4, 84, 84] uint8. reward: the game's points, clipped to [-1, 1] with ``clip_rewards``.
    terminated: the game is over (a lost life is ``info["life_lost"]``: the game and its frame stack
    go on, and a learner decides whether it ends bootstrapping). An env whose game ended starts its
    next game (reset by a seed of its own, ``host_game_seed``) within the step; ``info["final_obs"]``
    holds where the game ended and ``info["final_info"]["episode"]`` its score ``"r"`` (every life,
    unclipped) and length ``"l"`` in agent steps, as gymnasium's RecordEpisodeStatistics reports them.

    It pickles as its games' seeds and actions: unpickled, it replays them (``replay_games``), so a
    checkpoint of a host loop resumes on the same games.
    """

    def __init__(self, settings: AtariSettings, seed: int = 0, clip_rewards: bool = False):
        self.settings, self.seed, self.clip_rewards = settings, seed, clip_rewards
        self.num_envs = settings.num_envs
        self._open()

    def _open(self) -> None:
        self.vector = make_vector_env(self.settings)
        self.single_observation_space = self.vector.single_observation_space
        self.single_action_space = self.vector.single_action_space
        num, width = self.num_envs, self.settings.max_episode_steps
        self._games = np.zeros(num, np.int64)
        self._game_seed = np.zeros(num, np.int32)
        self._game_steps = np.zeros(num, np.int64)
        self._game_actions = np.zeros((num, width), np.uint8)
        self._lives = np.zeros(num, np.int32)
        self._score = np.zeros(num, np.float64)
        self._obs = None

    def _next_seeds(self, envs: np.ndarray) -> np.ndarray:
        return np.array([host_game_seed(self.seed, int(i), int(self._games[i])) for i in envs], np.int32)

    def reset(self, *, seed: int | Sequence[int] | None = None, options: dict | None = None):
        """Every env starts a new game. seed: the run's seed (a list: its first entry, as gymnasium's
        ``[seed + i for i in ...]`` gives it); None keeps the one given before."""
        del options
        if seed is not None:
            self.seed = int(seed if np.isscalar(seed) else list(seed)[0])
        everyone = np.arange(self.num_envs)
        self._game_seed = self._next_seeds(everyone)
        self._games += 1
        self._obs, info = self.vector.reset(seed=self._game_seed.copy())
        self._lives = info["lives"].astype(np.int32)
        self._game_steps[:] = 0
        self._score[:] = 0.0
        return self._obs, {"lives": self._lives.copy()}

    def step(self, actions: np.ndarray):
        actions = np.asarray(actions, np.int32)
        everyone = np.arange(self.num_envs)
        self._game_actions[everyone, np.minimum(self._game_steps, self.settings.max_episode_steps - 1)] = actions
        obs, reward, over, truncated, info = self.vector.step(actions)
        self._game_steps += 1
        self._score += reward
        lives = info["lives"].astype(np.int32)
        ended = over | truncated
        life_lost = (lives < self._lives) & ~ended
        final_obs = np.empty(self.num_envs, dtype=object)
        episode = {"r": self._score.copy(), "l": self._game_steps.copy()}
        if ended.any():
            for i in np.flatnonzero(ended):
                final_obs[i] = obs[i].copy()
            where = np.flatnonzero(ended)
            self._game_seed[where] = self._next_seeds(where)
            self._games[where] += 1
            obs, reset_info = self.vector.reset(seed=self._game_seed[where].copy(), options={"reset_mask": ended})
            lives = reset_info["lives"].astype(np.int32)
            self._game_steps[where] = 0
            self._score[where] = 0.0
        self._lives, self._obs = lives, obs
        reward = reward.astype(np.float32)
        info = {"lives": lives.copy(), "life_lost": life_lost, "final_obs": final_obs, "_final_obs": ended,
                "final_info": {"episode": episode, "_episode": ended}, "_final_info": ended}
        return obs, (np.clip(reward, -1.0, 1.0) if self.clip_rewards else reward), over, truncated & ~over, info

    def close(self) -> None:
        self.vector.close()

    def __getstate__(self) -> dict:
        return {"settings": self.settings, "seed": self.seed, "clip_rewards": self.clip_rewards,
                "games": self._games, "game_seed": self._game_seed, "game_steps": self._game_steps,
                "game_actions": self._game_actions, "lives": self._lives, "score": self._score, "obs": self._obs}

    def __setstate__(self, state: dict) -> None:
        self.settings, self.seed, self.clip_rewards = state["settings"], state["seed"], state["clip_rewards"]
        self.num_envs = self.settings.num_envs
        self._open()
        if state["obs"] is not None:
            replay_games(self.vector, state["game_seed"], state["game_steps"], state["game_actions"], state["obs"])
        for name in ("games", "game_seed", "game_steps", "game_actions", "lives", "score", "obs"):
            setattr(self, f"_{name}", state[name])
