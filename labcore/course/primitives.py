"""Reference versions of the small functions notebook 00 asks learners to write.

Each one shows a JAX idiom in a few lines; ``labcore.course.exercises`` checks a
learner's version against these on fresh random inputs.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def stable_softmax(logits: jax.Array) -> jax.Array:
    """Softmax over the last axis that cannot overflow.

    Subtracting the row maximum leaves the result unchanged (it cancels in the
    ratio) but keeps every exponent <= 0, so ``exp`` never returns inf.

    logits: [..., N] float -> [..., N] float, rows summing to 1.
    """
    shifted = logits - jnp.max(logits, axis=-1, keepdims=True)
    exp = jnp.exp(shifted)
    return exp / jnp.sum(exp, axis=-1, keepdims=True)


def set_diagonal(matrix: jax.Array, values: jax.Array) -> jax.Array:
    """A copy of ``matrix`` with its main diagonal replaced by ``values``.

    JAX arrays are immutable; ``.at[rows, cols].set(v)`` returns a new array
    (and inside ``jit`` XLA turns it into an in-place write when it can).

    matrix: [N, N], values: [N] -> [N, N].
    """
    index = jnp.arange(matrix.shape[0])
    return matrix.at[index, index].set(values)


def dropout(key: jax.Array, x: jax.Array, rate: float) -> jax.Array:
    """Inverted dropout: zero each entry with probability ``rate``, scale the rest by 1/(1-rate).

    The mask is ``jax.random.bernoulli(key, 1 - rate, x.shape)``: the same key
    always gives the same mask, which is what makes JAX randomness reproducible.

    key: PRNG key, x: [...] float, rate in [0, 1) -> same shape as x.
    """
    keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
    return jnp.where(keep, x / (1.0 - rate), 0.0)


def linear_regression_loss(params: dict[str, jax.Array], x: jax.Array, y: jax.Array) -> jax.Array:
    """Mean squared error of ``x @ w + b`` against ``y``.

    params: {'w': [D], 'b': []}, x: [B, D], y: [B] -> scalar.
    """
    prediction = x @ params["w"] + params["b"]
    return jnp.mean((prediction - y) ** 2)


def linear_regression_grad(params: dict[str, jax.Array], x: jax.Array, y: jax.Array) -> dict[str, jax.Array]:
    """Gradient of ``linear_regression_loss`` with respect to ``params``: a dict like ``params``.

    ``jax.grad`` differentiates with respect to the first argument, whatever
    pytree it is, and returns a gradient of the same structure.
    """
    return jax.grad(linear_regression_loss)(params, x, y)


def pairwise_squared_distances(a: jax.Array, b: jax.Array) -> jax.Array:
    """Squared Euclidean distance between every row of ``a`` and every row of ``b``.

    Written for one pair of points, then lifted with two ``vmap``s: the inner
    one maps over ``b``'s rows, the outer over ``a``'s.

    a: [N, D], b: [M, D] -> [N, M].
    """

    def one_pair(u: jax.Array, v: jax.Array) -> jax.Array:
        return jnp.sum((u - v) ** 2)

    return jax.vmap(jax.vmap(one_pair, in_axes=(None, 0)), in_axes=(0, None))(a, b)


def global_norm(tree) -> jax.Array:
    """The L2 norm of all leaves of a pytree taken together (as in gradient clipping).

    tree: any pytree of arrays -> scalar.
    """
    leaves = jax.tree_util.tree_leaves(tree)
    return jnp.sqrt(sum(jnp.sum(jnp.square(leaf)) for leaf in leaves))
