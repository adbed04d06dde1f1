"""The functional uniform replay buffer."""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from labcore import replay


class T(NamedTuple):
    obs: jax.Array
    action: jax.Array
    reward: jax.Array


def transition(i):
    return T(obs=jnp.full((2, 3), i, jnp.uint8), action=jnp.int32(i), reward=jnp.float32(i) / 2)


def test_init_shapes_and_dtypes():
    state = replay.init(transition(0), capacity=7)
    assert state.capacity == 7
    assert state.storage.obs.shape == (7, 2, 3) and state.storage.obs.dtype == jnp.uint8
    assert state.storage.action.dtype == jnp.int32 and state.storage.reward.shape == (7,)
    assert int(state.size) == 0 and int(state.position) == 0


def test_init_rejects_empty_capacity():
    with pytest.raises(ValueError, match="capacity"):
        replay.init(transition(0), capacity=0)


def test_add_fills_then_wraps_around():
    state = replay.init(transition(0), capacity=4)
    for i in range(1, 7):  # 6 adds into 4 slots: 5 and 6 overwrite 1 and 2
        state = replay.add(state, transition(i))
    assert int(state.size) == 4 and int(state.position) == 2
    np.testing.assert_array_equal(state.storage.action, [5, 6, 3, 4])
    np.testing.assert_array_equal(state.storage.obs[:, 0, 0], [5, 6, 3, 4])


def test_add_batch_equals_repeated_add():
    one_by_one = replay.init(transition(0), capacity=5)
    batched = replay.init(transition(0), capacity=5)
    for chunk in ([1, 2, 3], [4, 5, 6], [7]):
        for i in chunk:
            one_by_one = replay.add(one_by_one, transition(i))
        stacked = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *[transition(i) for i in chunk])
        batched = replay.add_batch(batched, stacked)
    for a, b in zip(jax.tree_util.tree_leaves(one_by_one), jax.tree_util.tree_leaves(batched)):
        np.testing.assert_array_equal(a, b)


def test_add_batch_larger_than_capacity_is_refused():
    state = replay.init(transition(0), capacity=2)
    stacked = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *[transition(i) for i in range(3)])
    with pytest.raises(ValueError, match="capacity 2"):
        replay.add_batch(state, stacked)


def test_sample_only_returns_filled_slots():
    state = replay.init(transition(0), capacity=100)
    for i in range(1, 4):  # slots 0..2 hold actions 1..3; the rest are zeros
        state = replay.add(state, transition(i))
    batch = replay.sample(state, jax.random.key(0), batch_size=500)
    assert batch.obs.shape == (500, 2, 3)
    assert set(np.asarray(batch.action).tolist()) == {1, 2, 3}
    np.testing.assert_array_equal(batch.reward, batch.action / 2)  # fields stay aligned


def test_sample_is_uniform_after_wrap():
    state = replay.init(transition(0), capacity=10)
    for i in range(25):
        state = replay.add(state, transition(i))
    actions = np.asarray(replay.sample(state, jax.random.key(1), batch_size=20_000).action)
    assert set(actions.tolist()) == set(range(15, 25))
    counts = np.bincount(actions - 15, minlength=10)
    assert counts.min() > 1700 and counts.max() < 2300  # 2000 expected each


def test_can_sample():
    state = replay.init(transition(0), capacity=10)
    assert not bool(replay.can_sample(state, 1))
    state = replay.add(state, transition(1))
    assert bool(replay.can_sample(state, 1)) and not bool(replay.can_sample(state, 2))


def test_works_inside_jit_and_scan():
    @jax.jit
    def fill_and_sample(key):
        state = replay.init(transition(0), capacity=8)

        def step(state, i):
            return replay.add(state, transition(i)), None

        state, _ = jax.lax.scan(step, state, jnp.arange(1, 12))
        return state, replay.sample(state, key, 16)

    state, batch = fill_and_sample(jax.random.key(2))
    assert int(state.size) == 8 and int(state.position) == 3
    assert set(np.asarray(batch.action).tolist()) <= set(range(4, 12))


def test_uniform_buffer_is_this_module_behind_the_shared_interface():
    buffer = replay.uniform_buffer(capacity=5, batch_size=3)
    assert isinstance(buffer, replay.Buffer)
    state = buffer.init(transition(0))
    assert not bool(buffer.can_sample(state))
    steps = jax.tree_util.tree_map(lambda *leaves: jnp.stack(leaves), *[transition(i) for i in range(4)])
    state = jax.jit(buffer.add)(state, steps, jnp.zeros(4, bool))  # episode_end: not needed here
    state = buffer.add(state, steps, jnp.zeros(4, bool))  # wraps around
    direct = replay.add_batch(replay.add_batch(replay.init(transition(0), 5), steps), steps)
    for a, b in zip(jax.tree_util.tree_leaves(state), jax.tree_util.tree_leaves(direct)):
        np.testing.assert_array_equal(a, b)
    assert bool(buffer.can_sample(state))
    key = jax.random.key(3)
    batch, expected = jax.jit(buffer.sample)(state, key), replay.sample(direct, key, 3)
    assert batch.action.shape == (3,)
    np.testing.assert_array_equal(batch.action, expected.action)
    with pytest.raises(ValueError, match="replay capacity must be >= 1"):
        replay.uniform_buffer(capacity=0, batch_size=1)
