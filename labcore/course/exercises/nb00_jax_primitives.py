"""Notebook 00 (jax_primitives): arrays, randomness, grad and vmap; the references are labcore.course.primitives.

The ``*_solution`` functions are the worked answers that ``labcore.course.exercises.solution(name)`` shows,
written as a learner would write them in the notebook.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

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
            "Draw the keep-mask with jax.random.bernoulli(key, 1 - rate, x.shape); the same key must give "
            "the same mask as the reference.",
            reference=primitives.dropout,
            solution=dropout_solution,
            make_inputs=_dropout_inputs,
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
