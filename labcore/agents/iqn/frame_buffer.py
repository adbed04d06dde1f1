"""The iRainbow agent's frame-stacking replay buffer, as a pytree and pure functions.

One row per step (one observation, "frame"), in a ring of ``config.buffer_size`` rows. The agent
acts on the last ``n_frames - 1`` stored frames plus its new observation (``stacked_state``), and
trains on windows of ``n_frames`` consecutive rows (``sample_indices`` then ``gather_batch``):

    buf = buffer_init(config)                                  # FrameBuffer of zeros
    buf = buffer_add_empty(buf, config)                        # an epoch starts: skip n_frames - 1 rows
    state = stacked_state(buf, obs, config)                    # [n_frames * obs_size], what the agent acts on
    buf = buffer_add(buf, obs, action, reward, done, config)   # store the step
    if can_train(buf, config):
        batch = gather_batch(buf, sample_indices(key, buf, config), config)

Every function keeps the original's semantics (``labcore.torch_ref.irainbow.FrameBuffer`` is the
PyTorch reference, tested row for row against this one): ``buffer_add_empty`` skips rows without
clearing them, and sampling draws absolute window starts from
``range(max(1, size - n_frames - 1))`` without regard to the write position, so after a
wrap-around a window may straddle old and new rows. Shapes are static, so everything runs inside
``jax.jit`` and ``lax.scan`` with the config as a static argument, and under ``jax.vmap`` over a
leading agent axis. ``config`` is anything with the nine settings of ``BufferSpec`` (an
``labcore.agents.iqn.core.IQNConfig`` has them; the buffer needs no more of the agent, and does not
import it); ``config.fixed`` selects the flagged "fixed" variant's n-step batches (see
``gather_batch``).

``replay_buffer(config)`` puts this buffer behind ``labcore.replay.Buffer``'s interface, the one
every DQN driver replays through: its ``add`` writes the rows ``buffer_add`` writes, N steps at once;
its ``sample`` is ``gather_batch(sample_indices(...))`` and its ``can_sample`` is ``can_train``. The
agent's ``remember`` and ``learn`` store and sample through it (``core.make_buffer``); the
experiment's turn (``labcore.agents.iqn.programs.play_turn``) writes the same rows itself, in an
order that lets XLA update the ring in place. Two functions stay outside the interface, because
they are this agent's own rhythm: ``stacked_state`` (what the agent acts on is read from the ring)
and ``buffer_add_empty`` (the original skips rows when an epoch starts, not when a step ends an
episode; its experiment stores done = 0 on every step). The quirks above are the same behind the
interface: tests/test_iqn.py checks the interface against these functions, which
tests/test_iqn_parity.py compares with the PyTorch reference.

    buffer = replay_buffer(config)
    buf = buffer.init(example_step(config))
    buf = buffer.add(buf, Step(obs[None], action[None], reward[None], done[None]), jnp.zeros(1, bool))
    if buffer.can_sample(buf): batch = buffer.sample(buf, key)   # a Batch of batch_size windows
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

import jax
import jax.numpy as jnp
from flax import struct

from labcore import replay


class BufferSpec(Protocol):
    """The settings the buffer reads (static: they fix the shapes)."""

    buffer_size: int  # rows in the ring
    batch_size: int  # windows per sampled batch
    n_frames: int  # frames an agent acts on (the window is n_frames rows)
    obs_size: int  # one frame's length
    in_features: int  # n_frames * obs_size
    n_step: int  # the fixed variant's n-step returns
    gamma: float  # their discount
    lookahead: int  # rows a window needs past its start
    fixed: bool  # the flagged fixed variant (see gather_batch)


@struct.dataclass
class FrameBuffer:
    """A ring of ``buffer_size`` rows, one observation (frame) per row.

    states [cap, obs] f32; actions [cap] i32; rewards [cap] f32; dones [cap] f32;
    idx [] i32 (the next row written); size [] i32 (rows written, at most cap).
    """

    states: jax.Array
    actions: jax.Array
    rewards: jax.Array
    dones: jax.Array
    idx: jax.Array
    size: jax.Array


@struct.dataclass
class Batch:
    """B transitions: states, next_states [B, F] f32; actions [B, 1] i32; rewards, dones, valid [B, 1] f32.

    valid = 0 when a done lies inside the state's stacked frames (the stack straddles episodes).
    In the fixed variant rewards are n-step returns and dones say whether a done was reached
    within the n steps.
    """

    states: jax.Array
    actions: jax.Array
    rewards: jax.Array
    next_states: jax.Array
    dones: jax.Array
    valid: jax.Array


def check_obs(obs: jax.Array, config: BufferSpec, what: str = "obs") -> None:
    """ValueError unless ``obs`` is one frame, shape [obs_size] (checked at trace time)."""
    if tuple(obs.shape) != (config.obs_size,):
        raise ValueError(f"{what} must have shape [obs_size] = ({config.obs_size},), got {tuple(obs.shape)}")


def buffer_init(config: BufferSpec) -> FrameBuffer:
    """An empty buffer of config.buffer_size zero rows."""
    cap = config.buffer_size
    return FrameBuffer(
        states=jnp.zeros((cap, config.obs_size), jnp.float32),
        actions=jnp.zeros((cap,), jnp.int32),
        rewards=jnp.zeros((cap,), jnp.float32),
        dones=jnp.zeros((cap,), jnp.float32),
        idx=jnp.int32(0),
        size=jnp.int32(0),
    )


def buffer_add(buf: FrameBuffer, obs: jax.Array, action: jax.Array, reward: jax.Array, done: jax.Array,
               config: BufferSpec) -> FrameBuffer:
    """Write one step at row idx: obs [obs_size], action [] int, reward [] float, done [] (bool or float).

    idx <- (idx + 1) % cap; size <- min(size + 1, cap).
    """
    check_obs(obs, config)
    i = buf.idx
    # replay_buffer's add writes these same rows, N steps at once.
    return FrameBuffer(
        states=buf.states.at[i].set(jnp.asarray(obs, jnp.float32)),
        actions=buf.actions.at[i].set(jnp.asarray(action, jnp.int32)),
        rewards=buf.rewards.at[i].set(jnp.asarray(reward, jnp.float32)),
        dones=buf.dones.at[i].set(jnp.asarray(done, jnp.float32)),
        idx=(i + 1) % config.buffer_size,
        size=jnp.minimum(buf.size + 1, config.buffer_size),
    )


def buffer_add_empty(buf: FrameBuffer, config: BufferSpec) -> FrameBuffer:
    """Start a new episode's frame stack: idx <- (idx + n_frames - 1) % cap; size unchanged.

    The skipped rows are NOT cleared (the original's behaviour): ``current_state`` right after
    reads whatever they last held (zeros while the buffer is young).
    """
    return buf.replace(idx=(buf.idx + config.n_frames - 1) % config.buffer_size)


def buffer_current_state(buf: FrameBuffer, config: BufferSpec) -> jax.Array:
    """The n_frames - 1 rows before idx, oldest first, wrapping around the ring: [n_frames - 1, obs]."""
    rows = (buf.idx - (config.n_frames - 1) + jnp.arange(config.n_frames - 1)) % config.buffer_size
    return buf.states[rows]


def stacked_state(buf: FrameBuffer, obs: jax.Array, config: BufferSpec) -> jax.Array:
    """What the agent acts on: current_state's frames then obs, flattened: [n_frames * obs_size]."""
    check_obs(obs, config)
    frames = jnp.concatenate([buffer_current_state(buf, config), jnp.asarray(obs, jnp.float32)[None]], axis=0)
    return frames.reshape(config.in_features)


def sample_range(buf: FrameBuffer, config: BufferSpec) -> jax.Array:
    """[] i32: starts are drawn from range(this). Faithful: max(1, size - n_frames - 1); the fixed
    variant looks n_step rows ahead, so max(1, size - n_frames - n_step)."""
    return jnp.maximum(1, buf.size - config.n_frames - config.lookahead)


def can_train(buf: FrameBuffer, config: BufferSpec) -> jax.Array:
    """[] bool: the sample range holds at least batch_size starts (the original's train condition)."""
    return sample_range(buf, config) >= config.batch_size


def sample_indices(key: jax.Array, buf: FrameBuffer, config: BufferSpec) -> jax.Array:
    """[batch_size] i32 window starts, uniform without replacement over range(sample_range).

    Static shapes (jit / lax.scan friendly): every one of the cap rows gets a U(0, 1) score,
    rows outside the range get +inf, and the batch_size smallest scores are taken (the first
    batch_size entries of a uniformly random order of the valid starts). Only meaningful when
    ``can_train``: with fewer valid starts than batch_size, out-of-range rows fill the batch
    (where numpy's ``choice`` would raise).
    """
    scores = jax.random.uniform(key, (config.buffer_size,))
    scores = jnp.where(jnp.arange(config.buffer_size) < sample_range(buf, config), scores, jnp.inf)
    _, indices = jax.lax.top_k(-scores, config.batch_size)
    return indices.astype(jnp.int32)


def gather_batch(buf: FrameBuffer, indices: jax.Array, config: BufferSpec) -> Batch:
    """The batch of window starts indices [B] (absolute rows, as the original: no wrap-around).

    Window w = i + [0 .. n_frames - 1]; states = S[w], next_states = S[w + lookahead] (flattened);
    action / reward / done at the window's last row t; valid = 1 - any(done[w[:-1]]).
    Fixed variant: reward = sum_{k < n_step} gamma^k r[t + k], cut after the first done, and
    done = 1 if a done occurs in rows t .. t + n_step - 1.
    """
    B = indices.shape[0]
    window = indices[:, None] + jnp.arange(config.n_frames)  # [B, n_frames]
    last = window[:, -1]
    done_rows = buf.dones != 0
    valid = 1.0 - jnp.any(done_rows[window[:, :-1]], axis=-1).astype(jnp.float32)
    if config.fixed:
        steps = last[:, None] + jnp.arange(config.n_step)  # [B, n_step]
        step_dones = done_rows[steps].astype(jnp.float32)
        # alive[k] = no done strictly before step k: the return stops after the first done.
        alive = jnp.cumprod(jnp.concatenate([jnp.ones((B, 1)), 1.0 - step_dones[:, :-1]], axis=1), axis=1)
        discounts = config.gamma ** jnp.arange(config.n_step, dtype=jnp.float32)
        rewards = jnp.sum(alive * discounts * buf.rewards[steps], axis=1)
        dones = 1.0 - jnp.prod(1.0 - step_dones, axis=1)
    else:
        rewards, dones = buf.rewards[last], buf.dones[last]
    return Batch(
        states=buf.states[window].reshape(B, config.in_features),
        actions=buf.actions[last][:, None],
        rewards=rewards[:, None],
        next_states=buf.states[window + config.lookahead].reshape(B, config.in_features),
        dones=dones[:, None],
        valid=valid[:, None],
    )


class Step(NamedTuple):
    """Steps as ``replay.Buffer.add`` takes them: obs [N, obs_size]; action [N] int; reward [N]; done [N]."""

    obs: jax.Array
    action: jax.Array
    reward: jax.Array
    done: jax.Array


def example_step(config: BufferSpec) -> Step:
    """One zero step, the template ``replay_buffer(config).init`` checks: obs [obs_size], the rest []."""
    return Step(obs=jnp.zeros((config.obs_size,), jnp.float32), action=jnp.int32(0), reward=jnp.float32(0),
                done=jnp.float32(0))


def replay_buffer(config: BufferSpec) -> replay.Buffer:
    """This buffer behind ``labcore.replay.Buffer``'s interface (see the module docstring).

    init(example): ``buffer_init``, after checking ``example.obs`` is one frame [obs_size].
    add(buf, steps, episode_end): the rows ``buffer_add`` writes for the N steps (obs [N, obs_size],
        the rest [N]; N <= buffer_size) in order; episode_end is not read: the original starts a
        stack with ``buffer_add_empty`` at an epoch's start, which the agent calls
        (``core.start_epoch``).
    sample(buf, key): ``gather_batch`` of ``sample_indices``: a ``Batch`` of batch_size windows.
    can_sample(buf): ``can_train``.
    """

    def init(example: Step) -> FrameBuffer:
        check_obs(jnp.asarray(example.obs), config, "example.obs")
        return buffer_init(config)

    def add(buf: FrameBuffer, steps: Step, episode_end: jax.Array | None = None) -> FrameBuffer:
        n = jnp.shape(steps.obs)[0]
        for name, leaf in steps._asdict().items():
            want = (n, config.obs_size) if name == "obs" else (n,)
            if jnp.shape(leaf) != want:
                raise ValueError(f"steps.{name} must have shape {want} (N = {n} steps), got {jnp.shape(leaf)}")
        # The rows are a ring like replay's: its add_batch writes the N rows buffer_add would write one
        # by one, at once (no loop in the program), and refuses N above the ring's rows.
        storage = Step(buf.states, buf.actions, buf.rewards, buf.dones)
        steps = jax.tree_util.tree_map(lambda rows, leaf: jnp.asarray(leaf, rows.dtype), storage, steps)
        ring = replay.add_batch(replay.ReplayState(storage=storage, position=buf.idx, size=buf.size), steps)
        return FrameBuffer(*ring.storage, idx=ring.position, size=ring.size)

    return replay.Buffer(
        init=init,
        add=add,
        sample=lambda buf, key: gather_batch(buf, sample_indices(key, buf, config), config),
        can_sample=lambda buf: can_train(buf, config),
    )
