"""What notebook 07's core exercise, ``ppo_update_epoch``, asks of a learner's epoch, judged by behaviour.

Which permutation shuffles the batch is the learner's choice: ``jax.random.permutation(key, N)``, a
permutation with a key split or folded from ``key``, an argsort of uniform draws all pass. The judge asks
what every right answer does, whatever its convention:

1. one optimizer step per minibatch, ``num_minibatches`` of them, each on ``N // num_minibatches`` rows,
   every row used exactly once in the epoch;
2. a real shuffle: not the stored order, the same minibatches for the same key and others for another key;
3. given the learner's own minibatches, the (params, opt_state) that the reference epoch reaches over the
   same minibatches, on the exercise's inputs (so a wrong gradient or optimizer step is still caught by value).

The learner's minibatches are read without instrumenting their code: their function runs on a probe, a
batch whose ``obs`` is the identity matrix (row r is one-hot at r), with ``probe_loss`` and plain SGD at
learning rate 1, whose gradients are chosen so that the parameters after the epoch record how many
optimizer steps were taken and how often each row was in the minibatch of each step.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from labcore.course.exercises import behaviour
from labcore.course.exercises.checking import first_mismatch


def epoch_in_order(params, opt_state, batch, order, loss_fn, optimizer, num_minibatches):
    """The reference epoch over the rows of ``batch`` taken in ``order`` (a permutation of 0 .. N - 1), cut
    into ``num_minibatches`` consecutive minibatches, one optimizer step on each in turn."""
    batch_size = order.shape[0]

    def to_minibatches(leaf):
        return leaf[order].reshape(num_minibatches, batch_size // num_minibatches, *leaf.shape[1:])

    def minibatch_step(carry, minibatch):
        params, opt_state = carry
        grads = jax.grad(loss_fn)(params, minibatch)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), None

    (params, opt_state), _ = jax.lax.scan(
        minibatch_step, (params, opt_state), jax.tree_util.tree_map(to_minibatches, batch)
    )
    return params, opt_state


def epoch_in_order_state_not_carried(params, opt_state, batch, order, loss_fn, optimizer, num_minibatches):
    """``epoch_in_order`` with the classic slip: every step updates from the incoming optimizer state."""
    batch_size = order.shape[0]

    def to_minibatches(leaf):
        return leaf[order].reshape(num_minibatches, batch_size // num_minibatches, *leaf.shape[1:])

    def minibatch_step(params, minibatch):
        updates, state = optimizer.update(jax.grad(loss_fn)(params, minibatch), opt_state, params)
        return optax.apply_updates(params, updates), state

    params, states = jax.lax.scan(minibatch_step, params, jax.tree_util.tree_map(to_minibatches, batch))
    return params, jax.tree_util.tree_map(lambda leaf: leaf[-1], states)


# The loss, the optimizer and the number of minibatches are static, as in the exercise's own jit.
_epoch_in_order_jitted = jax.jit(epoch_in_order, static_argnums=(4, 5, 6))


# ----------------------------------------------------------------------------------------------
# The probe: the parameters after the epoch say which rows each step used.


def probe_loss(params, minibatch):
    """A loss whose SGD steps (learning rate 1) record the epoch: params {"step": [], "used_at": [N, M]};
    minibatch["obs"] [S, N], one-hot rows of the identity.

    d/d step = -1, so each step adds 1 to ``step``: it counts the steps taken, and during the step j
    (counted from 0) it equals j. d/d used_at[r, j] = (the number of times row r is in this minibatch) if the
    step is j, else 0, so each step subtracts its rows' counts from its own column: after the epoch,
    -used_at[r, j] is how many times row r was used at step j. stop_gradient keeps the step's one-hot out of
    the gradient of ``step``.
    """
    rows_in_minibatch = jnp.sum(minibatch["obs"], axis=0)  # [N]: each row of the batch, how often it is here
    steps = params["used_at"].shape[1]
    this_step = jax.lax.stop_gradient((params["step"] == jnp.arange(steps)).astype(jnp.float32))  # [M] one-hot
    return -params["step"] + jnp.sum(params["used_at"] * rows_in_minibatch[:, None] * this_step[None, :])


@functools.cache
def probe_optimizer() -> optax.GradientTransformation:
    """Plain SGD at learning rate 1: each step subtracts the gradient, exactly (one object, so that the
    learner's jit, with the optimizer static, compiles once per shape)."""
    return optax.sgd(1.0)


def probe_batch(like: dict[str, Any], batch_size: int) -> dict[str, jax.Array]:
    """A batch with the fields of ``like`` (a learner may read any of them for N), zeros, whose ``obs`` is
    the [N, N] identity: row r of every minibatch says which row of the batch it is."""
    batch = {name: jnp.zeros((batch_size, *np.shape(leaf)[1:]), jnp.asarray(leaf).dtype) for name, leaf in like.items()}
    batch["obs"] = jnp.eye(batch_size, dtype=jnp.float32)
    return batch


def minibatches_used(epoch: Callable[..., Any], key: jax.Array, like: dict[str, Any], batch_size: int,
                     num_minibatches: int) -> tuple[str | None, np.ndarray | None, float]:
    """Run ``epoch`` on the probe: (None, uses [N, M], steps), where uses[r, j] is how many times row r was
    in step j's minibatch and steps how many optimizer steps were taken; or (what is wrong, None, 0.0)."""
    params = {"step": jnp.zeros((), jnp.float32), "used_at": jnp.zeros((batch_size, num_minibatches), jnp.float32)}
    optimizer = probe_optimizer()
    out = jax.block_until_ready(epoch(params, optimizer.init(params), probe_batch(like, batch_size), key,
                                      probe_loss, optimizer, num_minibatches))
    if not isinstance(out, tuple | list) or len(out) != 2 or not isinstance(out[0], dict) or set(out[0]) != set(params):
        return ("the epoch does not return (params, opt_state), the parameters it was given after the steps "
                "and the optimizer state"), None, 0.0
    return None, -np.asarray(out[0]["used_at"], np.float64), float(out[0]["step"])


def minibatch_problem(uses: np.ndarray, steps: float, num_minibatches: int) -> str | None:
    """None if the epoch took ``num_minibatches`` steps on minibatches of N // num_minibatches rows that hold
    every row once; else what is wrong (the same words for the same fault, whatever the shuffle), on the
    batch named: N rows in num_minibatches minibatches."""
    batch_size = uses.shape[0]
    size = batch_size // num_minibatches
    problem = _minibatch_fault(uses, steps, num_minibatches, batch_size, size)
    return None if problem is None else f"on a batch of {batch_size} rows in {num_minibatches} minibatches, {problem}"


def _minibatch_fault(uses: np.ndarray, steps: float, num_minibatches: int, batch_size: int, size: int) -> str | None:
    if not np.isclose(steps, num_minibatches):
        return (f"the epoch takes {steps:g} optimizer step{'' if steps == 1 else 's'} with num_minibatches = "
                f"{num_minibatches}, where it takes one step per minibatch, in turn")
    if not np.allclose(uses, np.round(uses), atol=1e-4) or uses.min() < -1e-4:
        return "a step's gradient is not that of whole rows of the batch: each minibatch is rows of the batch"
    uses = np.round(uses)
    rows_per_step = uses.sum(axis=0)
    if np.all(rows_per_step == batch_size):
        return (f"every step's minibatch holds the whole batch ({batch_size} rows), where each holds "
                f"N // num_minibatches = {size} rows")
    if np.any(rows_per_step != size):
        step = int(np.argmax(rows_per_step != size))
        return (f"the minibatch of step {step} holds {rows_per_step[step]:g} rows, where each holds "
                f"N // num_minibatches = {size}")
    if np.any(uses.sum(axis=1) != 1):
        return ("some rows of the batch are never used in the epoch and others more than once: shuffle once per "
                "epoch and cut that one order into the minibatches, so that every row is in exactly one")
    return None


# ----------------------------------------------------------------------------------------------
# The judge.

# The shuffle is read on one probe shape, 48 rows in 3 minibatches of 16, so that it compiles once per
# check, not once per trial. A random permutation puts the rows in their stored minibatches with
# probability 16!^3 / 48! ~ 7e-22, and two keys' shuffles in the same ones as rarely: a right answer is
# never taken for one that does not shuffle, or that ignores its key.
_PROBE_ROWS, _PROBE_MINIBATCHES = 48, 3


def epoch_judge(make_inputs: Callable[[np.random.Generator], tuple], rtol: float = 1e-5,
                atol: float = 1e-6) -> Callable[[Callable[..., Any], np.random.Generator], str | None]:
    """The judge of an epoch exercise whose inputs ``make_inputs(rng)`` draws: (params, opt_state, batch,
    key, loss_fn, optimizer, num_minibatches)."""

    def judge(epoch: Callable[..., Any], rng: np.random.Generator) -> str | None:
        """Any shuffle drawn from the key passes; see the module's docstring for what is asked."""
        params, opt_state, batch, key, loss_fn, optimizer, num_minibatches = make_inputs(rng)
        batch_size = jax.tree_util.tree_leaves(batch)[0].shape[0]
        # 1. The shuffle, on a probe batch large enough that a random order never looks like no shuffle.
        probe_size, probe_minibatches = _PROBE_ROWS, _PROBE_MINIBATCHES
        probe_key = jax.random.key(int(rng.integers(1 << 30)))

        def steps_of_rows(key):
            """(None, the step at which each row was used [N]) or (what is wrong, None)."""
            problem, uses, steps = minibatches_used(epoch, key, batch, probe_size, probe_minibatches)
            problem = problem or minibatch_problem(uses, steps, probe_minibatches)
            return (problem, None) if problem else (None, np.argmax(uses, axis=1))

        problem, step_of_row = steps_of_rows(behaviour.copy_key(probe_key))
        if problem:
            return problem
        if np.array_equal(step_of_row, np.arange(probe_size) // (probe_size // probe_minibatches)):
            return "no shuffling: the minibatches are the batch's rows in their stored order"
        problem, again = steps_of_rows(behaviour.copy_key(probe_key))
        if problem:
            return problem
        if not np.array_equal(again, step_of_row):
            return "the same key gave two different shuffles: the order must come from `key` alone"
        problem, other = steps_of_rows(jax.random.fold_in(probe_key, 1))
        if problem:
            return problem
        if np.array_equal(other, step_of_row):
            return "two different keys gave the same minibatches: the shuffle is not drawn from `key`"
        # 2. The values, on the exercise's inputs: the reference epoch over the learner's own minibatches.
        problem, uses, steps = minibatches_used(epoch, behaviour.copy_key(key), batch, batch_size, num_minibatches)
        problem = problem or minibatch_problem(uses, steps, num_minibatches)
        if problem:
            return problem
        order = jnp.asarray(np.argsort(np.argmax(uses, axis=1), kind="stable"), jnp.int32)  # step 0's rows first
        expected = _epoch_in_order_jitted(params, opt_state, batch, order, loss_fn, optimizer, num_minibatches)
        got = jax.block_until_ready(epoch(params, opt_state, batch, behaviour.copy_key(key), loss_fn, optimizer,
                                          num_minibatches))
        problem = first_mismatch(got, expected, rtol, atol)
        if problem:
            carried_not = jax.jit(epoch_in_order_state_not_carried, static_argnums=(4, 5, 6))(
                params, opt_state, batch, order, loss_fn, optimizer, num_minibatches)
            if first_mismatch(got, carried_not, rtol, atol) is None:
                return ("every step starts from the optimizer state the epoch was given: the state a step returns "
                        "is not carried to the next step")
            return f"over the minibatches your shuffle drew, the epoch ends elsewhere than the reference's: {problem}"
        return None

    return judge
