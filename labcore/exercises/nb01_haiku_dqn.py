"""Notebook 01 (haiku_dqn): replay sampling, the epsilon schedule and the Huber loss of DQN."""

from __future__ import annotations

import numpy as np

from labcore.exercises.checking import Exercise


def _replay_inputs(rng: np.random.Generator) -> tuple:
    import jax

    from labcore import replay

    capacity = int(rng.integers(8, 64))
    example = {"obs": np.zeros((3,), np.float32), "action": np.int32(0)}
    state = replay.init(example, capacity)
    count = int(rng.integers(1, capacity))  # partly full: sampling an empty slot shows
    state = replay.add_batch(
        state,
        {"obs": rng.normal(size=(count, 3)).astype(np.float32), "action": rng.integers(1, 4, size=(count,)).astype(np.int32)},
    )
    return state, jax.random.key(int(rng.integers(1 << 30))), int(rng.integers(1, 16))


def _epsilon_inputs(rng: np.random.Generator) -> tuple:
    duration = int(rng.integers(100, 10_000))
    steps = rng.integers(0, 2 * duration, size=(16,)).astype(np.int32)
    return steps, float(rng.uniform(0.5, 1.0)), float(rng.uniform(0.0, 0.2)), duration


def _epsilon_reference(step, start: float, end: float, duration: int):
    import jax.numpy as jnp

    fraction = jnp.clip(jnp.asarray(step, jnp.float32) / duration, 0.0, 1.0)
    return start + fraction * (end - start)


def _huber_inputs(rng: np.random.Generator) -> tuple:
    return (rng.normal(scale=3.0, size=(int(rng.integers(5, 40)),)).astype(np.float32), float(rng.uniform(0.5, 2.0)))


def catalogue() -> list[Exercise]:
    """This notebook's exercises, in the order the notebook checks them."""
    from labcore import losses, replay

    return [
        Exercise(
            name="replay_sample",
            description="Sample a uniform batch from a replay.ReplayState: every leaf of state.storage, gathered.\n"
            "Draw indices = jax.random.randint(key, (batch_size,), 0, state.size) (only the filled slots), "
            "then jax.tree_util.tree_map(lambda leaf: leaf[indices], state.storage).",
            reference=replay.sample,
            make_inputs=_replay_inputs,
        ),
        Exercise(
            name="epsilon_schedule",
            description="Linear epsilon: start at step 0, end at step `duration`, then flat; steps is an int array.\n"
            "fraction = clip(step / duration, 0, 1) with jnp.clip (Python min/max fail on traced arrays), "
            "then start + fraction * (end - start).",
            reference=_epsilon_reference,
            make_inputs=_epsilon_inputs,
            jit=True,
        ),
        Exercise(
            name="huber_loss",
            description="Huber loss of x (elementwise): 0.5 * x**2 where |x| <= delta, delta * (|x| - 0.5 * delta) beyond.\n"
            "Use jnp.where (or split |x| into a clipped part and the rest); no Python if on array values, "
            "so it works under jit.",
            reference=losses.huber_loss,
            make_inputs=_huber_inputs,
            jit=True,
        ),
    ]
