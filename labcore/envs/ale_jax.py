"""ALE's vector env stepped from inside jitted programs: a whole training run over Atari as one program.

``ale_py.AtariVectorEnv`` (``labcore.envs.ale_vector``) has an ``xla()`` method that returns its reset
and step as XLA FFI calls, which run inside ``jax.jit`` and ``lax.scan``; ``AtariJaxEnv`` steps the
games through them (or a host callback), as ``labcore.envs.batched`` describes the envs PQN steps:

    env = AtariJaxEnv(AtariSettings("ALE/Breakout-v5", num_envs=128))
    obs, state = env.reset(jax.random.key(0))             # obs [128, 4, 84, 84] uint8
    obs, state, step = env.step(key, state, actions)      # inside jit and scan too

Two ways of stepping, the same games either way (tests/test_ale_vector.py compares them):

* ``"xla"``: the FFI calls, where the installed JAX accepts them (jax 0.7.2 refuses their API
  version; ``xla_stepping_available`` tries once per process);
* ``"callback"``: ``jax.experimental.io_callback`` into the vector env's numpy API, which runs on
  every JAX labcore supports.

``stepping="auto"`` takes the first that works; ``AtariJaxEnv.stepping`` says which ran.

**How it is played.** The emulators run with ALE's preprocessing and without its reward clipping
or life-loss signals, so that what a learner chooses is decided here, in JAX, from what the game
emits: ``reward`` and ``score`` are the game's own points (a learner clips its reward itself); with
``life_loss_terminal`` a lost life ends bootstrapping (the game, its frame stack and its score go
on), and a game is always all of its lives; ``repeat_action_probability`` sets sticky actions.

**Resets by seed, so a run can be resumed exactly.** The emulators' state lives in C++, out of
reach of a checkpoint. Instead, every game starts from a reset with a seed of its own (derived from
the run's key, the env and the game's number), and the state keeps the actions of each env's
current game; ``restore`` rebuilds the emulators by resetting each env with its game's seed and
replaying those actions (``labcore.envs.ale_vector.replay_games``), which checks that the replay
ends on the observations the checkpoint holds. A game is at most ``max_episode_steps`` agent steps,
so the replay is bounded too.
"""

from __future__ import annotations

import functools
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax.experimental import io_callback

from labcore.envs.ale_vector import AtariSettings, make_vector_env, replay_games
from labcore.envs.batched import VectorStep

STEPPINGS = ("auto", "xla", "callback")


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
        """The emulators brought to ``state`` (read from a checkpoint) by ``replay_games``; raises
        RuntimeError naming the first env whose replay does not end on ``obs`` (the checkpoint's)."""
        started = time.perf_counter()
        self.restore_steps = replay_games(self.vector, np.asarray(state.game_seed), np.asarray(state.game_steps),
                                          np.asarray(state.game_actions), np.asarray(obs))
        self.restore_s = time.perf_counter() - started
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
