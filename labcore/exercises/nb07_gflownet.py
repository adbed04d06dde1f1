"""Notebook 07 (gflownet_hybrid): GFlowNets on HyperGrid."""

from __future__ import annotations

import numpy as np

from labcore.exercises.checking import Exercise


def _hypergrid_reward_inputs(rng: np.random.Generator) -> tuple:
    # heights 5, 6, 9 and 11 put grid points exactly on the band edges 0.25 and 0.3
    ndim, height, n = int(rng.integers(1, 5)), int(rng.choice([5, 6, 8, 9, 11])), int(rng.integers(1, 60))
    return rng.integers(0, height, size=(n, ndim)).astype(np.int32), height


def _hypergrid_reward_reference(x, height):
    import jax.numpy as jnp

    from labcore.envs import hypergrid

    return hypergrid.reward(hypergrid.HyperGrid(int(x.shape[-1]), height), jnp.asarray(x))


def _trajectory_balance_inputs(rng: np.random.Generator) -> tuple:
    batch, steps = int(rng.integers(1, 30)), int(rng.integers(1, 20))
    log_pf = -rng.exponential(size=(batch, steps)).astype(np.float32)  # padding past each length is NOT zero
    log_pb = -rng.exponential(size=(batch, steps)).astype(np.float32)
    lengths = rng.integers(1, steps + 1, size=batch).astype(np.int32)
    return (np.float32(rng.normal()), log_pf, log_pb, lengths, rng.normal(size=batch).astype(np.float32))


def _trajectory_balance_reference(log_z, log_pf, log_pb, lengths, log_rewards):
    import jax.numpy as jnp

    valid = jnp.arange(log_pf.shape[1])[None, :] < lengths[:, None]
    residual = log_z + jnp.sum(jnp.where(valid, log_pf - log_pb, 0.0), axis=1) - log_rewards
    return jnp.mean(residual**2)


def _l1_inputs(rng: np.random.Generator) -> tuple:
    states, n = int(rng.integers(4, 300)), int(rng.integers(1, 5000))
    target = rng.dirichlet(np.ones(states))
    return rng.integers(0, states, size=n), target


def _l1_reference(terminal_indices, target):
    from labcore.envs import hypergrid

    counts = np.bincount(np.asarray(terminal_indices), minlength=len(target)).astype(np.float64)
    return hypergrid.l1_distance(counts / counts.sum(), target)


def catalogue() -> list[Exercise]:
    """This notebook's exercises, in the order the notebook checks them."""
    return [
        Exercise(
            name="hypergrid_reward",
            description="The standard HyperGrid reward: x [N, D] int (coordinates in 0 .. height - 1), height -> [N] float32.\n"
            "a = |x / (height - 1) - 0.5| per coordinate; R = 0.1 + 0.5 * [every a_d > 0.25] + 2.0 * [every a_d in "
            "(0.3, 0.4)]. The bounds are strict: compare with a 1e-6 margin (a > 0.25 + 1e-6, 0.3 + 1e-6 < a < "
            "0.4 - 1e-6) so that points exactly on a band edge (height 5, 6, 9, 11) are outside it. jnp.all(..., "
            "axis=-1) is the product of indicators.",
            reference=_hypergrid_reward_reference,
            make_inputs=_hypergrid_reward_inputs,
        ),
        Exercise(
            name="trajectory_balance",
            description="The trajectory balance loss from per-step log-probabilities: log_z [], log_pf [B, T], log_pb "
            "[B, T], lengths [B] (actions in each trajectory, exit included), log_rewards [B] -> [].\n"
            "mean over b of (log Z + sum_{t < L_b} log P_F - sum_{t < L_b} log P_B - log R(x_b))^2. The steps past "
            "each length are padding and hold arbitrary numbers: mask them with "
            "jnp.arange(T)[None, :] < lengths[:, None] (jnp.where), do not just sum every column.",
            reference=_trajectory_balance_reference,
            make_inputs=_trajectory_balance_inputs,
            jit=True,
            rtol=1e-4,
            atol=1e-5,
        ),
        Exercise(
            name="l1_sum_form",
            description="L1 between the sampled and the target distribution, SUM form: terminal_indices [N] int in "
            "0 .. S - 1, target [S] -> float.\n"
            "Count the samples per state (np.bincount with minlength=S), divide by N, then sum |p_hat - p| over "
            "the S states. The result lies in [0, 2] (twice the total variation). Some libraries report the MEAN "
            "over states instead (this divided by S): say which when you compare numbers.",
            reference=_l1_reference,
            make_inputs=_l1_inputs,
        ),
    ]
