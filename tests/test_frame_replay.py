"""The frame-storing Atari replay: stacks rebuilt at sample time equal the stacks the env emitted."""

from collections import deque

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from labcore.agents.dqn import frame_replay
from labcore.agents.dqn.core import Transition

FRAME = (2, 3)  # tiny frames: the logic does not depend on the size


def frame(value: int) -> np.ndarray:
    return np.full(FRAME, value % 256, np.uint8)


def synthetic_episodes(rng, num_episodes, max_len, life_loss_rate=0.2, truncate_rate=0.3, padding="reset"):
    """Transitions as FrameStackObservation(4, padding_type=padding) would emit them ('zero': as ALE's vector env).

    Each raw frame has a unique value (mod 256), so a wrongly rebuilt stack shows.
    Returns a list of (Transition of numpy arrays, episode_end).
    """
    steps, counter = [], 1
    for _ in range(num_episodes):
        length = int(rng.integers(1, max_len + 1))
        truncated = rng.random() < truncate_rate
        first = frame(counter)
        stack = deque([first] * 4 if padding == "reset" else [np.zeros_like(first)] * 3 + [first], maxlen=4)
        counter += 1
        for t in range(length):
            obs = np.stack(stack)
            stack.append(frame(counter))
            counter += 1
            last = t == length - 1
            terminated = (last and not truncated) or rng.random() < life_loss_rate
            steps.append(
                (
                    Transition(obs, np.int32(rng.integers(4)), np.float32(rng.normal()), np.stack(stack), np.bool_(terminated)),
                    last,
                )
            )
    return steps


def fill(steps, capacity, frame_shape=FRAME):
    state = frame_replay.init(capacity, frame_shape)
    add = jax.jit(frame_replay.add, donate_argnums=0)
    for transition, end in steps:
        state = add(state, transition, end)
    return state


def as_key(t):
    return (t.obs.tobytes(), int(t.action), float(t.reward), t.next_obs.tobytes(), bool(t.terminated))


@pytest.mark.parametrize("padding", frame_replay.PADDINGS)
@pytest.mark.parametrize("capacity", [1000, 37])
def test_samples_are_exactly_the_stored_transitions(capacity, padding):
    rng = np.random.default_rng(0)
    steps = synthetic_episodes(rng, num_episodes=40, max_len=12, padding=padding)
    state = fill(steps, capacity)
    batch = jax.jit(frame_replay.sample, static_argnums=(2, 3))(state, jax.random.key(1), 4096, padding)
    batch = jax.tree_util.tree_map(np.asarray, batch)
    sampled = {as_key(Transition(*(leaf[i] for leaf in batch))) for i in range(4096)}
    everything = [as_key(t) for t, _ in steps]
    # Every sample is a real transition, with its stacks padded as the env padded them ...
    assert sampled <= set(everything)
    # ... drawn from the newest ones only once the ring has wrapped (3 slots of history needed),
    # and every transition still fully in the buffer shows up.
    slots_used = sum(1 + end for _, end in steps) + 1  # each transition's slot, final slots, +1 first
    if slots_used > capacity:
        assert sampled <= set(everything[-capacity:])
    else:
        assert sampled == set(everything)


def test_wrap_around_keeps_only_complete_stacks():
    rng = np.random.default_rng(3)
    steps = synthetic_episodes(rng, num_episodes=200, max_len=30, life_loss_rate=0.0)
    state = fill(steps, 64)
    slots = np.asarray(jax.vmap(lambda k: frame_replay.sample_indices(state, k, 64))(jax.random.split(jax.random.key(0), 50)))
    written = int(state.written)
    assert slots.min() >= written - 64 + 3 and slots.max() <= written - 2
    assert np.asarray(state.valid)[slots % 64].all()


def test_terminated_and_truncated_are_distinguished():
    # One episode truncated after 3 steps, one terminated after 2, with a life lost mid-way.
    stack = lambda *values: np.stack([frame(v) for v in values])
    steps = [
        (Transition(stack(1, 1, 1, 1), np.int32(0), np.float32(0), stack(1, 1, 1, 2), np.bool_(False)), False),
        (Transition(stack(1, 1, 1, 2), np.int32(1), np.float32(1), stack(1, 1, 2, 3), np.bool_(True)), False),  # life lost
        (Transition(stack(1, 1, 2, 3), np.int32(2), np.float32(0), stack(1, 2, 3, 4), np.bool_(False)), True),  # truncated
        (Transition(stack(9, 9, 9, 9), np.int32(3), np.float32(0), stack(9, 9, 9, 10), np.bool_(False)), False),
        (Transition(stack(9, 9, 9, 10), np.int32(1), np.float32(1), stack(9, 9, 10, 11), np.bool_(True)), True),  # game over
    ]
    state = fill(steps, 100)
    # Slots: 0-2 episode one's transitions, 3 its final observation, 4-5 episode two's, 6 its final one.
    np.testing.assert_array_equal(np.asarray(state.valid)[:7], [1, 1, 1, 0, 1, 1, 0])
    np.testing.assert_array_equal(np.asarray(state.first)[:7], [1, 0, 0, 0, 1, 0, 0])
    np.testing.assert_array_equal(np.asarray(state.terminated)[:7], [0, 1, 0, 0, 0, 1, 0])
    obs, next_obs = frame_replay.stacks_at(state, jnp.arange(7), "reset")
    for slot, (transition, _) in zip([0, 1, 2, 4, 5], steps):
        np.testing.assert_array_equal(obs[slot], transition.obs)
        np.testing.assert_array_equal(next_obs[slot], transition.next_obs)
    # The truncated step keeps its true final observation to bootstrap from (not the next reset).
    np.testing.assert_array_equal(next_obs[2], stack(1, 2, 3, 4))
    assert not bool(frame_replay.can_sample(state, 6)) and bool(frame_replay.can_sample(state, 5))


def test_sampling_is_uniform_over_valid_transitions():
    rng = np.random.default_rng(5)
    steps = synthetic_episodes(rng, num_episodes=30, max_len=6, life_loss_rate=0.0)
    state = fill(steps, 1000)
    slots = np.asarray(frame_replay.sample_indices(state, jax.random.key(2), 200_000))
    valid = np.flatnonzero(np.asarray(state.valid))
    counts = np.bincount(slots, minlength=1000)[valid]
    assert counts.sum() == 200_000 and np.all(np.bincount(slots, minlength=1000)[np.asarray(~state.valid)] == 0)
    expected = 200_000 / len(valid)
    assert np.abs(counts - expected).max() < 6 * np.sqrt(expected)


def test_memory_of_a_million_atari_transitions():
    gigabytes = frame_replay.bytes_needed(1_000_000) / 1e9
    assert 7.0 < gigabytes < 7.6  # one 84x84 frame per slot, instead of 28 GB of stacked obs
    with pytest.raises(ValueError, match="capacity"):
        frame_replay.init(3)


def test_matches_real_breakout_frame_stacks():
    """The stacks ALE's vector env emitted (zeros before a new game's first frame), rebuilt from one
    frame a step, over games of at most 60 steps with lost lives on the way."""
    from labcore import envs

    env = envs.make_vector_env("ALE/Breakout-v5", 1, seed=0, max_episode_steps=60)  # short games: many resets
    rng = np.random.default_rng(0)
    steps, obs = [], env.reset(seed=0)[0]
    for _ in range(400):
        action = np.array([rng.integers(4)])
        next_obs, reward, terminated, truncated, info = env.step(action)
        ended = bool(terminated[0] or truncated[0])
        real_next = info["final_obs"][0] if ended else next_obs[0]
        steps.append((Transition(obs[0], np.int32(action[0]), np.float32(reward[0]), real_next,
                                 np.bool_(terminated[0] or info["life_lost"][0])), ended))
        obs = next_obs
    env.close()
    state = fill(steps, 1000, frame_shape=(84, 84))
    assert sum(end for _, end in steps) >= 5
    valid_slots = jnp.asarray(np.flatnonzero(np.asarray(state.valid)))
    obs, next_obs = frame_replay.stacks_at(state, valid_slots, "zero")
    np.testing.assert_array_equal(np.asarray(obs), np.stack([t.obs for t, _ in steps]))
    np.testing.assert_array_equal(np.asarray(next_obs), np.stack([t.next_obs for t, _ in steps]))
    with pytest.raises(ValueError, match="padding must be one of"):
        frame_replay.stacks_at(state, valid_slots, "edge")


def test_frame_buffer_behind_the_shared_interface_adds_a_stream_in_order():
    """frame_replay.frame_buffer is labcore.replay.Buffer's interface: one add of N steps (leaves
    [N, ...]) leaves the state N single adds leave, and sampling draws the same batch."""
    from labcore import replay

    steps = synthetic_episodes(np.random.default_rng(0), num_episodes=6, max_len=9)
    buffer = frame_replay.frame_buffer(capacity=37, batch_size=8)
    assert isinstance(buffer, replay.Buffer)
    transitions = jax.tree_util.tree_map(lambda *leaves: np.stack(leaves), *[t for t, _ in steps])
    state = jax.jit(buffer.add)(buffer.init(steps[0][0]), transitions, np.array([end for _, end in steps]))
    one_by_one = fill(steps, 37)
    for a, b in zip(jax.tree_util.tree_leaves(state), jax.tree_util.tree_leaves(one_by_one)):
        np.testing.assert_array_equal(a, b)
    assert bool(buffer.can_sample(state)) == bool(frame_replay.can_sample(one_by_one, 8))
    key = jax.random.key(1)
    for a, b in zip(buffer.sample(state, key), frame_replay.sample(one_by_one, key, 8)):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="frame replay capacity must be >= 6"):
        frame_replay.frame_buffer(capacity=5, batch_size=1)
