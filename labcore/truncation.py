"""Values at time-limit cuts, computed after a rollout in batched passes instead of at every step.

A time limit is not a real end: the return of an episode cut off at its limit goes on past the cut,
so a rollout bootstraps from the value of the observation it was cut at (the *final observation*;
the env has already reset, so the next step's observation is a new episode's first). Few steps cut
an episode, so computing that value inside the per-step loop costs a second network pass at every
step for a handful of rows, and on a GPU a small pass costs its kernel launches whatever its size.
Here the rollout stores each step's final observation, and after the loop the network runs on the
cut steps alone, in passes of one env batch each: pass k holds every env's k-th cut step.

    values = truncation.final_values(value_of, rollout.final_obs, rollout.truncated)   # [T, E]

A time limit of L steps cuts an env at most once every L steps, so a rollout of T <= L steps takes
one pass; more cuts take more passes (as many as the most cuts of one env), never a wrong value,
and a rollout without a cut takes none. Each pass has the shape of a per-step pass ([E, ...] rows),
so on a given device the values are bit for bit the ones a per-step pass computes. On a GPU the
default is one pass over all T * E final observations instead, with no loop: a loop whose length
depends on the data makes the host wait for the device once per pass, which costs more there than
the rows it skips (a matrix product of T * E rows may round differently in the last bits from one
of E rows).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from labcore import devices


def final_values(
    value_of: Callable[[jax.Array], jax.Array], final_obs: jax.Array, cut: jax.Array, one_pass: bool | None = None
) -> jax.Array:
    """``value_of`` at the cut steps of a rollout, 0 elsewhere: final_obs [T, E, ...], cut [T, E] bool -> [T, E] float32.

    value_of: observations [rows, ...] -> values [rows] (one network pass). Pass k (k = 1, 2, ...)
    holds every env's k-th cut step (an env with fewer cuts fills its row with a step not used), so
    each pass has [E, ...] rows, the shape of a per-step pass; passes run while some env has a k-th
    cut, none when no step was cut. ``one_pass`` (None: on a GPU, ``labcore.devices.launch_bound``)
    is one pass over every step, cut or not, with no loop: a GPU would read the loop's test back to
    the host at every pass, and a pass of T * E rows costs about what a pass of E rows does there.
    """
    num_steps, num_envs = cut.shape
    if final_obs.shape[:2] != cut.shape:
        raise ValueError(f"final_obs {final_obs.shape} and cut {cut.shape} disagree on [T, E]")
    if devices.launch_bound() if one_pass is None else one_pass:
        flat_obs = final_obs.reshape(num_steps * num_envs, *final_obs.shape[2:])
        return jnp.where(cut, value_of(flat_obs).astype(jnp.float32).reshape(num_steps, num_envs), 0.0)
    rank = jnp.cumsum(cut, axis=0, dtype=jnp.int32)  # [T, E] at a cut step: which of its env's cuts it is
    most = jnp.max(rank[-1])  # the most cuts of one env: the passes to run
    envs = jnp.arange(num_envs)

    def kth_pass(carry: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        k, values = carry
        at = cut & (rank == k)  # [T, E] each env's k-th cut step, if it has one
        batch = value_of(final_obs[jnp.argmax(at, axis=0), envs]).astype(jnp.float32)  # [E]
        return k + 1, jnp.where(at, batch[None, :], values)

    _, values = jax.lax.while_loop(lambda carry: carry[0] <= most, kth_pass,
                                   (jnp.int32(1), jnp.zeros((num_steps, num_envs), jnp.float32)))
    return values
