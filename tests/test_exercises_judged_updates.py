"""The judged checkers of two core updates accept any right answer, whatever its key convention, and still
name each classic mistake.

``ppo_update_epoch`` (notebook 07) reads the learner's minibatches through a probe loss and accepts any
shuffle drawn from the key; ``noisy_linear_nnx`` (notebook 02) accepts any way of getting a key for each
of the two noise draws. Right answers below are written with the conventions the old checkers refused
(a split key, a folded key, an argsort of uniform draws; the keys split the other way round, fold_in 0
and 1); wrong ones are the catalogue's classic mistakes and the same mistakes written with other key
conventions, which must be named all the same.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from labcore.course import exercises
from labcore.course.lessons.nb02_flax_nnx import exercises as nb02_flax_nnx
from labcore.course.lessons.nb07_masked_ppo import ppo_epoch_checks


def passes(name: str, answer, capsys, seed: int = 0) -> None:
    assert exercises.check(name, answer, seed=seed) is True, capsys.readouterr().out
    assert capsys.readouterr().out.startswith(f"PASS  {name}")


def fails(name: str, answer, capsys, seed: int = 0) -> str:
    """The checker's printed verdict on a wrong answer (which must fail without raising)."""
    assert exercises.check(name, answer, seed=seed) is False
    out = capsys.readouterr().out
    assert out.startswith(f"FAIL  {name}"), out
    return out


# ----------------------------------------------------------------------------------------------
# ppo_update_epoch


def epoch_shuffled_by(draw_order, carry_opt_state: bool = True):
    """A right epoch (a scan over index rows) whose shuffle is ``draw_order(key, N)``; with
    carry_opt_state=False, one that restarts every step from the epoch's initial optimizer state."""

    def epoch(params, opt_state, batch, key, loss_fn, optimizer, num_minibatches):
        batch_size = jax.tree_util.tree_leaves(batch)[0].shape[0]
        index_rows = draw_order(key, batch_size).reshape(num_minibatches, batch_size // num_minibatches)
        first_state = opt_state

        def step(carry, rows):
            params, opt_state = carry
            grads = jax.grad(loss_fn)(params, jax.tree_util.tree_map(lambda leaf: leaf[rows], batch))
            updates, new_state = optimizer.update(grads, opt_state if carry_opt_state else first_state, params)
            return (optax.apply_updates(params, updates), new_state), None

        return jax.lax.scan(step, (params, opt_state), index_rows)[0]

    return epoch


def permutation_with_a_split_key(key, n):
    _, shuffle_key = jax.random.split(key)  # the old checker's "mistake": a right answer
    return jax.random.permutation(shuffle_key, n)


def permutation_with_a_folded_key(key, n):
    return jax.random.permutation(jax.random.fold_in(key, 3), n)


def argsort_of_uniform_draws(key, n):
    return jnp.argsort(jax.random.uniform(key, (n,)))


RIGHT_EPOCHS = [permutation_with_a_split_key, permutation_with_a_folded_key, argsort_of_uniform_draws]


@pytest.mark.parametrize("draw_order", RIGHT_EPOCHS, ids=lambda f: f.__name__)
def test_ppo_update_epoch_accepts_any_shuffle_drawn_from_the_key(draw_order, capsys):
    passes("ppo_update_epoch", epoch_shuffled_by(draw_order), capsys)


def test_ppo_update_epoch_accepts_a_python_loop_over_minibatches_of_a_folded_permutation(capsys):
    def epoch(params, opt_state, batch, key, loss_fn, optimizer, num_minibatches):
        n = batch["advantage"].shape[0]
        order = jax.random.permutation(jax.random.fold_in(key, 0), n)
        for rows in jnp.split(order, num_minibatches):
            minibatch = {name: values[rows] for name, values in batch.items()}
            updates, opt_state = optimizer.update(jax.grad(loss_fn)(params, minibatch), opt_state, params)
            params = optax.apply_updates(params, updates)
        return params, opt_state

    passes("ppo_update_epoch", epoch, capsys, seed=1)


def test_ppo_update_epoch_refuses_a_shuffle_that_ignores_the_key(capsys):
    fixed_shuffle = epoch_shuffled_by(lambda key, n: jax.random.permutation(jax.random.key(0), n))
    out = fails("ppo_update_epoch", fixed_shuffle, capsys)
    assert "two different keys gave the same minibatches" in out, out


def test_ppo_update_epoch_names_an_optimizer_mistake_over_the_learners_own_minibatches(capsys):
    # an answer with its own shuffle (argsort of uniform draws) that drops the optimizer state
    out = fails("ppo_update_epoch", epoch_shuffled_by(argsort_of_uniform_draws, carry_opt_state=False), capsys)
    assert "the optimizer state is not carried from step to step" in out, out


def test_the_split_key_shuffle_is_no_longer_listed_as_a_mistake():
    labels = [label for label, _ in exercises.get("ppo_update_epoch").mistakes]
    assert not any("split" in label for label in labels), labels
    assert len(labels) >= 2 and exercises.get("ppo_update_epoch").core


@pytest.mark.parametrize("label", [label for label, _ in exercises.get("ppo_update_epoch").mistakes])
def test_ppo_update_epoch_names_each_classic_mistake(label, capsys):
    wrong = dict(exercises.get("ppo_update_epoch").mistakes)[label]
    out = fails("ppo_update_epoch", wrong, capsys)
    assert f"this is a classic mistake: {label}" in out, out


# The same mistakes written otherwise, with other key conventions: named all the same.


def unshuffled_in_a_scan(params, opt_state, batch, key, loss_fn, optimizer, num_minibatches):
    return epoch_shuffled_by(lambda key, n: jnp.arange(n))(params, opt_state, batch, key, loss_fn, optimizer,
                                                          num_minibatches)


def permutation_per_minibatch_folded(params, opt_state, batch, key, loss_fn, optimizer, num_minibatches):
    n = batch["obs"].shape[0]
    size = n // num_minibatches
    for step in range(num_minibatches):
        rows = jax.random.permutation(jax.random.fold_in(key, step), n)[:size]
        minibatch = {name: values[rows] for name, values in batch.items()}
        updates, opt_state = optimizer.update(jax.grad(loss_fn)(params, minibatch), opt_state, params)
        params = optax.apply_updates(params, updates)
    return params, opt_state


def whole_batch_in_a_scan(params, opt_state, batch, key, loss_fn, optimizer, num_minibatches):
    def step(carry, _):
        params, opt_state = carry
        updates, opt_state = optimizer.update(jax.grad(loss_fn)(params, batch), opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), None

    return jax.lax.scan(step, (params, opt_state), None, length=num_minibatches)[0]


def averaged_step_of_an_argsort_shuffle(params, opt_state, batch, key, loss_fn, optimizer, num_minibatches):
    n = batch["obs"].shape[0]
    index_rows = argsort_of_uniform_draws(key, n).reshape(num_minibatches, -1)
    def minibatch_grads(rows):
        return jax.grad(loss_fn)(params, jax.tree_util.tree_map(lambda v: v[rows], batch))

    grads = jax.vmap(minibatch_grads)(index_rows)
    updates, opt_state = optimizer.update(jax.tree_util.tree_map(lambda g: g.mean(axis=0), grads), opt_state, params)
    return optax.apply_updates(params, updates), opt_state


EPOCH_MISTAKES_WRITTEN_OTHERWISE = [
    (unshuffled_in_a_scan, "no shuffling"),
    (permutation_per_minibatch_folded, "a new permutation for every minibatch"),
    (whole_batch_in_a_scan, "the gradient of the whole batch"),
    (averaged_step_of_an_argsort_shuffle, "one step on the minibatches' averaged gradients"),
]


@pytest.mark.parametrize(("wrong", "words"), EPOCH_MISTAKES_WRITTEN_OTHERWISE, ids=lambda v: getattr(v, "__name__", ""))
def test_ppo_update_epoch_names_a_mistake_whatever_its_key_convention(wrong, words, capsys):
    out = fails("ppo_update_epoch", wrong, capsys)
    assert "this is a classic mistake: " in out and words in out, out


def test_the_probe_reads_the_minibatches_an_epoch_used():
    # An epoch over a known order: the probe's parameters say which step used each row, once each.
    order = np.random.default_rng(0).permutation(12)

    def known_order(params, opt_state, batch, key, loss_fn, optimizer, num_minibatches):
        return ppo_epoch_checks.epoch_in_order(params, opt_state, batch, jnp.asarray(order), loss_fn, optimizer,
                                               num_minibatches)

    like = {"obs": np.zeros((12, 2), np.float32), "action": np.zeros(12, np.int32)}
    problem, uses, steps = ppo_epoch_checks.minibatches_used(known_order, jax.random.key(0), like, 12, 3)
    assert problem is None and steps == 3.0
    expected = np.zeros((12, 3))
    expected[order, np.arange(12) // 4] = 1.0
    np.testing.assert_array_equal(uses, expected)
    assert ppo_epoch_checks.minibatch_problem(uses, steps, 3) is None


# ----------------------------------------------------------------------------------------------
# noisy_linear_nnx


class KeysSplitTheOtherWay(nb02_flax_nnx.NoisyLinear):
    def noise(self, key):
        bias_key, kernel_key = jax.random.split(key)
        return (jax.random.normal(kernel_key, (self.in_features, self.out_features)),
                jax.random.normal(bias_key, (self.out_features,)))


class KeysFoldedIn(nb02_flax_nnx.NoisyLinear):
    def noise(self, key):
        return (jax.random.normal(jax.random.fold_in(key, 0), self.kernel.shape),
                jax.random.normal(jax.random.fold_in(key, 1), self.bias.shape))


class OneDrawCutInTwo(nb02_flax_nnx.NoisyLinear):
    """One normal draw of in * out + out numbers, cut into the kernel's and the bias's: independent too."""

    def noise(self, key):
        n_in, n_out = self.in_features, self.out_features
        draws = jax.random.normal(key, (n_in * n_out + n_out,))
        return draws[: n_in * n_out].reshape(n_in, n_out), draws[n_in * n_out:]


@pytest.mark.parametrize("layer", [KeysSplitTheOtherWay, KeysFoldedIn, OneDrawCutInTwo], ids=lambda c: c.__name__)
def test_noisy_linear_accepts_any_way_of_drawing_the_two_noises(layer, capsys):
    passes("noisy_linear_nnx", layer, capsys)


@pytest.mark.parametrize("label", [label for label, _ in exercises.get("noisy_linear_nnx").mistakes])
def test_noisy_linear_names_each_classic_mistake(label, capsys):
    wrong = dict(exercises.get("noisy_linear_nnx").mistakes)[label]
    out = fails("noisy_linear_nnx", wrong, capsys)
    assert f"this is a classic mistake: {label}" in out, out


class NoBiasNoiseFoldedIn(KeysFoldedIn):
    def __call__(self, x, noise_key=None):
        if noise_key is None:
            return x @ self.kernel[...] + self.bias[...]
        eps_kernel, _ = self.noise(noise_key)
        return x @ (self.kernel[...] + self.sigma_kernel[...] * eps_kernel) + self.bias[...]


class FactorisedNoiseFoldedIn(nb02_flax_nnx.NoisyLinear):
    def noise(self, key):
        f = lambda e: jnp.sign(e) * jnp.sqrt(jnp.abs(e))  # noqa: E731
        eps_in = f(jax.random.normal(jax.random.fold_in(key, 1), (self.in_features,)))
        eps_out = f(jax.random.normal(jax.random.fold_in(key, 2), (self.out_features,)))
        return eps_in[:, None] * eps_out[None, :], eps_out


class SplitKeyDrawnTwice(nb02_flax_nnx.NoisyLinear):
    def noise(self, key):
        kernel_key, _ = jax.random.split(key)
        return (jax.random.normal(kernel_key, (self.in_features, self.out_features)),
                jax.random.normal(kernel_key, (self.out_features,)))


NOISE_MISTAKES_WRITTEN_OTHERWISE = [
    (NoBiasNoiseFoldedIn, "no noise on the bias"),
    (FactorisedNoiseFoldedIn, "factorised noise"),
    (SplitKeyDrawnTwice, "one key for both draws"),
]


@pytest.mark.parametrize(("wrong", "label"), NOISE_MISTAKES_WRITTEN_OTHERWISE, ids=lambda v: getattr(v, "__name__", ""))
def test_noisy_linear_names_a_mistake_whatever_its_key_convention(wrong, label, capsys):
    out = fails("noisy_linear_nnx", wrong, capsys)
    assert "this is a classic mistake: " in out and label in out, out


class OneFoldedKeyForBoth(nb02_flax_nnx.NoisyLinear):
    def noise(self, key):  # two key objects with the same data: the checker's key tracking does not see it
        return (jax.random.normal(jax.random.fold_in(key, 0), self.kernel.shape),
                jax.random.normal(jax.random.fold_in(key, 0), self.bias.shape))


class UniformNoiseOfVarianceOne(nb02_flax_nnx.NoisyLinear):
    def noise(self, key):
        kernel_key, bias_key = jax.random.split(key)
        bound = 3.0**0.5  # U(-sqrt 3, sqrt 3): mean 0 and variance 1, but not normal
        return (jax.random.uniform(kernel_key, self.kernel.shape, minval=-bound, maxval=bound),
                jax.random.uniform(bias_key, self.bias.shape, minval=-bound, maxval=bound))


def test_noisy_linear_refuses_draws_shared_through_equal_keys(capsys):
    out = fails("noisy_linear_nnx", OneFoldedKeyForBoth, capsys)
    assert "eps_bias repeats numbers of eps_kernel" in out, out


def test_noisy_linear_refuses_noise_that_is_not_normal(capsys):
    out = fails("noisy_linear_nnx", UniformNoiseOfVarianceOne, capsys)
    assert "beyond 2 in size" in out and "not normal" in out, out
