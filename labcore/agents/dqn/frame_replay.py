"""A replay buffer for stacked Atari frames that stores each frame once.

A DQN observation is the last 4 frames, [4, 84, 84] uint8. Storing ``obs`` and ``next_obs``
per transition keeps every frame 8 times: 1,000,000 transitions would take 56 GB (28 GB
with ``next_obs`` shared). Consecutive observations share 3 of their 4 frames, so this buffer
keeps one 84x84 frame per step and rebuilds both stacks at sample time: about 7.1 GB for
1,000,000 transitions (``bytes_needed`` computes it without allocating anything).

Slot layout: slot ``i`` holds the newest frame of observation ``s_i`` and, when ``valid[i]``,
the transition ``s_i --action, reward--> s_{i+1}`` whose next observation is slot ``i + 1``.
An episode that ends (terminated or truncated) leaves one extra slot with its final
observation (needed to bootstrap after a truncation) that starts no transition; the next
episode begins in a fresh slot flagged ``first``. A stack reaching back past an episode's
first slot is padded as the env pads it after a reset: with zeros (``padding="zero"``, ALE's
vector env and ``FrameStackObservation(padding_type="zero")``) or with copies of that first frame
(``padding="reset"``, gymnasium's default).

``terminated`` (do not bootstrap) is separate from the episode boundary: a lost life is
terminal for learning while the game, and the frame stack, go on.

Like ``labcore.replay``, the state is a pytree and ``init / add / sample`` are pure, so they
run under ``jit``; jit ``add`` with ``donate_argnums=0`` so XLA writes the frame in place
instead of copying gigabytes per step. One stream of experience per buffer (one env).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from labcore import replay
from labcore.agents.dqn.core import Transition

STACK = 4
REJECTION_ROUNDS = 8
PADDINGS = ("zero", "reset")


@struct.dataclass
class FrameReplayState:
    """Frames and transitions in a ring of ``capacity`` slots.

    frames:     [capacity, H, W] uint8, the newest frame of the observation in each slot
    action:     [capacity] int32     reward: [capacity] float32
    terminated: [capacity] bool, the transition starting here ends without bootstrapping
    first:      [capacity] bool, the slot holds the first observation of an episode
    valid:      [capacity] bool, a complete transition starts here
    written:    [] int32, slots written since init (the ring position is written % capacity)
    episode_open: [] bool, the newest slot is the current observation of an ongoing episode
    """

    frames: jax.Array
    action: jax.Array
    reward: jax.Array
    terminated: jax.Array
    first: jax.Array
    valid: jax.Array
    written: jax.Array
    episode_open: jax.Array

    @property
    def capacity(self) -> int:
        return self.frames.shape[0]


def init(capacity: int, frame_shape: tuple[int, int] = (84, 84)) -> FrameReplayState:
    """An empty buffer of ``capacity`` frame slots (about one slot per transition)."""
    if capacity < STACK + 2:
        raise ValueError(f"frame replay capacity must be >= {STACK + 2}, got {capacity}")
    return FrameReplayState(
        frames=jnp.zeros((capacity, *frame_shape), jnp.uint8),
        action=jnp.zeros((capacity,), jnp.int32),
        reward=jnp.zeros((capacity,), jnp.float32),
        terminated=jnp.zeros((capacity,), bool),
        first=jnp.zeros((capacity,), bool),
        valid=jnp.zeros((capacity,), bool),
        written=jnp.int32(0),
        episode_open=jnp.bool_(False),
    )


def bytes_needed(capacity: int, frame_shape: tuple[int, int] = (84, 84)) -> int:
    """Bytes a buffer of ``capacity`` slots holds, computed from shapes alone."""
    shapes = jax.eval_shape(lambda: init(capacity, frame_shape))
    return sum(leaf.size * leaf.dtype.itemsize for leaf in jax.tree_util.tree_leaves(shapes))


def add(state: FrameReplayState, transition: Transition, episode_end: jax.Array) -> FrameReplayState:
    """Record one step of one env.

    transition: obs and next_obs [4, H, W] uint8 (FrameStackObservation's layout, newest
      frame last), action [] int, reward [] float, terminated [] bool (no bootstrap: a game
      over, or a lost life while training).
    episode_end: [] bool, the env was reset after this step (terminated or truncated): the
      next ``add`` starts a new episode. For a truncated step pass terminated=False, so the
      learner bootstraps from ``next_obs``.
    """
    capacity = state.capacity
    # Inside an episode the current observation's frame is already the newest slot (it was
    # the previous step's next frame); at an episode's start it needs a slot of its own.
    current = jnp.where(state.episode_open, state.written - 1, state.written)
    here, after = current % capacity, (current + 1) % capacity
    return FrameReplayState(
        frames=state.frames.at[here].set(transition.obs[-1]).at[after].set(transition.next_obs[-1]),
        action=state.action.at[here].set(transition.action),
        reward=state.reward.at[here].set(transition.reward),
        terminated=state.terminated.at[here].set(transition.terminated).at[after].set(False),
        first=state.first.at[here].set(~state.episode_open).at[after].set(False),
        valid=state.valid.at[here].set(True).at[after].set(False),
        written=current + 2,
        episode_open=~jnp.asarray(episode_end, bool),
    )


def _candidate_range(state: FrameReplayState) -> tuple[jax.Array, jax.Array]:
    """Linear slot indices [low, high] a transition may be sampled from.

    high: the newest slot whose next observation is written. low: the oldest slot whose 3
    earlier frames have not been overwritten yet (slot 0 before the ring wraps: it starts
    an episode, so it needs no earlier frames).
    """
    high = state.written - 2
    low = jnp.where(state.written > state.capacity, state.written - state.capacity + STACK - 1, 0)
    return low, high


def can_sample(state: FrameReplayState, batch_size: int) -> jax.Array:
    """[] bool: at least ``batch_size`` complete transitions are stored (a scan over the valid flags)."""
    return jnp.sum(state.valid) >= batch_size


def sample_indices(state: FrameReplayState, key: jax.Array, batch_size: int) -> jax.Array:
    """[batch_size] linear slot indices, uniform over the slots where a transition starts.

    Rejection sampling: the only invalid candidates are the final-observation slots of ended
    episodes (one per episode), so 8 rounds nearly always find a valid slot. Should all 8
    miss, the neighbour is taken: the slot before an episode's final slot is its last
    transition, the slot after is the next episode's first.
    """
    low, high = _candidate_range(state)
    draws = jax.random.randint(key, (REJECTION_ROUNDS, batch_size), low, jnp.maximum(high + 1, low + 1))
    ok = state.valid[draws % state.capacity]
    chosen = draws[jnp.argmax(ok, axis=0), jnp.arange(batch_size)]
    found = jnp.any(ok, axis=0)
    neighbour = jnp.where(chosen - 1 >= low, chosen - 1, chosen + 1)
    return jnp.where(found, chosen, neighbour)


def stacks_at(state: FrameReplayState, slots: jax.Array, padding: str = "zero") -> tuple[jax.Array, jax.Array]:
    """The observation and next observation of the transitions at linear ``slots`` [B].

    Returns (obs, next_obs), each [B, 4, H, W] uint8, padded at episode starts as the env pads
    them: frames from before the episode's first slot become zeros (``padding="zero"``) or that
    first frame (``"reset"``).
    """
    if padding not in PADDINGS:
        raise ValueError(f"padding must be one of {PADDINGS}, got {padding!r}")
    capacity = state.capacity
    window = slots[:, None] + jnp.arange(-(STACK - 1), 2)  # [B, 5]: s-3 .. s+1
    frames = state.frames[window % capacity]  # [B, 5, H, W]
    first = state.first[window % capacity]  # [B, 5]

    def pad_to_episode_start(offset: int) -> jax.Array:
        # Positions of the 4 frames of the stack ending at window position offset + 3.
        positions = jnp.arange(STACK) + offset
        # The latest episode start within the stack (position 0 of the stack if none).
        start = jnp.max(jnp.where(first[:, positions], positions, offset), axis=1)  # [B]
        source = jnp.maximum(positions[None, :], start[:, None])  # [B, 4]
        stack = jnp.take_along_axis(frames, source[:, :, None, None], axis=1)
        if padding == "zero":
            before_start = positions[None, :] < start[:, None]  # [B, 4]
            stack = jnp.where(before_start[:, :, None, None], jnp.zeros_like(stack), stack)
        return stack

    return pad_to_episode_start(0), pad_to_episode_start(1)


def sample(state: FrameReplayState, key: jax.Array, batch_size: int, padding: str = "zero") -> Transition:
    """A uniform batch of transitions with rebuilt stacks: obs, next_obs [B, 4, H, W] uint8."""
    slots = sample_indices(state, key, batch_size)
    obs, next_obs = stacks_at(state, slots, padding)
    here = slots % state.capacity
    return Transition(
        obs=obs,
        action=state.action[here],
        reward=state.reward[here],
        next_obs=next_obs,
        terminated=state.terminated[here],
    )


def frame_buffer(capacity: int, batch_size: int, padding: str = "zero") -> replay.Buffer:
    """This buffer behind ``labcore.replay.Buffer``'s interface: ``init(example)`` takes the frame
    shape from ``example.obs`` ([4, H, W]); ``add`` records the N steps of its one stream in order.
    padding: how the env pads a stack after a reset (``stacks_at``); ALE's vector env: zeros."""
    if padding not in PADDINGS:
        raise ValueError(f"padding must be one of {PADDINGS}, got {padding!r}")
    if capacity < STACK + 2:
        raise ValueError(f"frame replay capacity must be >= {STACK + 2}, got {capacity}")

    def add_steps(state: FrameReplayState, transitions: Transition, episode_end: jax.Array) -> FrameReplayState:
        def add_one(state, step):
            return add(state, *step), None

        return jax.lax.scan(add_one, state, (transitions, episode_end))[0]

    return replay.Buffer(
        init=lambda example: init(capacity, tuple(example.obs.shape[1:])),
        add=add_steps,
        sample=lambda state, key: sample(state, key, batch_size, padding),
        can_sample=lambda state: can_sample(state, batch_size),
    )
