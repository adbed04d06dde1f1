"""Functional replay buffers: a state pytree and pure ``init / add / sample`` functions.

Nothing here mutates: ``add`` returns a new ``ReplayState``, so a buffer can
live inside ``jax.jit`` and ``lax.scan`` (XLA writes in place when the old
state is not used again, and ``donate_argnums`` lets it do so across calls).

A transition is any pytree of arrays (a NamedTuple, a dict); the buffer keeps
one array per leaf with a leading ``capacity`` axis::

    state = replay.init(example_transition, capacity=100_000)
    state = replay.add(state, transition)                  # one transition
    state = replay.add_batch(state, transitions)           # [N, ...] leaves
    batch = replay.sample(state, key, batch_size=32)       # [32, ...] leaves

**One interface for every buffer.** ``Buffer`` holds a buffer's pure functions with its sizes
bound, in the style of flashbax's buffers, so a training loop is written once for any of them:

    buffer = replay.uniform_buffer(capacity=100_000, batch_size=32)  # or frame_replay.frame_buffer(...)
    state = buffer.init(example_transition)
    state = buffer.add(state, transitions, episode_end)    # [N, ...] leaves, [N] bool, in time order
    if buffer.can_sample(state): batch = buffer.sample(state, key)

(``labcore.agents.dqn.frame_replay.frame_buffer`` stores each Atari frame once behind the same
four functions. Every DQN driver replays through one of the two, the agent's ``buffer``
(``labcore.agents.dqn.agent.make_dqn``). The IQN port's agent stores and samples through a third,
``labcore.agents.iqn.frame_buffer.replay_buffer``: the original agent's buffer with its quirks,
whose ``sample`` draws windows of stacked frames and returns them as that module's ``Batch``.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from flax import struct

Transition = Any  # a pytree of arrays


@struct.dataclass
class ReplayState:
    """A ring buffer of transitions.

    storage:  the transition pytree, each leaf [capacity, ...]
    position: [] int32, the slot the next transition is written to
    size:     [] int32, how many slots hold data (grows to capacity, then stays)
    """

    storage: Transition
    position: jax.Array
    size: jax.Array

    @property
    def capacity(self) -> int:
        return jax.tree_util.tree_leaves(self.storage)[0].shape[0]


def init(example: Transition, capacity: int) -> ReplayState:
    """An empty buffer for transitions shaped and typed like ``example`` (one transition)."""
    if capacity < 1:
        raise ValueError(f"replay capacity must be >= 1, got {capacity}")
    storage = jax.tree_util.tree_map(
        lambda leaf: jnp.zeros((capacity, *jnp.shape(leaf)), jnp.asarray(leaf).dtype), example
    )
    return ReplayState(storage=storage, position=jnp.int32(0), size=jnp.int32(0))


def add(state: ReplayState, transition: Transition) -> ReplayState:
    """Write one transition at ``position``, overwriting the oldest when full."""
    return add_batch(state, jax.tree_util.tree_map(lambda leaf: jnp.asarray(leaf)[None], transition))


def add_batch(state: ReplayState, transitions: Transition) -> ReplayState:
    """Write N transitions (leaves [N, ...]) in order, as N calls of ``add`` would.

    N must not exceed the capacity (a larger batch would overwrite itself).
    """
    n = jax.tree_util.tree_leaves(transitions)[0].shape[0]
    capacity = state.capacity
    if n > capacity:
        raise ValueError(f"cannot add {n} transitions at once to a buffer of capacity {capacity}")
    slots = (state.position + jnp.arange(n)) % capacity
    storage = jax.tree_util.tree_map(lambda buffer, values: buffer.at[slots].set(values), state.storage, transitions)
    return ReplayState(
        storage=storage,
        position=(state.position + n) % capacity,
        size=jnp.minimum(state.size + n, capacity),
    )


def can_sample(state: ReplayState, batch_size: int) -> jax.Array:
    """[] bool: whether the buffer holds at least ``batch_size`` transitions."""
    return state.size >= batch_size


def sample_indices(state: ReplayState, key: jax.Array, batch_size: int) -> jax.Array:
    """[batch_size] int32 slots drawn uniformly, with replacement, among the filled ones."""
    # Slots [0, size) are exactly the filled ones: the ring fills from slot 0 before wrapping.
    return jax.random.randint(key, (batch_size,), 0, jnp.maximum(state.size, 1))


def sample(state: ReplayState, key: jax.Array, batch_size: int) -> Transition:
    """A uniform batch: the transition pytree with leaves [batch_size, ...].

    Sampling an empty buffer returns slot 0's zeros; check ``can_sample`` first.
    """
    indices = sample_indices(state, key, batch_size)
    return jax.tree_util.tree_map(lambda buffer: buffer[indices], state.storage)


class Buffer(NamedTuple):
    """A replay buffer's pure functions, its sizes bound (see the module docstring).

    init(example) -> state                       an empty buffer for transitions like ``example``
    add(state, transitions, episode_end) -> state  N transitions (leaves [N, ...]) in time order;
                                                   episode_end [N] bool: the env reset after the step
                                                   (DQN's frame buffer needs it; the others ignore it)
    sample(state, key) -> batch                  batch_size transitions drawn uniformly, leaves
                                                   [batch_size, ...] (the IQN port's: its Batch of windows)
    can_sample(state) -> [] bool                 whether a batch can be drawn yet
    """

    init: Callable[[Transition], Any]
    add: Callable[[Any, Transition, jax.Array], Any]
    sample: Callable[[Any, jax.Array], Transition]
    can_sample: Callable[[Any], jax.Array]


def uniform_buffer(capacity: int, batch_size: int) -> Buffer:
    """The ring buffer of this module as a ``Buffer``: uniform sampling with replacement."""
    if capacity < 1:
        raise ValueError(f"replay capacity must be >= 1, got {capacity}")
    return Buffer(
        init=lambda example: init(example, capacity),
        add=lambda state, transitions, episode_end=None: add_batch(state, transitions),
        sample=lambda state, key: sample(state, key, batch_size),
        can_sample=lambda state: can_sample(state, batch_size),
    )
