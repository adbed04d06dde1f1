"""Notebook 00 (jax_primitives): arrays, randomness, grad and vmap; the references are labcore.course.primitives.

The ``*_solution`` functions are the worked answers that ``labcore.course.exercises.solution(name)`` shows,
written as a learner would write them in the notebook.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from labcore.course.exercises import behaviour
from labcore.course.exercises.checking import Exercise, jnp_f32


def _softmax_inputs(rng: np.random.Generator) -> tuple:
    rows, cols = rng.integers(1, 8), rng.integers(2, 12)
    # Logits in the hundreds: exp overflows float32 (max ~88.7) unless shifted first.
    scale = rng.choice([1.0, 50.0, 300.0])
    return (jnp_f32(rng.normal(size=(rows, cols)) * scale + rng.uniform(-500, 500)),)


def _diagonal_inputs(rng: np.random.Generator) -> tuple:
    n = rng.integers(1, 9)
    return jnp_f32(rng.normal(size=(n, n))), jnp_f32(rng.normal(size=n))


def _dropout_inputs(rng: np.random.Generator) -> tuple:
    import jax

    shape = tuple(rng.integers(1, 9, size=rng.integers(1, 4)))
    return jax.random.key(int(rng.integers(2**31))), jnp_f32(rng.normal(size=shape)), float(rng.choice([0.1, 0.5, 0.8]))


def judge_dropout(dropout, rng: np.random.Generator) -> str | None:
    """Any inverted dropout passes, however it draws its mask from the key: every entry is 0 or
    x / (1 - rate), kept with probability 1 - rate, each entry with its own draw, the same key giving
    the same mask and another key another mask."""
    rate = float(rng.choice([0.1, 0.5, 0.8]))
    keep = 1.0 - rate
    # 1. Values, on an input of random shape: each entry is dropped (0) or scaled up by 1 / (1 - rate).
    (key, x, _) = _dropout_inputs(rng)
    problem, out = behaviour.key_reuse_problem(dropout, key, x, rate)
    if problem:
        return problem
    problem = behaviour.shape_problem(out, x.shape, "f")
    if problem:
        return problem
    out, x = np.asarray(out), np.asarray(x)
    kept = out != 0
    if not np.allclose(out[kept], x[kept] / keep, rtol=1e-5, atol=1e-6):
        if np.allclose(out[kept], x[kept], rtol=1e-5, atol=1e-6):
            return ("the kept entries equal x: inverted dropout divides them by 1 - rate, so that the "
                    "output's expectation is x")
        if np.allclose(out[kept], x[kept] * keep, rtol=1e-5, atol=1e-6):
            return "the kept entries are x * (1 - rate): inverted dropout divides by 1 - rate"
        return f"with rate {rate}, an output entry is neither 0 nor x / (1 - rate)"
    # 2. Statistics, on a [256, 512] input of ones: 131,072 coins.
    big = jax.numpy.ones((256, 512), jax.numpy.float32)
    key = jax.random.key(int(rng.integers(2**31)))
    mask = np.asarray(dropout(behaviour.copy_key(key), big, rate)) != 0
    for axis, name in ((0, "row"), (1, "column")):
        if np.all(mask == np.take(mask, [0], axis=axis)):
            return (f"every {name} of a [256, 512] input gets the same mask: one coin is shared where each "
                    "entry needs its own (draw the mask with x's whole shape)")
    problem = behaviour.frequency_problem(int(mask.sum()), mask.size, keep,
                                          f"with rate {rate}, the fraction of entries kept")
    if problem:
        return problem
    agree = int(np.sum(mask[1:] == mask[:-1]))
    problem = behaviour.frequency_problem(agree, mask[1:].size, keep**2 + rate**2,
                                          "the fraction of entries whose mask equals the next row's")
    if problem:
        return problem + ": the rows' masks are not independent"
    # 3. The mask is a function of the key: the same key again gives it, another key another one.
    if not np.array_equal(np.asarray(dropout(behaviour.copy_key(key), big, rate)) != 0, mask):
        return "the same key gave two different masks: the mask must come from `key` alone"
    other = np.asarray(dropout(jax.random.fold_in(key, 1), big, rate)) != 0
    if np.array_equal(other, mask):
        return "two different keys gave the same mask: the mask is not drawn from `key`"
    return None


def dropout_keeping_rate(key, x, rate):
    return x * jax.random.bernoulli(key, rate, x.shape) / (1.0 - rate)


def dropout_unscaled(key, x, rate):
    return x * jax.random.bernoulli(key, 1.0 - rate, x.shape)


def dropout_one_coin_per_column(key, x, rate):
    return x * jax.random.bernoulli(key, 1.0 - rate, x.shape[-1:]) / (1.0 - rate)


def dropout_key_reused_for_halves(key, x, rate):
    flat = x.reshape(-1)
    half = flat.size // 2
    first = jax.random.bernoulli(key, 1.0 - rate, (half,))
    second = jax.random.bernoulli(key, 1.0 - rate, (flat.size - half,))  # the same key again
    return (flat * jnp.concatenate([first, second]) / (1.0 - rate)).reshape(x.shape)


def _regression_inputs(rng: np.random.Generator) -> tuple:
    batch, dim = rng.integers(1, 33), rng.integers(1, 9)
    params = {"w": jnp_f32(rng.normal(size=dim)), "b": jnp_f32(rng.normal())}
    return params, jnp_f32(rng.normal(size=(batch, dim))), jnp_f32(rng.normal(size=batch))


def _pairwise_inputs(rng: np.random.Generator) -> tuple:
    n, m, dim = rng.integers(1, 9), rng.integers(1, 9), rng.integers(1, 6)
    return jnp_f32(rng.normal(size=(n, dim))), jnp_f32(rng.normal(size=(m, dim)))


def _pytree_inputs(rng: np.random.Generator) -> tuple:
    def leaf():
        return jnp_f32(rng.normal(size=tuple(rng.integers(1, 5, size=rng.integers(0, 3)))))

    tree = {
        "encoder": [leaf() for _ in range(rng.integers(1, 4))],
        "head": {"w": leaf(), "b": leaf()},
        "scale": leaf(),
    }
    return (tree,)


# ----------------------------------------------------------------------------------------------
# Worked solutions, in the order the notebook sets the exercises.


def stable_softmax_solution(logits):
    # Subtracting the row's maximum changes nothing in the ratio, and keeps every exponent <= 0.
    shifted = logits - logits.max(axis=-1, keepdims=True)
    e = jnp.exp(shifted)
    return e / e.sum(axis=-1, keepdims=True)


def set_diagonal_solution(matrix, values):
    i = jnp.arange(matrix.shape[0])
    return matrix.at[i, i].set(values)  # a new array: matrix itself is unchanged


def dropout_solution(key, x, rate):
    keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)  # True with probability 1 - rate
    return x * keep / (1.0 - rate)


def linear_regression_grad_solution(params, x, y):
    def loss(p):
        return jnp.mean((x @ p["w"] + p["b"] - y) ** 2)

    return jax.grad(loss)(params)  # a dict with the keys and shapes of params


def pairwise_squared_distances_solution(a, b):
    def one_pair(u, v):
        return jnp.sum((u - v) ** 2)

    one_against_all_b = jax.vmap(one_pair, in_axes=(None, 0))
    return jax.vmap(one_against_all_b, in_axes=(0, None))(a, b)


def global_norm_solution(tree):
    squares = [jnp.sum(leaf**2) for leaf in jax.tree_util.tree_leaves(tree)]
    return jnp.sqrt(sum(squares))


def catalogue() -> list[Exercise]:
    """This notebook's exercises, in the order the notebook checks them."""
    from labcore.course import primitives

    return [
        Exercise(
            name="stable_softmax",
            description="Softmax over the last axis that does not overflow for logits in the hundreds.\n"
            "exp(1000.) is inf in float32; subtract each row's max (keepdims=True) before exp.",
            reference=primitives.stable_softmax,
            solution=stable_softmax_solution,
            make_inputs=_softmax_inputs,
            jit=True,
        ),
        Exercise(
            name="set_diagonal",
            description="Return a copy of a square matrix with its diagonal replaced by a vector.\n"
            "JAX arrays are immutable: use matrix.at[rows, cols].set(values) with index arrays.",
            reference=primitives.set_diagonal,
            solution=set_diagonal_solution,
            make_inputs=_diagonal_inputs,
            jit=True,
        ),
        Exercise(
            name="dropout",
            description="Inverted dropout: zero entries with probability `rate`, scale the rest by 1/(1-rate).\n"
            "Draw a keep-mask of x's shape from `key`, for example jax.random.bernoulli(key, 1 - rate, x.shape) "
            "(True with probability 1 - rate). Any way of drawing it from the key passes: the checker looks at "
            "what the mask does (values 0 or x / (1 - rate), the fraction kept, one coin per entry, the same "
            "key giving the same mask), not at which draws you made.",
            reference=primitives.dropout,
            solution=dropout_solution,
            make_inputs=_dropout_inputs,
            judge=judge_dropout,
            mistakes=(
                ("keeps each entry with probability `rate` instead of 1 - rate", dropout_keeping_rate),
                ("the kept entries are not scaled: the output's expectation is (1 - rate) * x", dropout_unscaled),
                ("one coin per column, shared by every row", dropout_one_coin_per_column),
                ("one key for two draws: the mask of the first half and of the second half are the same coins",
                 dropout_key_reused_for_halves),
            ),
        ),
        Exercise(
            name="linear_regression_grad",
            description="Gradient of the mean squared error of x @ w + b with respect to params {'w', 'b'}.\n"
            "Write the loss as a function of params first, then return jax.grad(loss)(params, x, y): "
            "a dict with the same keys and shapes as params.",
            reference=primitives.linear_regression_grad,
            solution=linear_regression_grad_solution,
            make_inputs=_regression_inputs,
            jit=True,
        ),
        Exercise(
            name="pairwise_squared_distances",
            description="Squared distances between every row of a [N, D] and every row of b [M, D] -> [N, M].\n"
            "Write the distance of one pair of vectors, then vmap it twice: in_axes=(None, 0) inside, "
            "in_axes=(0, None) outside.",
            reference=primitives.pairwise_squared_distances,
            solution=pairwise_squared_distances_solution,
            make_inputs=_pairwise_inputs,
            jit=True,
            # The expansion |a|^2 + |b|^2 - 2 a.b is also right, but in float32 it cancels: its error
            # is about eps * (|a|^2 + |b|^2) <= 1.2e-7 * 2 * 5 * 4^2 ~ 2e-5 for these inputs (D <= 5,
            # entries within 4 sigma). 1e-4 accepts it; the classic wrong answers (transposed, not
            # squared, a mean instead of a sum) are off by order 1.
            atol=1e-4,
        ),
        Exercise(
            name="global_norm",
            description="The L2 norm of all the leaves of a pytree taken together (a scalar).\n"
            "jax.tree_util.tree_leaves(tree) gives the arrays; sum their squared entries, then take sqrt.",
            reference=primitives.global_norm,
            solution=global_norm_solution,
            make_inputs=_pytree_inputs,
            jit=True,
        ),
    ]
