"""Notebook 08 (accelerators): precision and memory on accelerators."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from labcore.course.exercises.checking import Exercise, jnp_f32


def _tf32_inputs(rng: np.random.Generator) -> tuple:
    size = int(rng.integers(8, 200))
    x = (rng.standard_normal(size) * 10.0 ** rng.uniform(-6, 6, size)).astype(np.float32)
    # Exact ties (the 13 dropped bits are 1000...0), where round-half-up and ties-to-even differ,
    # and values just below and above a tie.
    bits = x.view(np.uint32).copy()
    ties = rng.random(size) < 0.3
    bits[ties] = (bits[ties] & np.uint32(0xFFFFE000)) | np.uint32(0x1000)
    x = bits.view(np.float32)
    return (np.concatenate([x, np.float32([0.0, -0.0, 1.0, -3.0, 1.0 + 2.0**-11, 1.0 + 3 * 2.0**-11])]),)


def _tf32_reference(x):
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    lowest_kept = (bits >> 13) & 1  # ties go to the even neighbour
    rounded = ((bits + 0x0FFF + lowest_kept) & 0xFFFFE000).astype(np.uint32)
    return rounded.view(np.float32)


def _bf16_matmul_inputs(rng: np.random.Generator) -> tuple:
    m, k, n = (int(v) for v in rng.integers(1, 64, 3))
    # JAX arrays, so that an eager attempt runs JAX's matmul (NumPy's bfloat16 matmul answers in float32)
    return jnp_f32(rng.standard_normal((m, k)).astype(np.float32)), jnp_f32(rng.standard_normal((k, n)).astype(np.float32))


def _bf16_matmul_reference(x, w):
    import ml_dtypes

    # bfloat16 times bfloat16 is exact in float32 (8 + 8 significant bits): only the inputs' rounding
    # and the float32 sum remain, so float64 of the rounded inputs is the reference.
    rounded = [np.asarray(a, np.float32).astype(ml_dtypes.bfloat16).astype(np.float64) for a in (x, w)]
    return (rounded[0] @ rounded[1]).astype(np.float32)


def _minibatch_inputs(rng: np.random.Generator) -> tuple:
    num_envs = int(rng.choice([1, 3, 5, 6, 12, 16, 24, 32, 48, 64, 100]))
    num_steps = int(rng.choice([5, 7, 16, 32, 64, 100, 128]))
    return num_envs, num_steps, int(rng.integers(1, 33))


def _minibatch_reference(num_envs, num_steps, requested):
    batch = num_envs * num_steps
    return max(count for count in range(1, requested + 1) if batch % count == 0)


def _tree_bytes_inputs(rng: np.random.Generator) -> tuple:
    import ml_dtypes

    dtypes = [np.float32, np.float16, ml_dtypes.bfloat16, np.int8, np.uint8, np.int32, np.float64, np.bool_]
    tree = {}
    for layer in range(int(rng.integers(1, 5))):
        shape = tuple(int(s) for s in rng.integers(1, 40, int(rng.integers(0, 4))))
        dtype = dtypes[int(rng.integers(len(dtypes)))]
        tree[f"layer_{layer}"] = {"w": np.zeros(shape, dtype), "b": np.zeros(shape[-1:], np.float32)}
    return ([tree["layer_0"], tree],)


def _tree_bytes_reference(tree):
    return sum(int(np.size(leaf)) * np.dtype(leaf.dtype).itemsize for leaf in jax.tree_util.tree_leaves(tree))


# ----------------------------------------------------------------------------------------------
# Worked solutions, as a learner would write them, and the classic mistakes.


def round_to_tf32_solution(x):
    bits = jax.lax.bitcast_convert_type(x, jnp.uint32)
    lowest_kept_bit = (bits >> 13) & 1  # 1 when the kept part is odd: a tie then rounds up, to even
    bits = (bits + jnp.uint32(0x0FFF) + lowest_kept_bit) & jnp.uint32(0xFFFFE000)  # round, then drop 13 bits
    return jax.lax.bitcast_convert_type(bits, jnp.float32)


def round_to_tf32_truncated(x):
    return jax.lax.bitcast_convert_type(jax.lax.bitcast_convert_type(x, jnp.uint32) & jnp.uint32(0xFFFFE000), jnp.float32)


def round_to_tf32_ties_up(x):
    bits = jax.lax.bitcast_convert_type(x, jnp.uint32)
    return jax.lax.bitcast_convert_type((bits + jnp.uint32(0x1000)) & jnp.uint32(0xFFFFE000), jnp.float32)


def round_to_tf32_as_bfloat16(x):
    return x.astype(jnp.bfloat16).astype(jnp.float32)


def bf16_matmul_solution(x, w):
    x16, w16 = x.astype(jnp.bfloat16), w.astype(jnp.bfloat16)  # round the inputs
    return jnp.matmul(x16, w16, preferred_element_type=jnp.float32)  # sum the products in float32


def bf16_matmul_float32(x, w):
    return x @ w


def bf16_matmul_bfloat16_result(x, w):
    return (x.astype(jnp.bfloat16) @ w.astype(jnp.bfloat16)).astype(jnp.float32)


def fit_minibatches_solution(num_envs, num_steps, requested):
    batch = num_envs * num_steps
    count = requested
    while batch % count != 0:  # count 1 always divides, so this stops
        count -= 1
    return count


def fit_minibatches_gcd(num_envs, num_steps, requested):
    return math.gcd(num_envs * num_steps, requested)


def fit_minibatches_requested(num_envs, num_steps, requested):
    return requested


def tree_bytes_solution(tree):
    total = 0
    for leaf in jax.tree_util.tree_leaves(tree):
        total += leaf.size * leaf.dtype.itemsize  # elements x bytes per element of this leaf's dtype
    return total


def tree_bytes_four_each(tree):
    return sum(leaf.size * 4 for leaf in jax.tree_util.tree_leaves(tree))


def tree_bytes_element_count(tree):
    return sum(leaf.size for leaf in jax.tree_util.tree_leaves(tree))


def catalogue() -> list[Exercise]:
    """This notebook's exercises, in the order the notebook checks them."""
    return [
        Exercise(
            name="round_to_tf32",
            description="What a float32 value becomes as a TensorFloat-32 matmul input: x [N] float32 -> [N] float32 "
            "with only the top 10 of its 23 mantissa bits kept, rounded to the nearest such value, ties to even.\n"
            "View the bits as uint32 (jax.lax.bitcast_convert_type(x, jnp.uint32)). The 13 low bits go: add "
            "0x0FFF plus the lowest KEPT bit ((bits >> 13) & 1), then clear them with & 0xFFFFE000, and view the "
            "result as float32. Plain truncation (just the mask) is what you get wrong on half the inputs; "
            "adding 0x1000 rounds exact ties up instead of to even; bfloat16 keeps only 7 bits. "
            "jax.lax.reduce_precision(x, exponent_bits=8, mantissa_bits=10) computes the same: use it to test.",
            reference=_tf32_reference,
            make_inputs=_tf32_inputs,
            jit=True,
            rtol=0.0,
            atol=0.0,
            solution=round_to_tf32_solution,
            mistakes=(
                ("truncation: the 13 low bits are cleared without rounding", round_to_tf32_truncated),
                ("exact ties rounded up (adding 0x1000) instead of to even", round_to_tf32_ties_up),
                ("bfloat16, which keeps 7 mantissa bits instead of 10", round_to_tf32_as_bfloat16),
            ),
        ),
        Exercise(
            name="bf16_matmul",
            description="A mixed-precision matmul, as a bfloat16 layer computes: x [M, K] float32, w [K, N] float32 "
            "-> [M, N] float32, with both inputs rounded to bfloat16 and the products summed in float32.\n"
            "jnp.dot(x.astype(jnp.bfloat16), w.astype(jnp.bfloat16), preferred_element_type=jnp.float32). "
            "A plain float32 matmul is too exact here (the checker runs at full float32 precision, on a TPU too), and "
            "x.astype(bf16) @ w.astype(bf16) returns bfloat16: its result is rounded to 8 significant bits, "
            "which is the error mixed precision avoids by accumulating in float32.",
            reference=_bf16_matmul_reference,
            make_inputs=_bf16_matmul_inputs,
            jit=True,
            rtol=1e-4,
            atol=1e-4,
            solution=bf16_matmul_solution,
            mistakes=(
                ("a plain float32 matmul: the inputs are not rounded to bfloat16", bf16_matmul_float32),
                ("the product rounded to bfloat16 before the cast back to float32", bf16_matmul_bfloat16_result),
            ),
        ),
        Exercise(
            name="fit_minibatches",
            description="The minibatch count after shrinking PPO's batch: num_envs, num_steps, requested (ints) -> "
            "the largest count <= requested that divides num_envs * num_steps.\n"
            "Count down from requested until batch % count == 0. math.gcd(batch, requested) divides the "
            "batch too, but is not the largest such count (batch 2048, requested 6: gcd 2, answer 4).",
            reference=_minibatch_reference,
            make_inputs=_minibatch_inputs,
            trials=20,
            rtol=0.0,
            atol=0.0,
            solution=fit_minibatches_solution,
            mistakes=(
                ("math.gcd(batch, requested): a divisor, but not the largest one up to requested", fit_minibatches_gcd),
                ("requested as it is, whether or not it divides the batch", fit_minibatches_requested),
            ),
        ),
        Exercise(
            name="tree_bytes",
            description="Bytes a pytree of arrays occupies: tree (nested dicts of arrays of mixed dtypes) -> int.\n"
            "Sum leaf.size * leaf.dtype.itemsize over jax.tree_util.tree_leaves(tree). Counting elements, or "
            "assuming 4 bytes each, is wrong for bfloat16 (2), int8 and bool (1) and float64 (8) leaves; a "
            "scalar leaf (shape ()) still holds one element.",
            reference=_tree_bytes_reference,
            make_inputs=_tree_bytes_inputs,
            trials=10,
            rtol=0.0,
            atol=0.0,
            solution=tree_bytes_solution,
            mistakes=(
                ("4 bytes for every element, whatever the dtype", tree_bytes_four_each),
                ("the number of elements, not of bytes", tree_bytes_element_count),
            ),
        ),
    ]
