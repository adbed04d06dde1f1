"""Checkers that judge behaviour: right answers written with any key convention pass, the named mistakes fail.

Where an exercise leaves the convention free (how a PRNG key is split or folded, how indices are
drawn), its checker runs the learner's function and looks at what it does (``Exercise.judge``,
helpers in ``labcore.course.exercises.behaviour``). These tests hand each such checker right answers
written with other conventions than the worked solution's, the wrong answers a learner writes, and
the statistics helpers' own edge cases.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from labcore.course import exercises
from labcore.course.exercises import behaviour
from labcore.course.lessons.nb10_debugging import exercises as nb10_debugging

JUDGED = [name for name in exercises.names() if exercises.get(name).judge is not None]


def test_the_key_handling_exercises_are_judged_by_behaviour():
    assert {"dropout", "replay_sample", "device_keys", "fix_reused_key"} <= set(JUDGED)


# ----------------------------------------------------------------------------------------------
# Right answers in other conventions.
def dropout_uniform_below(key, x, rate):
    _, mask_key = jax.random.split(key)  # a key split off first, then a uniform coin per entry
    return jnp.where(jax.random.uniform(mask_key, x.shape) < 1 - rate, x / (1 - rate), 0.0)


def dropout_folded_key_drops_above(key, x, rate):
    coins = jax.random.uniform(jax.random.fold_in(key, 17), x.shape)
    return jnp.where(coins >= rate, x, 0.0) / (1 - rate)  # kept when the coin is above rate


def rollout_split_twice(key, q_values, epsilon):
    num_envs, num_actions = q_values.shape[1:]

    def step(key, q):
        key, step_key = jax.random.split(key)
        coin_key, action_key = jax.random.split(step_key)
        explore = jax.random.uniform(coin_key, (num_envs,)) < epsilon
        return key, jnp.where(explore, jax.random.randint(action_key, (num_envs,), 0, num_actions), q.argmax(-1))

    return jax.lax.scan(step, key, q_values)[1]


def rollout_fold_in_step_counter(key, q_values, epsilon):
    num_envs, num_actions = q_values.shape[1:]

    def step(t, q):
        step_key = jax.random.fold_in(key, t)
        explore = jax.random.bernoulli(jax.random.fold_in(step_key, 0), epsilon, (num_envs,))
        random_actions = jax.random.randint(jax.random.fold_in(step_key, 1), (num_envs,), 0, num_actions)
        return t + 1, jnp.where(explore, random_actions, q.argmax(-1))

    return jax.lax.scan(step, 0, q_values)[1]


def rollout_keys_split_up_front(key, q_values, epsilon):
    num_envs, num_actions = q_values.shape[1:]

    def step(_, inputs):
        q, step_key = inputs
        coin_key, action_key = jax.random.split(step_key)
        explore = jax.random.uniform(coin_key, (num_envs,)) < epsilon
        return None, jnp.where(explore, jax.random.randint(action_key, (num_envs,), 0, num_actions), q.argmax(-1))

    return jax.lax.scan(step, None, (q_values, jax.random.split(key, q_values.shape[0])))[1]


def replay_sample_with_choice(state, key, batch_size):
    indices = jax.random.choice(jax.random.fold_in(key, 3), state.size, (batch_size,))
    return jax.tree_util.tree_map(lambda leaf: leaf[indices], state.storage)


def replay_sample_by_uniform_floats(state, key, batch_size):
    indices = jnp.floor(jax.random.uniform(key, (batch_size,)) * state.size).astype(jnp.int32)
    return {name: leaf[indices] for name, leaf in state.storage.items()}


def device_keys_by_split(seed, process_index, local_device_count):
    every_key_so_far = jax.random.split(jax.random.key(seed), (process_index + 1) * local_device_count)
    return jax.random.key_data(every_key_so_far[process_index * local_device_count:])


def device_keys_fold_in_twice(seed, process_index, local_device_count):
    process_key = jax.random.fold_in(jax.random.key(seed), process_index)
    return jnp.stack([jax.random.key_data(jax.random.fold_in(process_key, d)) for d in range(local_device_count)])


OTHER_CONVENTIONS = [
    ("dropout", dropout_uniform_below),
    ("dropout", dropout_folded_key_drops_above),
    ("replay_sample", replay_sample_with_choice),
    ("replay_sample", replay_sample_by_uniform_floats),
    ("device_keys", device_keys_by_split),
    ("device_keys", device_keys_fold_in_twice),
    ("fix_reused_key", rollout_split_twice),
    ("fix_reused_key", rollout_fold_in_step_counter),
    ("fix_reused_key", rollout_keys_split_up_front),
]


@pytest.mark.parametrize(("name", "answer"), OTHER_CONVENTIONS, ids=[f"{n}-{a.__name__}" for n, a in OTHER_CONVENTIONS])
def test_a_right_answer_in_another_key_convention_passes(name, answer, capsys):
    assert exercises.check(name, answer, seed=0), capsys.readouterr().out
    assert exercises.check(name, answer, seed=1), capsys.readouterr().out


@pytest.mark.parametrize(("name", "answer"), OTHER_CONVENTIONS[::3], ids=[f"{n}-{a.__name__}" for n, a in OTHER_CONVENTIONS[::3]])
def test_the_other_conventions_give_other_numbers_than_the_reference(name, answer):
    # Each would fail a check that compared outputs with the reference: the judge is what passes them.
    exercise = exercises.get(name)
    args = exercise.make_inputs(np.random.default_rng(2))
    theirs, ours = answer(*args), exercise.reference(*args)
    assert exercises.first_mismatch(theirs, ours) is not None


# ----------------------------------------------------------------------------------------------
# Wrong answers beyond the catalogue's named mistakes.
def dropout_same_mask_for_every_key(key, x, rate):
    return x * jax.random.bernoulli(jax.random.key(0), 1 - rate, x.shape) / (1 - rate)


def rollout_fold_in_the_same_counter(key, q_values, epsilon):
    num_envs, num_actions = q_values.shape[1:]

    def step(carried, q):  # fresh-looking keys, but the same ones at every step
        coin_key, action_key = jax.random.fold_in(key, 0), jax.random.fold_in(key, 1)
        explore = jax.random.uniform(coin_key, (num_envs,)) < epsilon
        return carried, jnp.where(explore, jax.random.randint(action_key, (num_envs,), 0, num_actions), q.argmax(-1))

    return jax.lax.scan(step, 0, q_values)[1]


def rollout_randint_without_the_last_action(key, q_values, epsilon):
    num_envs, num_actions = q_values.shape[1:]

    def step(key, q):
        key, coin_key, action_key = jax.random.split(key, 3)
        explore = jax.random.uniform(coin_key, (num_envs,)) < epsilon
        random_actions = jax.random.randint(action_key, (num_envs,), 0, num_actions - 1)
        return key, jnp.where(explore, random_actions, q.argmax(-1))

    return jax.lax.scan(step, key, q_values)[1]


def rollout_one_random_action_for_all_envs(key, q_values, epsilon):
    num_envs, num_actions = q_values.shape[1:]

    def step(key, q):
        key, coin_key, action_key = jax.random.split(key, 3)
        explore = jax.random.uniform(coin_key, (num_envs,)) < epsilon
        return key, jnp.where(explore, jax.random.randint(action_key, (), 0, num_actions), q.argmax(-1))

    return jax.lax.scan(step, key, q_values)[1]


def replay_sample_without_the_last_filled_slot(state, key, batch_size):
    indices = jax.random.randint(key, (batch_size,), 0, state.size - 1)
    return jax.tree_util.tree_map(lambda leaf: leaf[indices], state.storage)


WRONG_ANSWERS = [
    ("dropout", dropout_same_mask_for_every_key, "two different keys gave the same mask"),
    ("fix_reused_key", rollout_fold_in_the_same_counter, "the steps' draws are not fresh"),
    ("fix_reused_key", rollout_randint_without_the_last_action, "maxval is exclusive"),
    ("fix_reused_key", rollout_one_random_action_for_all_envs, "the envs share their random actions"),
    ("replay_sample", replay_sample_without_the_last_filled_slot, "uniformly among the filled ones"),
]


@pytest.mark.parametrize(("name", "answer", "said"), WRONG_ANSWERS, ids=[a.__name__ for _, a, _ in WRONG_ANSWERS])
def test_a_wrong_answer_fails_with_what_it_does_wrong(name, answer, said, capsys):
    assert exercises.check(name, answer, seed=0) is False
    assert said in capsys.readouterr().out


def test_the_handed_out_rollout_is_named_by_the_key_reuse_checker_under_jit_too(capsys):
    broken = nb10_debugging.epsilon_greedy_rollout
    problem, _ = behaviour.key_reuse_problem(jax.jit(broken), jax.random.key(0), jnp.zeros((3, 2, 4)), 0.5)
    assert problem is not None and "never replaced" in problem


# ----------------------------------------------------------------------------------------------
# The statistics.
def test_frequency_problem_accepts_the_expected_spread_and_rejects_beyond_six_sigma():
    n, p = 10_000, 0.25
    sigma = np.sqrt(p * (1 - p) / n)
    assert behaviour.frequency_problem(int(n * (p + 5 * sigma)), n, p, "x") is None
    assert "x is 0.2" in behaviour.frequency_problem(int(n * (p - 7 * sigma)), n, p, "x")


def test_dispersion_problem_tells_independent_coins_from_one_shared_coin():
    rng = np.random.default_rng(0)
    independent = rng.binomial(64, 0.7, size=40)
    shared = np.where(rng.random(40) < 0.7, 64, rng.binomial(64, 0.0, size=40))
    assert behaviour.dispersion_problem(independent, 64, 0.7, "n") is None
    assert "far more than independent draws" in behaviour.dispersion_problem(shared, 64, 0.7, "n")


def test_a_right_answer_passes_the_judges_on_many_seeds():
    # The judges' statistical tests are at six standard deviations: no false failure in 20 seeds each.
    for name in ("dropout", "replay_sample", "device_keys"):
        solution = exercises.get(name).solution
        assert all(exercises.check(name, solution, seed=seed, trials=1, verbose=False) for seed in range(20)), name
