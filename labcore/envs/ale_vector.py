"""Atari through ALE's own vector environment, ``ale_py.AtariVectorEnv``, inside jitted programs.

ALE ships a vector environment written in C++: ``num_envs`` emulators stepped by a pool of threads,
with the Nature preprocessing done there too (max of the last two frames of each action repeat,
grayscale, 84x84 area resize, a stack of the last 4 frames, up to 30 no-op actions after a reset,
FIRE after a reset in games that need it, sticky actions). Its ``xla()`` method returns its reset
and step as XLA FFI calls, which run inside ``jax.jit`` and ``lax.scan``, so a whole training run
over Atari can be one compiled program, as it is over a gymnax env.

    env = AtariJaxEnv(AtariSettings("ALE/Breakout-v5", num_envs=128))
    obs, state = env.reset(jax.random.key(0))             # obs [128, 4, 84, 84] uint8
    obs, state, step = env.step(key, state, actions)      # inside jit and scan too (labcore.envs.batched)

Two ways of stepping, the same games either way (tests/test_ale_vector.py compares them):

* ``"xla"``: the FFI calls, where the installed JAX accepts them (jax 0.7.2 refuses their API
  version; ``xla_stepping_available`` tries once per process);
* ``"callback"``: ``jax.experimental.io_callback`` into the vector env's numpy API, which runs on
  every JAX labcore supports.

``stepping="auto"`` takes the first that works; ``AtariJaxEnv.stepping`` says which ran.

**How it is played.** The emulators run with ALE's preprocessing and without its reward clipping
or life-loss signals, so that everything a learner chooses is decided here, in JAX, from what the
game emits:

* ``reward`` and ``score`` are both the game's own points (a learner clips its reward itself);
* ``life_loss_terminal``: a lost life ends bootstrapping (the game, its frame stack and its score
  go on); a game is always all of its lives;
* ``repeat_action_probability``: sticky actions (0.25 in ALE's v5 ids and Dopamine; 0 in purejaxql).

**Resets by seed, so a run can be resumed exactly.** The emulators' state lives in C++, out of
reach of a checkpoint. Instead, every game starts from a reset with a seed of its own (derived from
the run's key, the env and the game's number), and the state keeps the actions of each env's
current game; ``restore`` rebuilds the emulators by resetting each env with its game's seed and
replaying those actions, then checks that the replay ends on the observations the checkpoint
holds. A game is at most ``max_episode_steps`` agent steps, so the replay is bounded too.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax.experimental import io_callback

from labcore.envs.batched import VectorStep

FRAME_STACK = 4
FRAME_SHAPE = (84, 84)
STEPPINGS = ("auto", "xla", "callback")


@dataclasses.dataclass(frozen=True)
class AtariSettings:
    """How ``num_envs`` Atari games are played, learned from and reported.

    env_id: an ALE id ('ALE/Breakout-v5'). repeat_action_probability: sticky actions.
    life_loss_terminal: a lost life is terminal for learning. noop_max: up to this many no-op actions after each reset (ALE draws
    0 to noop_max - 1). fire_reset: press FIRE after a reset in games that have it.
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


def make_vector_env(settings: AtariSettings, num_envs: int | None = None, repeat_action_probability: float | None = None):
    """ALE's vector env for ``settings`` (numpy API): obs [num_envs, 4, 84, 84] uint8, rewards
    unclipped, ``terminated`` only at a game's end, a finished env reset on its next step
    (ALE's next-step autoreset, which ``xla()`` needs) unless it is reset by seed before."""
    from ale_py.vector_env import AtariVectorEnv

    return AtariVectorEnv(
        game_of(settings.env_id),
        settings.num_envs if num_envs is None else num_envs,
        frameskip=settings.frame_skip,
        max_num_frames_per_episode=settings.max_episode_steps * settings.frame_skip,
        repeat_action_probability=(settings.repeat_action_probability if repeat_action_probability is None
                                   else repeat_action_probability),
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


def game_seeds(key: jax.Array, games: jax.Array) -> jax.Array:
    """[E] int32 >= 0: the seed of game ``games[i]`` of env ``i``, a pure function of the run's key."""

    def one(env_index, game):
        bits = jax.random.bits(jax.random.fold_in(jax.random.fold_in(key, env_index), game), dtype=jnp.uint32)
        return (bits >> 1).astype(jnp.int32)

    return jax.vmap(one)(jnp.arange(games.shape[0], dtype=jnp.uint32), games.astype(jnp.uint32))


@struct.dataclass
class AtariState:
    """Everything the JAX side keeps of ``E`` games; the emulators themselves live in C++.

    handle:       [8] uint8, which ALE vector env the FFI calls (and callbacks) step
    seed_key:     the key every game's seed derives from (``game_seeds``)
    games:        [E] int32 games started by each env (the current one included)
    game_seed:    [E] int32 the seed its current game was reset with
    game_steps:   [E] int32 agent steps into its current game
    game_actions: [E, max_episode_steps] uint8 the actions of its current game, for ``restore``
    lives:        [E] int32 lives left (a drop is a lost life)
    """

    handle: jax.Array
    seed_key: jax.Array
    games: jax.Array
    game_seed: jax.Array
    game_steps: jax.Array
    game_actions: jax.Array
    lives: jax.Array


# The vector envs that callbacks step, by handle: io_callback passes arrays, not Python objects.
_HOST_ENVS: dict[bytes, Any] = {}


@functools.cache
def xla_stepping_available() -> tuple[bool, str]:
    """(whether this JAX runs ALE's FFI reset and step, and why not). Tried once per process on a
    one-env vector env: jax 0.7.2 refuses ALE 0.12's handlers (FFI API version 0.3 against 0.1)."""
    jax.devices()  # the backend first: a refused registration must not be taken for a failed backend
    try:
        vector = make_vector_env(AtariSettings(num_envs=1))
        handle, reset, _ = vector.xla()
        jax.block_until_ready(jax.jit(lambda h: reset(h, seed=0))(handle))
        vector.close()
        return True, ""
    except Exception as error:  # noqa: BLE001 (any failure means: use the callback)
        return False, f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"


class AtariJaxEnv:
    """``settings.num_envs`` Atari games, reset and stepped as pure-looking JAX functions.

    reset(key) -> (obs [E, 4, 84, 84] uint8, AtariState)
    step(key, state, actions [E] int32) -> (obs, state, VectorStep): an env whose game ended is
      reset by seed within the step, so ``obs`` starts its next game and ``final_obs`` holds where
      the game ended (``labcore.envs.batched``: the interface PQN steps; the key is not used, every
      draw is the emulators' own, seeded per game)
    restore(state, obs) -> state: after a checkpoint is read, the emulators replayed to ``state``

    The functions have side effects in C++ (the emulators move), so each state must be stepped
    once: keep the returned one, as a ``lax.scan`` does.
    """

    def __init__(self, settings: AtariSettings, stepping: str = "auto"):
        if stepping not in STEPPINGS:
            raise ValueError(f"stepping must be one of {STEPPINGS}, got {stepping!r}")
        self.settings = settings
        if stepping == "auto":
            stepping = "xla" if xla_stepping_available()[0] else "callback"
        elif stepping == "xla" and not xla_stepping_available()[0]:
            raise RuntimeError(f"ALE's XLA stepping does not run on jax {jax.__version__} "
                               f"({xla_stepping_available()[1]}); use stepping='callback'")
        self.stepping = stepping
        self.vector = make_vector_env(settings)
        self.num_envs = settings.num_envs
        self.num_actions = int(self.vector.single_action_space.n)
        self.obs_shape = settings.obs_shape
        self._handle = np.frombuffer(self.vector.ale.handle(), np.uint8).copy()
        _HOST_ENVS[self._handle.tobytes()] = self.vector
        num = settings.num_envs
        if stepping == "xla":
            _, self._xla_reset, self._xla_step = self.vector.xla()
            self._reset_call = jax.ffi.ffi_call(
                "atari_vector_xla_reset",
                (jax.ShapeDtypeStruct((8,), jnp.uint8), jax.ShapeDtypeStruct((num, *self.obs_shape), jnp.uint8),
                 *[jax.ShapeDtypeStruct((num,), jnp.int32)] * 4),
                vmap_method="broadcast_all", has_side_effect=True)

    def __del__(self) -> None:
        _HOST_ENVS.pop(getattr(self, "_handle", np.zeros(0, np.uint8)).tobytes(), None)

    # -- the two ways of stepping: (handle, actions, seeds for envs whose game ends) -> outputs ----

    def _emulate(self, handle, actions, next_seeds):
        """Step every env, reset (by ``next_seeds``) those whose game ended. Returns handle, obs
        after the resets, obs the step reached, raw reward, game over, truncated, lives [E]."""
        num = self.settings.num_envs
        if self.stepping == "callback":
            shapes = (jax.ShapeDtypeStruct((num, *self.obs_shape), jnp.uint8),) * 2 + (
                jax.ShapeDtypeStruct((num,), jnp.int32), jax.ShapeDtypeStruct((num,), jnp.bool_),
                jax.ShapeDtypeStruct((num,), jnp.bool_), jax.ShapeDtypeStruct((num,), jnp.int32))
            outputs = io_callback(_host_step, shapes, handle, actions, next_seeds, ordered=True)
            return (handle, *outputs)
        handle, (reached, reward, over, truncated, info) = self._xla_step(handle, actions)
        ended = over | truncated

        def reset_ended(carry):
            def reset_one(index, carry):
                def reset(carry):
                    handle, _, _ = carry
                    handle, obs, _, lives, _, _ = self._reset_call(
                        handle, index[None].astype(jnp.int32), next_seeds[index][None])
                    return handle, obs, lives  # every env's current obs and lives, the reset one's new

                return jax.lax.cond(ended[index], reset, lambda carry: carry, carry)

            return jax.lax.fori_loop(0, num, reset_one, carry)

        handle, obs, lives = jax.lax.cond(ended.any(), reset_ended, lambda carry: carry, (handle, reached, info["lives"]))
        return handle, obs, reached, reward, over, truncated, lives

    def _reset_all(self, handle, seeds):
        if self.stepping == "callback":
            shapes = (jax.ShapeDtypeStruct((self.settings.num_envs, *self.obs_shape), jnp.uint8),
                      jax.ShapeDtypeStruct((self.settings.num_envs,), jnp.int32))
            return (handle, *io_callback(_host_reset, shapes, handle, seeds, ordered=True))
        handle, (obs, info) = self._xla_reset(handle, seed=seeds)
        return handle, obs, info["lives"]

    # -- the interface --------------------------------------------------------------------------

    def reset(self, key: jax.Array) -> tuple[jax.Array, AtariState]:
        """Every env starts game 0 with its own seed from ``key``."""
        num = self.settings.num_envs
        games = jnp.zeros(num, jnp.int32)
        seeds = game_seeds(key, games)
        handle, obs, lives = self._reset_all(jnp.asarray(self._handle), seeds)
        state = AtariState(
            handle=handle, seed_key=key, games=games + 1, game_seed=seeds, game_steps=jnp.zeros(num, jnp.int32),
            game_actions=jnp.zeros((num, self.settings.max_episode_steps), jnp.uint8), lives=lives)
        return obs, state

    def step(self, key: jax.Array, state: AtariState, actions: jax.Array) -> tuple[jax.Array, AtariState, VectorStep]:
        del key  # the emulators draw their own numbers (sticky actions, no-ops), seeded per game
        num = self.settings.num_envs
        actions = actions.astype(jnp.int32)
        next_seeds = game_seeds(state.seed_key, state.games)  # used only by the envs whose game ends
        # the action goes into the current game's record first: a replay takes the same steps
        recorded = state.game_actions.at[jnp.arange(num), jnp.minimum(state.game_steps, self.settings.max_episode_steps - 1)].set(
            actions.astype(jnp.uint8))
        handle, obs, reached, raw_reward, over, truncated, lives = self._emulate(state.handle, actions, next_seeds)
        ended = over | truncated
        life_lost = (lives < state.lives) & ~ended  # a game's last life is its end, not a lost life
        score = raw_reward.astype(jnp.float32)
        terminated = over | (life_lost & self.settings.life_loss_terminal)
        state = AtariState(
            handle=handle,
            seed_key=state.seed_key,
            games=state.games + ended.astype(jnp.int32),
            game_seed=jnp.where(ended, next_seeds, state.game_seed),
            game_steps=jnp.where(ended, 0, state.game_steps + 1),
            game_actions=recorded,
            lives=lives,
        )
        return obs, state, VectorStep(score, score, terminated, truncated & ~over, ended, reached)

    def restore(self, state: AtariState, obs: np.ndarray) -> AtariState:
        """The emulators brought to ``state`` (read from a checkpoint): every env reset with its
        current game's seed and its recorded actions replayed, envs with shorter games starting
        later so that all end together. Raises RuntimeError naming the first env whose replayed
        observation differs from ``obs`` (the checkpoint's), rather than train on other games."""
        started = time.perf_counter()
        seeds = np.asarray(state.game_seed, np.int32)
        steps = np.asarray(state.game_steps)
        actions = np.asarray(state.game_actions)
        longest = int(steps.max()) if steps.size else 0
        begin = longest - steps  # the replay step at which each env's game starts
        vector = self.vector
        replayed, _ = vector.reset(seed=seeds)
        for t in range(longest):
            starting = (begin == t) & (t > 0)
            if starting.any():
                replayed, _ = vector.reset(seed=seeds[starting], options={"reset_mask": starting})
            index = np.clip(t - begin, 0, None)
            taken = np.where(t >= begin, actions[np.arange(len(seeds)), index], 0).astype(np.int32)
            replayed, _, _, _, _ = vector.step(taken)
        wrong = np.flatnonzero((replayed != np.asarray(obs)).reshape(len(seeds), -1).any(axis=1))
        if wrong.size:
            raise RuntimeError(
                f"the Atari games could not be restored: env {int(wrong[0])}'s replayed game (seed {int(seeds[wrong[0]])}, "
                f"{int(steps[wrong[0]])} steps) ends on another observation than the checkpoint's "
                f"({wrong.size} of {len(seeds)} envs differ)")
        self.restore_s = time.perf_counter() - started
        self.restore_steps = longest
        return state.replace(handle=jnp.asarray(self._handle))


def _host_env(handle: np.ndarray):
    try:
        return _HOST_ENVS[np.asarray(handle, np.uint8).tobytes()]
    except KeyError:
        raise RuntimeError("this Atari state's vector env is gone: a state steps only in the process "
                           "and with the AtariJaxEnv that made it (after a checkpoint, restore it)") from None


def _host_reset(handle, seeds):
    obs, info = _host_env(handle).reset(seed=np.asarray(seeds, np.int32).copy())
    return obs, info["lives"].astype(np.int32)


def _host_step(handle, actions, next_seeds):
    vector = _host_env(handle)
    reached, reward, over, truncated, info = vector.step(np.asarray(actions, np.int32).copy())
    obs, lives = reached, info["lives"]
    ended = over | truncated
    if ended.any():
        obs, reset_info = vector.reset(seed=np.asarray(next_seeds, np.int32)[ended].copy(), options={"reset_mask": ended})
        lives = reset_info["lives"]
    return obs, reached.copy(), reward.astype(np.int32), over, truncated, lives.astype(np.int32)


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
