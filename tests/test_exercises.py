"""The exercise checker must pass right answers, fail wrong ones, and never raise for them.

The answers below come in notebook order, one section per notebook: each exercise with a correct
solution written independently of the reference, and a plausible wrong one that a learner might
write. The catalogue-wide tests run every pair; the notebook sections' tests after them check what
one exercise's catalogue entry must catch.
"""

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from labcore import budget
from labcore.course import exercises, lessons, primitives
from labcore.course.lessons.nb10_debugging import exercises as nb10_debugging


# ----------------------------------------------------------------------------------------------
# Notebook 00: JAX primitives.
def softmax_naive(x):
    e = jnp.exp(x)  # overflows for large logits
    return e / e.sum(-1, keepdims=True)


def softmax_right(x):
    return jax.nn.softmax(x, axis=-1)


def diagonal_right(m, v):
    return m - jnp.diag(jnp.diag(m)) + jnp.diag(v)


def diagonal_numpy_style(m, v):
    for i in range(m.shape[0]):
        m[i, i] = v[i]  # JAX arrays are immutable: raises TypeError
    return m


def dropout_right(key, x, rate):
    mask = jax.random.bernoulli(key, 1 - rate, x.shape)
    return x * mask / (1 - rate)


def dropout_unscaled(key, x, rate):
    return x * jax.random.bernoulli(key, 1 - rate, x.shape)


def regression_grad_right(params, x, y):
    residual = x @ params["w"] + params["b"] - y
    n = x.shape[0]
    return {"w": 2 * x.T @ residual / n, "b": 2 * residual.mean()}


def regression_grad_wrong_structure(params, x, y):
    g = regression_grad_right(params, x, y)
    return (g["w"], g["b"])


def pairwise_right(a, b):
    return ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1)


def pairwise_transposed(a, b):
    return pairwise_right(b, a)


def global_norm_right(tree):
    flat = jnp.concatenate([jnp.ravel(leaf) for leaf in jax.tree_util.tree_leaves(tree)])
    return jnp.linalg.norm(flat)


def global_norm_python_float(tree):
    # float() of a traced value fails under jit
    return float(global_norm_right(tree))


# ----------------------------------------------------------------------------------------------
# Notebook 01: Haiku DQN.
def replay_sample_right(state, key, batch_size):
    indices = jax.random.randint(key, (batch_size,), 0, state.size)
    return jax.tree_util.tree_map(lambda leaf: leaf[indices], state.storage)


def replay_sample_includes_empty_slots(state, key, batch_size):
    indices = jax.random.randint(key, (batch_size,), 0, state.capacity)
    return jax.tree_util.tree_map(lambda leaf: leaf[indices], state.storage)


def epsilon_right(step, start, end, duration):
    return start + jnp.clip(step / duration, 0.0, 1.0) * (end - start)


def epsilon_python_min(step, start, end, duration):
    return start + min(step / duration, 1.0) * (end - start)  # fails on arrays and under jit


def huber_right(x, delta):
    small = jnp.abs(x) <= delta
    return jnp.where(small, 0.5 * x**2, delta * (jnp.abs(x) - 0.5 * delta))


def huber_quadratic_only(x, delta):
    return 0.5 * x**2


# ----------------------------------------------------------------------------------------------
# Notebook 03: jit, scan, vmap.
def vmap_loss_right(w, b, xs, ys):
    return jax.vmap(lambda x, y: 0.5 * (jnp.dot(x, w) + b - y) ** 2)(xs, ys)


def vmap_loss_mean_not_per_example(w, b, xs, ys):
    return jnp.mean(0.5 * (xs @ w + b - ys) ** 2)  # the batch mean, not one loss per example


def per_example_grads_right(w, b, xs, ys):
    residual = xs @ w + b - ys  # d/dw of 0.5 r^2 is r * x, one row per example
    return residual[:, None] * xs


def per_example_grads_of_the_mean(w, b, xs, ys):
    grad = jax.grad(lambda w: jnp.mean(0.5 * (xs @ w + b - ys) ** 2))(w)
    return jnp.broadcast_to(grad, xs.shape)  # the batch gradient copied, not per example


# ----------------------------------------------------------------------------------------------
# Notebooks 04 and 05: many devices, many processes.
def device_keys_right(seed, process_index, local_device_count):
    first = process_index * local_device_count
    return jnp.stack([jax.random.key_data(jax.random.fold_in(jax.random.key(seed), first + d)) for d in range(local_device_count)])


def device_keys_local_index_only(seed, process_index, local_device_count):
    # every process gets the same keys: its devices repeat the other processes' streams
    return jnp.stack([jax.random.key_data(jax.random.fold_in(jax.random.key(seed), d)) for d in range(local_device_count)])


def process_rows_right(global_batch, process_index, process_count):
    n = global_batch // process_count
    return jnp.arange(n) + process_index * n


def process_rows_strided(global_batch, process_index, process_count):
    return jnp.arange(process_index, global_batch, process_count)  # interleaved, not blocks


def weighted_mean_right(shard_means, counts):
    return jnp.einsum("p,pd->d", counts, shard_means) / jnp.sum(counts)


def weighted_mean_unweighted(shard_means, counts):
    return jnp.mean(shard_means, axis=0)


# ----------------------------------------------------------------------------------------------
# Notebook 06: the IQN port.
def noisy_linear_right(x, kernel, bias, sigma_kernel, sigma_bias, eps_kernel, eps_bias, deterministic):
    if deterministic:
        return jnp.dot(x, kernel) + bias
    return jnp.dot(x, kernel + sigma_kernel * eps_kernel) + bias + sigma_bias * eps_bias


def noisy_linear_noisy_in_eval_too(x, kernel, bias, sigma_kernel, sigma_bias, eps_kernel, eps_bias, deterministic):
    return x @ (kernel + sigma_kernel * eps_kernel) + bias + sigma_bias * eps_bias  # ignores deterministic


def quantile_huber_right(td, taus, valid):
    abs_td = jnp.abs(td)
    huber = jnp.where(abs_td <= 1.0, 0.5 * td**2, abs_td - 0.5)
    below = (td < 0).astype(jnp.float32)
    return jnp.mean(jnp.abs(taus - below) * huber * valid[:, :, None])


def quantile_huber_summed_over_targets(td, taus, valid):
    terms = jnp.abs(taus - (td < 0)) * jnp.where(jnp.abs(td) <= 1.0, 0.5 * td**2, jnp.abs(td) - 0.5)
    return jnp.mean(jnp.sum(terms * valid[:, :, None], axis=2))  # the usual IQN form, not the original's mean


def current_state_right(states, idx, n_frames):
    rows = jnp.mod(idx - (n_frames - 1) + jnp.arange(n_frames - 1), states.shape[0])
    return jnp.take(states, rows, axis=0)


def current_state_newest_first(states, idx, n_frames):
    return states[(idx - 1 - jnp.arange(n_frames - 1)) % states.shape[0]]


# ----------------------------------------------------------------------------------------------
# Notebook 07: masked PPO.
def masked_policy_right(logits, mask, action):
    shifted = jnp.where(mask, logits, -jnp.inf)
    shifted = shifted - jnp.max(shifted, axis=-1, keepdims=True)
    log_z = jnp.log(jnp.sum(jnp.where(mask, jnp.exp(shifted), 0.0), axis=-1, keepdims=True))
    log_probs = jnp.where(mask, shifted - log_z, 0.0)
    chosen = jnp.take_along_axis(log_probs, action[:, None], axis=-1)[:, 0]
    return chosen, -jnp.sum(jnp.exp(log_probs) * log_probs * mask, axis=-1)


def masked_policy_entropy_over_all_actions(logits, mask, action):
    log_probs = jax.nn.log_softmax(jnp.where(mask, logits, -1e9))
    chosen = jnp.take_along_axis(log_probs, action[:, None], axis=-1)[:, 0]
    return chosen, -jnp.sum(jax.nn.softmax(logits) * jax.nn.log_softmax(logits), axis=-1)  # unmasked entropy


def gae_right(rewards, values, dones, last_value, gamma, gae_lambda):
    advantages, next_advantage, next_value = [], jnp.zeros_like(last_value), last_value
    for t in reversed(range(rewards.shape[0])):
        not_done = 1.0 - dones[t]
        delta = rewards[t] + gamma * next_value * not_done - values[t]
        next_advantage = delta + gamma * gae_lambda * not_done * next_advantage
        next_value = values[t]
        advantages.append(next_advantage)
    return jnp.stack(advantages[::-1])


def gae_ignoring_dones(rewards, values, dones, last_value, gamma, gae_lambda):
    return gae_right(rewards, values, jnp.zeros_like(dones), last_value, gamma, gae_lambda)


def clipped_loss_right(logits, mask, actions, old_log_probs, advantages, clip_eps):
    chosen, _ = masked_policy_right(logits, mask, actions)
    ratio = jnp.exp(chosen - old_log_probs)
    pessimistic = jnp.where(
        advantages >= 0, jnp.minimum(ratio, 1 + clip_eps) * advantages, jnp.maximum(ratio, 1 - clip_eps) * advantages
    )
    return -jnp.mean(pessimistic)


def clipped_loss_clip_only(logits, mask, actions, old_log_probs, advantages, clip_eps):
    ratio = jnp.exp(masked_policy_right(logits, mask, actions)[0] - old_log_probs)
    return -jnp.mean(jnp.clip(ratio, 1 - clip_eps, 1 + clip_eps) * advantages)  # no min: not pessimistic


# ----------------------------------------------------------------------------------------------
# Notebook 08: precision and memory on accelerators.
def tf32_unchanged(x):
    return x


def bf16_matmul_bfloat16_result_cast_back(x, w):
    return (x.astype(jnp.bfloat16) @ w.astype(jnp.bfloat16)).astype(jnp.float32)








# ----------------------------------------------------------------------------------------------
# Notebook 09: GFlowNets.
def hypergrid_reward_right(x, height):
    a = jnp.abs(x / (height - 1) - 0.5)
    plateau = jnp.all(a > 0.25 + 1e-6, axis=-1)
    peak = jnp.all((a > 0.3 + 1e-6) & (a < 0.4 - 1e-6), axis=-1)
    return 0.1 + 0.5 * plateau + 2.0 * peak


def hypergrid_reward_inclusive_bounds(x, height):
    a = jnp.abs(x / (height - 1) - 0.5)
    return 0.1 + 0.5 * jnp.all(a >= 0.25, axis=-1) + 2.0 * jnp.all((a >= 0.3) & (a <= 0.4), axis=-1)


def trajectory_balance_right(log_z, log_pf, log_pb, lengths, log_rewards):
    steps = jnp.arange(log_pf.shape[1])
    valid = steps[None, :] < lengths[:, None]
    flow = log_z + (valid * (log_pf - log_pb)).sum(-1)
    return jnp.mean((flow - log_rewards) ** 2)


def trajectory_balance_sums_the_padding(log_z, log_pf, log_pb, lengths, log_rewards):
    return jnp.mean((log_z + log_pf.sum(-1) - log_pb.sum(-1) - log_rewards) ** 2)


def l1_right(terminal_indices, target):
    p_hat = np.zeros(len(target))
    np.add.at(p_hat, terminal_indices, 1.0)
    return float(np.abs(p_hat / len(terminal_indices) - target).sum())


def l1_mean_form(terminal_indices, target):
    return l1_right(terminal_indices, target) / len(target)


RIGHT = {
    "stable_softmax": softmax_right,
    "set_diagonal": diagonal_right,
    "dropout": dropout_right,
    "linear_regression_grad": regression_grad_right,
    "pairwise_squared_distances": pairwise_right,
    "global_norm": global_norm_right,
    "replay_sample": replay_sample_right,
    "epsilon_schedule": epsilon_right,
    "huber_loss": huber_right,
    "vmap_loss": vmap_loss_right,
    "per_example_grads": per_example_grads_right,
    "device_keys": device_keys_right,
    "process_rows": process_rows_right,
    "weighted_gradient_mean": weighted_mean_right,
    "noisy_linear": noisy_linear_right,
    "quantile_huber_loss": quantile_huber_right,
    "current_state": current_state_right,
    "masked_log_prob_entropy": masked_policy_right,
    "gae": gae_right,
    "ppo_clipped_loss": clipped_loss_right,
    "hypergrid_reward": hypergrid_reward_right,
    "trajectory_balance": trajectory_balance_right,
    "l1_sum_form": l1_right,
}
WRONG = {
    "stable_softmax": softmax_naive,
    "set_diagonal": diagonal_numpy_style,
    "dropout": dropout_unscaled,
    "linear_regression_grad": regression_grad_wrong_structure,
    "pairwise_squared_distances": pairwise_transposed,
    "global_norm": global_norm_python_float,
    "replay_sample": replay_sample_includes_empty_slots,
    "epsilon_schedule": epsilon_python_min,
    "huber_loss": huber_quadratic_only,
    "vmap_loss": vmap_loss_mean_not_per_example,
    "per_example_grads": per_example_grads_of_the_mean,
    "device_keys": device_keys_local_index_only,
    "process_rows": process_rows_strided,
    "weighted_gradient_mean": weighted_mean_unweighted,
    "noisy_linear": noisy_linear_noisy_in_eval_too,
    "quantile_huber_loss": quantile_huber_summed_over_targets,
    "current_state": current_state_newest_first,
    "masked_log_prob_entropy": masked_policy_entropy_over_all_actions,
    "gae": gae_ignoring_dones,
    "ppo_clipped_loss": clipped_loss_clip_only,
    "hypergrid_reward": hypergrid_reward_inclusive_bounds,
    "trajectory_balance": trajectory_balance_sums_the_padding,
    "l1_sum_form": l1_mean_form,
}
# References computed in NumPy (exact bit manipulation, float64 sums): right, but not traceable, so
# they cannot pass a check that also runs them under jax.jit. Their worked solutions cover them.
NUMPY_REFERENCES_OF_JIT_EXERCISES = {"round_to_tf32", "bf16_matmul"}


# ----------------------------------------------------------------------------------------------
# The whole catalogue.
def test_every_registered_exercise_is_covered_here_or_by_its_own_solution_and_mistakes():
    # An exercise is tested either by a right and a wrong answer here, or by the worked solution and
    # the classic mistakes its catalogue entry carries (the tests below run those).
    assert set(RIGHT) == set(WRONG)
    self_covered = {name for name in exercises.names()
                    if exercises.get(name).solution is not None and len(exercises.get(name).mistakes) >= 2}
    assert set(exercises.names()) - self_covered <= set(RIGHT), sorted(set(exercises.names()) - self_covered - set(RIGHT))
    assert set(RIGHT) <= set(exercises.names()), sorted(set(RIGHT) - set(exercises.names()))


def test_every_exercise_has_a_worked_solution():
    # The notebooks no longer print a solution under each exercise; solution(name) shows one.
    missing = [name for name in exercises.names() if exercises.get(name).solution is None]
    assert missing == []


WITH_SOLUTIONS = [name for name in exercises.names() if exercises.get(name).solution is not None]
WITH_MISTAKES = [(name, label) for name in exercises.names() for label, _ in exercises.get(name).mistakes]


# A check draws fresh inputs for each of the exercise's trials (and runs its edge cases), and a
# right answer is run on every one of them, a wrong one only until it fails. Under LABCORE_QUICK=1
# (as in CI) a right answer is checked on one trial and one seed: the draws that tell right from
# wrong stay in the classic-mistake tests below and in tests/test_exercise_alternatives.py.
SOLUTION_SEEDS = budget(full=(0, 1), quick=(0,))
PASSING_TRIALS = budget(full=None, quick=1)  # None: the exercise's own number of trials


@pytest.mark.parametrize("name", WITH_SOLUTIONS)
def test_worked_solution_passes_and_differs_from_the_reference(name):
    exercise = exercises.get(name)
    for seed in SOLUTION_SEEDS:
        assert exercises.check(name, exercise.solution, seed=seed, trials=PASSING_TRIALS, verbose=False), seed
    # Two different correct answers: the solution is written out, not the reference renamed.
    import inspect

    assert exercise.solution is not exercise.reference
    assert inspect.getsource(exercise.solution) != inspect.getsource(exercise.reference)


@pytest.mark.parametrize(("name", "label"), WITH_MISTAKES)
def test_each_classic_mistake_fails_and_is_named(name, label, capsys):
    wrong = dict(exercises.get(name).mistakes)[label]
    assert exercises.check(name, wrong, seed=0) is False
    out = capsys.readouterr().out
    assert out.startswith(f"FAIL  {name}") and "classic mistake" in out, out


@pytest.mark.parametrize("name", [n for n in exercises.names() if exercises.get(n).core])
def test_core_exercises_reject_at_least_two_classic_mistakes(name):
    assert len(exercises.get(name).mistakes) >= 2


def test_solution_shows_the_source_and_returns_the_function(capsys):
    name = WITH_SOLUTIONS[0]
    returned = exercises.solution(name)
    assert returned is exercises.get(name).solution
    printed = capsys.readouterr().out
    assert f"def {returned.__name__}(" in printed and "lines" in printed
    with pytest.raises(ValueError, match="unknown exercise"):
        exercises.solution("no_such_exercise")


def test_a_core_exercise_without_two_mistakes_is_refused():
    import dataclasses

    base = exercises.get(WITH_SOLUTIONS[0])
    with pytest.raises(ValueError, match="at least two mistakes"):
        exercises.register(dataclasses.replace(base, name="core_without_mistakes", core=True, mistakes=()))


def exercises_checked_by_each_notebook() -> dict[str, list[str]]:
    """{"00_jax_primitives": [...], ...}: the exercises each notebook checks, in notebook order and in
    the order each first checks them, found as tests/test_notebooks.py finds the check calls."""
    import nbformat
    from test_notebooks import CHECK_CALL, NOTEBOOKS, code_cells  # here, so that only these tests need it

    checked = {}
    for path in NOTEBOOKS:
        names = checked.setdefault(path.stem, [])
        for source in code_cells(nbformat.read(path, as_version=4)):
            for match in CHECK_CALL.finditer(source):
                if match.group(1) not in names:
                    names.append(match.group(1))
    return checked


def test_names_are_in_notebook_order():
    checked = exercises_checked_by_each_notebook()
    every = [name for names in checked.values() for name in names]
    assert len(every) == len(set(every)), f"an exercise is checked by two notebooks: {checked}"
    assert set(every) == set(exercises.names())
    notebook_of = {name: notebook for notebook, names in checked.items() for name in names}
    notebooks = [notebook_of[name] for name in exercises.names()]
    assert notebooks == sorted(notebooks), f"names() is not in notebook order: {list(zip(exercises.names(), notebooks))}"
    assert exercises.names() == every  # within a notebook too: the order the notebook checks them in


def test_each_notebook_module_holds_that_notebooks_exercises():
    checked = exercises_checked_by_each_notebook()
    notebook_numbered = {notebook[:2]: notebook for notebook in checked}
    by_module = {}
    for module in filter(None, (lessons.part(lesson, "exercises") for lesson in lessons.names())):
        number = module.__name__.split(".")[-2].removeprefix("nb")[:2]
        notebook = notebook_numbered[number]
        assert module.__name__.split(".")[-2] == f"nb{notebook}", f"{module.__name__} is not named after {notebook}"
        by_module[notebook] = [exercise.name for exercise in module.catalogue()]
    assert list(by_module) == list(checked)
    assert by_module == checked


def test_every_notebook_has_its_lesson_folder_and_every_folder_its_notebook():
    notebooks = sorted(path.stem for path in (Path(__file__).parents[1] / "notebooks").glob("*.ipynb"))
    assert lessons.names() == [f"nb{notebook}" for notebook in notebooks]
    for lesson in lessons.names():  # each with its exercises and its quiz, found without a list
        assert lessons.part(lesson, "exercises").catalogue() and lessons.part(lesson, "quiz").QUIZ.lesson == lesson[2:4]
    assert lessons.part("nb00_jax_primitives", "helpers") is None  # a part a folder does not have


@pytest.mark.parametrize("first", ["labcore.course.lessons.nb08_accelerators.exercises",
                                   "labcore.course.lessons.nb07_masked_ppo.ppo_loss_checks",
                                   "labcore.course.lessons.nb12_pqn.quiz"])
def test_a_lesson_module_imported_before_the_rest_of_the_course_finds_the_framework_whole(first):
    import subprocess
    import sys

    script = (f"import importlib; importlib.import_module({first!r})\n"
              "from labcore.course import exercises\n"
              "assert len(exercises.names()) == len(set(exercises.names())) > 50, exercises.names()\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]


def test_an_exercise_registered_before_the_catalogue_is_read_comes_after_every_lesson():
    """The lessons' exercises are added on the catalogue's first use, register's included: one registered
    first still comes last, and one that takes a lesson exercise's name is refused, the catalogue whole."""
    import subprocess
    import sys

    script = ("import dataclasses\n"
              "from labcore.course.exercises import checking\n"
              "from labcore.course.lessons.nb00_jax_primitives import exercises as lesson\n"
              "first = lesson.catalogue()[0]\n"
              "checking.register(dataclasses.replace(first, name='my_own'))\n"
              "names = checking.names()\n"
              "assert names[-1] == 'my_own' and names[0] == first.name and len(names) > 50, names\n"
              "try:\n"
              "    checking.register(first)\n"
              "except ValueError as error:\n"
              "    assert 'already registered' in str(error)\n"
              "else:\n"
              "    raise AssertionError('a lesson exercise registered twice')\n"
              "assert checking.names() == names and checking.get(first.name) is not None\n")
    clash = ("from labcore.course.exercises import checking\n"
             "from labcore.course.lessons.nb00_jax_primitives import exercises as lesson\n"
             "first = lesson.catalogue()[0]\n"
             "try:\n"
             "    checking.register(first)\n"  # before any read: refused all the same
             "except ValueError as error:\n"
             "    assert 'already registered' in str(error)\n"
             "else:\n"
             "    raise AssertionError('a lesson exercise registered twice')\n"
             "assert checking.names()[0] == first.name and len(checking.names()) > 50\n")
    for code in (script, clash):
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr[-2000:]


@pytest.mark.parametrize("name", sorted(RIGHT))
def test_right_answer_passes(name, capsys):
    assert exercises.check(name, RIGHT[name], seed=0, trials=PASSING_TRIALS) is True
    assert capsys.readouterr().out.startswith(f"PASS  {name}")


@pytest.mark.parametrize("name", sorted(WRONG))
def test_wrong_answer_fails_without_raising(name, capsys):
    assert exercises.check(name, WRONG[name], seed=0) is False
    out = capsys.readouterr().out
    assert out.startswith(f"FAIL  {name}")
    # A check against the reference shows the inputs it failed on; a judge says what it tried.
    assert "seed 0" in out and ("inputs:" in out or exercises.get(name).judge is not None)


@pytest.mark.parametrize(
    "name", sorted(n for n in RIGHT if exercises.get(n).run_with is None and n not in NUMPY_REFERENCES_OF_JIT_EXERCISES)
)
def test_reference_passes_its_own_check(name):
    # (An exercise run under a wrapper, such as pmap, compares with the whole computation's result,
    # which is not itself an answer to run under the wrapper; its RIGHT answer covers it.)
    assert exercises.check(name, exercises.get(name).reference, trials=PASSING_TRIALS, verbose=False)


def test_unfinished_exercise_is_reported_as_not_written(capsys):
    def stable_softmax(x):
        raise NotImplementedError

    assert exercises.check("stable_softmax", stable_softmax, seed=1) is False
    out = capsys.readouterr().out
    assert "not written yet" in out and exercises.get("stable_softmax").description.splitlines()[0] in out
    # Nothing of the hint is printed unasked, only how to ask for it.
    assert "keepdims" not in out and 'hint("stable_softmax")' in out


def test_a_wrong_answer_gets_the_way_to_ask_for_a_hint_not_the_hint(capsys):
    label, wrong = exercises.get("dqn_update").mistakes[0]
    assert "terminal" in label
    assert exercises.check("dqn_update", wrong, seed=0) is False
    out = capsys.readouterr().out
    assert "classic mistake" in out and 'hint("dqn_update")' in out and "value_and_grad" not in out
    exercises.hint("dqn_update")
    assert "value_and_grad" in capsys.readouterr().out


def test_failure_names_the_first_mismatching_element(capsys):
    def off_by_one_corner(m, v):
        return primitives.set_diagonal(m, v).at[0, 0].add(1.0)

    assert not exercises.check("set_diagonal", off_by_one_corner, seed=3)
    assert "output[0, 0] = " in capsys.readouterr().out


def test_eager_only_solution_fails_the_jit_requirement(capsys):
    assert not exercises.check("global_norm", global_norm_python_float, seed=0)
    assert "under jax.jit" in capsys.readouterr().out


def test_shape_mismatch_is_reported(capsys):
    assert not exercises.check("pairwise_squared_distances", lambda a, b: pairwise_right(a, b).ravel(), seed=0)
    assert "shape" in capsys.readouterr().out


def test_checks_use_fresh_inputs_unless_seeded():
    drawn = []

    def spy(key, x, rate):  # dropout's judge calls it eagerly, so x is a concrete array here
        drawn.append(np.asarray(x))
        return primitives.dropout(key, x, rate)

    def first_input_of_a_check(**seeded):
        drawn.clear()
        exercises.check("dropout", spy, trials=1, verbose=False, **seeded)
        return drawn[0]  # the judge's first probe: an input of random shape and values

    first, second = first_input_of_a_check(), first_input_of_a_check()
    assert first.shape != second.shape or not np.array_equal(first, second)
    np.testing.assert_array_equal(first_input_of_a_check(seed=7), first_input_of_a_check(seed=7))


def test_unknown_exercise_raises_with_the_known_names():
    with pytest.raises(ValueError, match="known exercises: .*stable_softmax"):
        exercises.check("stable_sofmax", softmax_right)


def test_duplicate_registration_is_refused():
    with pytest.raises(ValueError, match="already registered"):
        exercises.register(exercises.get("dropout"))


def test_first_mismatch_compares_pytrees():
    a = {"x": jnp.ones(3), "y": [jnp.zeros(2)]}
    assert exercises.first_mismatch(a, a) is None
    b = {"x": jnp.ones(3), "y": [jnp.array([0.0, 1.0])]}
    assert "output['y'][0][1]" in exercises.first_mismatch(b, a)
    assert "structure" in exercises.first_mismatch((jnp.ones(3),), a)
    assert "dtype" in exercises.first_mismatch(jnp.array([True]), jnp.array([1.0]))
    assert "nan" in exercises.first_mismatch(jnp.array([jnp.nan]), jnp.array([1.0])).lower()


# ----------------------------------------------------------------------------------------------
# Notebook 06: the IQN port.
def test_quantile_huber_reference_is_the_pytorch_originals_loss():
    torch = pytest.importorskip("torch")
    from labcore.torch_ref import irainbow

    exercise = exercises.get("quantile_huber_loss")
    rng = np.random.default_rng(0)
    for _ in range(5):
        td, taus, valid = exercise.make_inputs(rng)
        terms = irainbow.quantile_huber_terms(torch.from_numpy(td), torch.from_numpy(taus), torch.from_numpy(valid))
        np.testing.assert_allclose(exercise.reference(td, taus, valid), terms.mean().numpy(), rtol=1e-6)


def test_current_state_is_checked_under_jit_with_a_traced_index(capsys):
    def two_slices_with_a_python_branch(states, idx, n_frames):
        if idx < n_frames - 1:  # a Python branch on the write position: fails once idx is traced
            return jnp.concatenate([states[idx - (n_frames - 1):], states[:idx]])
        return states[idx - (n_frames - 1):idx]

    assert not exercises.check("current_state", two_slices_with_a_python_branch, seed=0)
    assert "TracerBoolConversionError" in capsys.readouterr().out


def test_noisy_linear_is_checked_in_both_modes(capsys):
    def mean_weights_only(x, kernel, bias, sigma_kernel, sigma_bias, eps_kernel, eps_bias, deterministic):
        return x @ kernel + bias  # right in eval mode, wrong in training mode

    assert not exercises.check("noisy_linear", mean_weights_only, seed=0)
    out = capsys.readouterr().out
    assert "output[0]" in out and "classic mistake: no noise in training mode" in out


# ----------------------------------------------------------------------------------------------
# Notebook 08: precision and memory. The worked solutions and the classic mistakes in the
# exercise module are run by the catalogue-wide tests above; these are two more wrong answers.
@pytest.mark.parametrize(
    "name,wrong",
    [("round_to_tf32", tf32_unchanged), ("bf16_matmul", bf16_matmul_bfloat16_result_cast_back)],
)
def test_notebook_08_exercises_reject_more_wrong_answers(name, wrong):
    assert exercises.check(name, exercises.get(name).solution, seed=0, verbose=False)
    assert not exercises.check(name, wrong, seed=0, verbose=False), f"{name} accepted a wrong answer"


def test_tf32_reference_agrees_with_xla_reduce_precision():
    (x,) = exercises.get("round_to_tf32").make_inputs(np.random.default_rng(1))
    expected = np.asarray(jax.lax.reduce_precision(jnp.asarray(x), exponent_bits=8, mantissa_bits=10))
    np.testing.assert_array_equal(exercises.get("round_to_tf32").reference(x), expected)


def test_fit_minibatches_rejects_gcd_on_a_known_case():
    assert exercises.get("fit_minibatches").reference(32, 64, 6) == 4  # gcd(2048, 6) would say 2


# ----------------------------------------------------------------------------------------------
# Tolerances that accept every correct form, device counts that cannot hide a missing collective,
# and the learner's progress.
def pairwise_by_expansion(a, b):
    return (a**2).sum(-1)[:, None] + (b**2).sum(-1)[None, :] - 2 * a @ b.T


def pairwise_not_squared(a, b):
    return jnp.sqrt(pairwise_right(a, b))


def pairwise_mean_not_sum(a, b):
    return ((a[:, None, :] - b[None, :, :]) ** 2).mean(-1)


def test_pairwise_accepts_the_expansion_form_despite_float32_cancellation():
    with jax.default_matmul_precision("float32"):
        for seed in range(8):  # 8 x 5 trials of random shapes and values; 20 seeds took 30 s of CI for no more cover
            assert exercises.check("pairwise_squared_distances", pairwise_by_expansion, seed=seed, verbose=False), seed
        for wrong in (pairwise_not_squared, pairwise_mean_not_sum, pairwise_transposed):
            assert not exercises.check("pairwise_squared_distances", wrong, seed=0, verbose=False), wrong.__name__


def test_device_count_exercises_refuse_to_check_on_a_single_device():
    # A process with one CPU device: a collective over one device changes nothing and a batch on one
    # device counts as sharded, so a wrong answer would pass. The checkers refuse instead: the check
    # fails (progress records it as not passed) and says why and how to get more devices.
    import os
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent("""
        import jax
        from labcore.course import exercises
        assert jax.device_count() == 1, jax.devices()
        for name in ("shard_map_pmean", "global_batch_array"):
            assert exercises.check(name, exercises.get(name).solution, seed=0) is False
            assert exercises.progress("04", verbose=False)[name] == "failed"
        print("ok")
    """)
    env = {key: value for key, value in os.environ.items() if key != "XLA_FLAGS"}
    env["JAX_PLATFORMS"] = "cpu"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr[-2000:]
    for name in ("shard_map_pmean", "global_batch_array"):
        (report,) = [line for line in result.stdout.splitlines() if line.startswith(f"FAIL  {name}")]
        assert "NotEnoughDevices" in report and "at least 2 devices" in report, report
        assert "--xla_force_host_platform_device_count=8" in report, report


def test_progress_reports_each_exercise_by_notebook(monkeypatch, capsys):
    from labcore import losses
    from labcore.course.exercises import checking

    monkeypatch.setattr(checking, "_RESULTS", {})
    assert set(exercises.progress(verbose=False).values()) == {"not tried"}
    assert list(exercises.progress(verbose=False)) == exercises.names()
    exercises.check("huber_loss", losses.huber_loss, seed=0, verbose=False)
    exercises.check("epsilon_schedule", lambda step, start, end, duration: start, seed=0, verbose=False)
    notebook_01 = exercises.progress("01", verbose=False)
    assert notebook_01 == exercises.progress("nb01_haiku_dqn", verbose=False)
    assert notebook_01 == {"replay_sample": "not tried", "epsilon_schedule": "failed", "huber_loss": "passed",
                           "dqn_update": "not tried"}
    capsys.readouterr()
    exercises.progress("01")
    printed = capsys.readouterr().out
    assert "nb01_haiku_dqn: 1 of 4 passed" in printed and "[x] huber_loss" in printed and "[!] epsilon_schedule" in printed
    with pytest.raises(ValueError, match="nb00_jax_primitives"):
        exercises.progress("99")


def test_scan_training_loop_refuses_an_unrolled_python_loop_and_accepts_fori_loop(capsys):
    # Same numbers, wrong lesson: a Python for is unrolled by jit into one copy of the step per step.
    def step(params, x, y, learning_rate):
        loss, grads = jax.value_and_grad(lambda p: jnp.mean((x @ p["w"] + p["b"] - y) ** 2))(params)
        return {k: params[k] - learning_rate * grads[k] for k in params}, loss

    def python_loop(params, xs, ys, learning_rate):
        losses = []
        for t in range(xs.shape[0]):
            params, loss = step(params, xs[t], ys[t], learning_rate)
            losses.append(loss)
        return params, jnp.stack(losses)

    def fori(params, xs, ys, learning_rate):
        xs, ys = jnp.asarray(xs), jnp.asarray(ys)  # indexed by a traced step below

        def body(t, carry):
            params, losses = carry
            params, loss = step(params, xs[t], ys[t], learning_rate)
            return params, losses.at[t].set(loss)

        return jax.lax.fori_loop(0, xs.shape[0], body, (params, jnp.zeros(xs.shape[0])))

    assert exercises.check("scan_training_loop", python_loop, seed=0) is False
    assert "UnrolledLoop" in capsys.readouterr().out
    assert exercises.check("scan_training_loop", fori, seed=0, verbose=False)


# ----------------------------------------------------------------------------------------------
# Notebook 10: find the bug. The catalogue-wide tests run each worked fix and each classic mistake;
# these check the broken functions as the notebook hands them out, other right fixes, GAE against
# float64, and the symptom each bug shows.
def pasted(broken):
    """``broken`` defined again from its source in a namespace holding only jax and jnp, as the
    notebook's cell defines it: proof that the handed-out source stands alone."""
    import inspect

    namespace = {"jax": jax, "jnp": jnp}
    exec(inspect.getsource(broken), namespace)
    return namespace[broken.__name__]


@pytest.mark.parametrize("name", sorted(nb10_debugging.BROKEN))
def test_nb10_broken_function_fails_its_check_and_is_named(name, capsys):
    broken = nb10_debugging.BROKEN[name]
    label, first_mistake = exercises.get(name).mistakes[0]
    assert first_mistake is broken  # check() names the first matching mistake: the handed-out bug
    assert exercises.check(name, pasted(broken), seed=0) is False
    out = capsys.readouterr().out
    assert out.startswith(f"FAIL  {name}") and f"this is a classic mistake: {label}" in out, out


def test_nb10_broken_sources_are_in_notebook_10_verbatim():
    # The notebook hands out each broken function in a code cell of its own, for the learner to edit.
    import inspect

    import nbformat

    from conftest import NOTEBOOKS_DIR

    found = sorted(NOTEBOOKS_DIR.glob("10_*.ipynb"))
    assert len(found) == 1, found
    sources = [cell.source for cell in nbformat.read(found[0], as_version=4).cells if cell.cell_type == "code"]
    for name, broken in nb10_debugging.BROKEN.items():
        assert any(inspect.getsource(broken).strip() in source for source in sources), name


def reused_key_fixed_by_one_edit(key, q_values, epsilon):
    # the broken function with its two lines fixed: split into three, carry the new key
    num_envs, num_actions = q_values.shape[1:]

    def step(key, q):
        key, coin_key, action_key = jax.random.split(key, 3)
        explore = jax.random.uniform(coin_key, (num_envs,)) < epsilon
        random_actions = jax.random.randint(action_key, (num_envs,), 0, num_actions)
        return key, jnp.where(explore, random_actions, jnp.argmax(q, axis=-1))

    return jax.lax.scan(step, key, q_values)[1]


def reused_key_fixed_with_indexed_keys(key, q_values, epsilon):
    def step(key, q):
        keys = jax.random.split(key, 3)
        explore = jax.random.uniform(keys[1], q.shape[:1]) < epsilon
        random_actions = jax.random.randint(keys[2], q.shape[:1], 0, q.shape[1])
        return keys[0], jnp.where(explore, random_actions, q.argmax(-1))

    return jax.lax.scan(step, key, q_values)[1]


def td_loss_stop_gradient_on_next_q(params, obs, actions, rewards, next_obs, terminated, gamma):
    q = obs @ params["w"] + params["b"]
    next_q = jax.lax.stop_gradient(next_obs @ params["w"] + params["b"])
    target = rewards + gamma * (1.0 - terminated) * next_q.max(axis=1)
    return jnp.mean(0.5 * (q[jnp.arange(q.shape[0]), actions] - target) ** 2)


def td_loss_frozen_params_for_the_target(params, obs, actions, rewards, next_obs, terminated, gamma):
    frozen = jax.lax.stop_gradient(params)
    q_taken = jnp.take_along_axis(obs @ params["w"] + params["b"], actions[:, None], axis=1)[:, 0]
    target = rewards + gamma * (1.0 - terminated) * (next_obs @ frozen["w"] + frozen["b"]).max(axis=1)
    return jnp.mean(0.5 * (q_taken - target) ** 2)


def gather_by_one_hot(q_values, actions):
    return jnp.sum(q_values * jax.nn.one_hot(actions, q_values.shape[1]), axis=1)


def gather_by_row_and_column(q_values, actions):
    return q_values[jnp.arange(q_values.shape[0]), actions]


def gae_python_loop(rewards, values, dones, last_value, gamma, lam):
    advantages, next_advantage, next_value = [], jnp.zeros_like(last_value), last_value
    for t in reversed(range(rewards.shape[0])):
        keep = 1.0 - dones[t].astype(jnp.float32)
        delta = rewards[t] + gamma * next_value * keep - values[t]
        next_advantage = delta + gamma * lam * keep * next_advantage
        next_value = values[t]
        advantages.append(next_advantage)
    return jnp.stack(advantages[::-1])


def masked_with_float32_minimum(logits, mask):
    return jax.nn.log_softmax(jnp.where(mask, logits, jnp.finfo(jnp.float32).min), axis=-1)


def masked_with_minus_infinity(logits, mask):
    return jax.nn.log_softmax(jnp.where(mask, logits, -jnp.inf), axis=-1)


def masked_with_minus_1e9(logits, mask):
    return jax.nn.log_softmax(jnp.where(mask, logits, -1e9), axis=-1)


def done_bootstrap_with_not(rewards, next_q, terminated, truncated, gamma):
    return rewards + gamma * ~terminated * next_q.max(axis=-1)


def done_bootstrap_with_where_on_the_target(rewards, next_q, terminated, truncated, gamma):
    return jnp.where(terminated, rewards, rewards + gamma * jnp.max(next_q, axis=-1))


def log_prob_by_log_softmax(logits, actions):
    return jnp.take_along_axis(jax.nn.log_softmax(logits), actions[:, None], axis=-1)[:, 0]


def log_prob_by_hand(logits, actions):
    shifted = logits - logits.max(axis=-1, keepdims=True)
    log_probs = shifted - jnp.log(jnp.exp(shifted).sum(axis=-1, keepdims=True))  # the largest term is 1
    return log_probs[jnp.arange(logits.shape[0]), actions]


@pytest.mark.parametrize(("name", "fix"), [
    ("fix_reused_key", reused_key_fixed_by_one_edit),
    ("fix_reused_key", reused_key_fixed_with_indexed_keys),
    ("fix_target_stop_gradient", td_loss_stop_gradient_on_next_q),
    ("fix_target_stop_gradient", td_loss_frozen_params_for_the_target),
    ("fix_gather_axis", gather_by_one_hot),
    ("fix_gather_axis", gather_by_row_and_column),
    ("fix_gae_off_by_one", gae_python_loop),
    ("fix_mask_after_softmax", masked_with_float32_minimum),
    ("fix_mask_after_softmax", masked_with_minus_infinity),
    ("fix_mask_after_softmax", masked_with_minus_1e9),
    ("fix_done_bootstrap", done_bootstrap_with_not),
    ("fix_done_bootstrap", done_bootstrap_with_where_on_the_target),
    ("fix_nan_log_prob", log_prob_by_log_softmax),
    ("fix_nan_log_prob", log_prob_by_hand),
], ids=lambda value: getattr(value, "__name__", value))
def test_nb10_other_right_fixes_pass(name, fix):
    assert exercises.check(name, fix, seed=0, trials=3, verbose=False)


def gae_float64(rewards, values, dones, last_value, gamma, lam):
    """GAE as a plain loop in float64 NumPy, the textbook recursion."""
    rewards, values, last_value = (np.asarray(x, np.float64) for x in (rewards, values, last_value))
    not_done = 1.0 - np.asarray(dones, np.float64)
    advantages = np.zeros_like(rewards)
    next_advantage, next_value = np.zeros_like(last_value), last_value
    for t in range(len(rewards) - 1, -1, -1):
        delta = rewards[t] + gamma * next_value * not_done[t] - values[t]
        next_advantage = advantages[t] = delta + gamma * lam * not_done[t] * next_advantage
        next_value = values[t]
    return advantages


def test_nb10_gae_matches_a_float64_numpy_loop():
    exercise = exercises.get("fix_gae_off_by_one")
    rng = np.random.default_rng(8)
    for _ in range(10):
        args = exercise.make_inputs(rng)
        want = gae_float64(*args)
        for fn in (exercise.reference, exercise.solution):
            np.testing.assert_allclose(np.asarray(fn(*args)), want, rtol=1e-5, atol=1e-5)
        assert np.abs(np.asarray(nb10_debugging.compute_gae(*args)) - want).max() > 1e-2


def test_nb10_symptoms_the_notebook_describes():
    # fix_reused_key, epsilon = 1 (every action random): with the key carried unchanged, each env
    # repeats its action at every step; a right answer repeats it about 1/A of the time.
    key, q_values = jax.random.key(0), jnp.zeros((40, 64, 4))
    for fn, low, high in ((nb10_debugging.epsilon_greedy_rollout, 1.0, 1.0), (reused_key_fixed_by_one_edit, 0.2, 0.3)):
        actions = np.asarray(fn(key, q_values, 1.0))
        assert low <= np.mean(actions[1:] == actions[:-1]) <= high, fn.__name__

    # fix_target_stop_gradient: the same loss value, a different gradient.
    args = exercises.get("fix_target_stop_gradient").make_inputs(np.random.default_rng(0))
    fixed, broken = td_loss_stop_gradient_on_next_q, nb10_debugging.td_loss
    np.testing.assert_allclose(broken(*args), fixed(*args), rtol=1e-6)
    assert not np.allclose(jax.grad(broken)(*args)["w"], jax.grad(fixed)(*args)["w"], rtol=1e-3)

    # fix_gather_axis: the right shape, but row 0's values.
    q_values, actions = jnp.arange(15.0).reshape(5, 3), jnp.array([2, 1, 0, 2, 1])
    np.testing.assert_array_equal(nb10_debugging.chosen_q_values(q_values, actions), q_values[0, actions])

    # fix_gae_off_by_one: a value function that is exactly right leaves every advantage 0.
    steps, gamma, last_value = 6, 0.9, jnp.array([2.0])
    values = (gamma ** jnp.arange(steps, 0, -1.0) * last_value)[:, None]
    args = (jnp.zeros((steps, 1)), values, jnp.zeros((steps, 1), bool), last_value, gamma, 0.95)
    np.testing.assert_allclose(gae_python_loop(*args), 0.0, atol=1e-6)
    wrong = np.asarray(nb10_debugging.compute_gae(*args))
    assert wrong[-1, 0] == 0.0 and np.all(np.abs(wrong[:-1]) > 1e-2)

    # fix_mask_after_softmax: the probabilities of a row with an illegal action sum to less than 1.
    logits, mask = jnp.array([[1.0, 2.0, 3.0]]), jnp.array([[True, True, False]])
    assert float(jnp.exp(nb10_debugging.masked_log_probs(logits, mask)).sum()) < 0.5
    np.testing.assert_allclose(jnp.exp(masked_with_minus_1e9(logits, mask)).sum(), 1.0, rtol=1e-6)

    # fix_done_bootstrap: a terminal transition's target is its reward alone.
    target = nb10_debugging.td_target(jnp.array([1.0]), jnp.array([[5.0, 7.0]]), jnp.array([True]), jnp.array([False]), 0.9)
    assert float(target[0]) != 1.0
    assert float(done_bootstrap_with_not(jnp.array([1.0]), jnp.array([[5.0, 7.0]]), jnp.array([True]), jnp.array([False]), 0.9)[0]) == 1.0

    # fix_nan_log_prob: -inf for an unlikely action, and a NaN gradient; the fix is finite.
    logits, actions = jnp.array([[0.0, 150.0, 1.0]]), jnp.array([0])
    assert float(nb10_debugging.action_log_probs(logits, actions)[0]) == -np.inf
    nan_grad = jax.grad(lambda x: nb10_debugging.action_log_probs(x, actions).sum())(logits)
    assert np.isnan(nan_grad).any()
    good_grad = jax.grad(lambda x: log_prob_by_log_softmax(x, actions).sum())(logits)
    assert np.isfinite(good_grad).all()
    np.testing.assert_allclose(log_prob_by_log_softmax(logits, actions), [-150.0], rtol=1e-6)
