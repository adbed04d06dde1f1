"""Values at time-limit cuts, computed after a rollout in batched passes instead of at every step.

A time limit is not a real end: the return of an episode cut off at its limit goes on past the cut,
so a rollout bootstraps from the value of the observation it was cut at (the *final observation*;
the env has already reset, so the next step's observation is a new episode's first). Few steps cut
an episode, so computing that value inside the per-step loop costs a second network pass at every
step for a handful of rows, and on a GPU a small pass costs its kernel launches whatever its size.
Here the rollout stores each step's final observation, and after the loop the network runs on the
cut steps alone, gathered into passes of one env batch each:

    values = truncation.final_values(value_of, rollout.final_obs, rollout.truncated)   # [T, E]

A rollout of E envs usually holds fewer than E cuts (a time limit of L steps cuts an env at most
once every L steps), so that is one pass per rollout; more cuts take more passes, never a wrong
value. Each pass has the shape of a per-step pass ([E, ...] rows), so on a given device the values
are bit for bit the ones a per-step pass computes. On a GPU the default is one pass over all T * E
final observations instead, with no loop: a loop whose length depends on the data makes the host
wait for the device once per pass, which costs more there than the rows it skips (a matrix product
of T * E rows may round differently in the last bits from one of E rows).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from labcore import devices


def final_values(
    value_of: Callable[[jax.Array], jax.Array], final_obs: jax.Array, cut: jax.Array, rows: int | None = None
) -> jax.Array:
    """``value_of`` at the cut steps of a rollout, 0 elsewhere: final_obs [T, E, ...], cut [T, E] bool -> [T, E] float32.

    value_of: observations [rows, ...] -> values [rows] (one network pass). The cut steps' final
    observations are gathered in time-major order into passes of ``rows`` rows (default E, the
    shape of a per-step pass); passes run while cut steps are left, none when no step was cut.
    ``rows`` >= T * E is one pass over every step, cut or not (no gather, no loop): the default on a
    GPU, where the loop's test would be read back to the host at every pass and a pass of T * E
    rows costs about what a pass of E rows does (``labcore.devices.launch_bound``).
    """
    num_steps, num_envs = cut.shape
    total = num_steps * num_envs
    if rows is None:
        rows = total if devices.launch_bound() else num_envs
    if final_obs.shape[:2] != cut.shape:
        raise ValueError(f"final_obs {final_obs.shape} and cut {cut.shape} disagree on [T, E]")
    if rows < 1:
        raise ValueError(f"rows must be >= 1, got {rows}")
    flat_obs = final_obs.reshape(total, *final_obs.shape[2:])
    if rows >= total:
        return jnp.where(cut, value_of(flat_obs).astype(jnp.float32).reshape(num_steps, num_envs), 0.0)
    passes = -(-total // rows)
    flat_cut = cut.reshape(total)
    # the cut steps' indices in order, then `total` as padding (out of range: gathers clamp it, writes drop it)
    at = jnp.nonzero(flat_cut, size=passes * rows, fill_value=total)[0]
    count = jnp.sum(flat_cut, dtype=jnp.int32)

    def one_pass(carry: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        start, values = carry
        index = jax.lax.dynamic_slice_in_dim(at, start, rows)
        batch = value_of(flat_obs[jnp.minimum(index, total - 1)]).astype(jnp.float32)
        return start + rows, values.at[index].set(batch, mode="drop")

    _, values = jax.lax.while_loop(lambda carry: carry[0] < count, one_pass,
                                   (jnp.int32(0), jnp.zeros(total, jnp.float32)))
    return values.reshape(num_steps, num_envs)
