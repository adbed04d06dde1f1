"""Notebook 09 (gflownet_hybrid): GFlowNets on HyperGrid.

``trajectory_balance`` is the GFlowNet's own core (``core=True``): the residual that
``labcore.agents.gflownet.core.trajectory_balance`` squares and averages, from per-step
log-probabilities padded to one length. Each exercise carries a worked solution, written as a
learner would (``labcore.course.exercises.solution(name)`` shows it), and the classic wrong answers that
``check`` recognises.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from labcore.course.exercises.checking import Exercise

# ----------------------------------------------------------------------------------------------
# 1. hypergrid_reward


def _band_edge_coordinates(height: int) -> list[int]:
    """The coordinates x in 0 .. height - 1 whose a = |x / (height - 1) - 0.5| is exactly 0.25, 0.3
    or 0.4 (none for height 8)."""
    return [x for x in range(height) if any(abs(abs(x / (height - 1) - 0.5) - edge) < 1e-9 for edge in (0.25, 0.3, 0.4))]


def _hypergrid_reward_inputs(rng: np.random.Generator) -> tuple:
    # heights 5, 6, 9 and 11 put grid points exactly on the band edges 0.25, 0.3 and 0.4
    ndim, height, n = int(rng.integers(1, 5)), int(rng.choice([5, 6, 8, 9, 11])), int(rng.integers(1, 60))
    x = rng.integers(0, height, size=(n, ndim)).astype(np.int32)
    edges = _band_edge_coordinates(height)
    if edges:  # one point with every coordinate on an edge: its reward depends on the bounds being strict
        x[rng.integers(n)] = rng.choice(edges, size=ndim)
    return x, height


def _hypergrid_reward_reference(x, height):
    from labcore.envs import hypergrid

    return hypergrid.reward(hypergrid.HyperGrid(int(x.shape[-1]), height), jnp.asarray(x))


def hypergrid_reward_solution(x, height):
    a = jnp.abs(x / (height - 1) - 0.5)  # [N, D], distance of each coordinate from the centre
    edge = 1e-6  # the bands are open: a point exactly on 0.25 or 0.3 is outside
    on_plateau = jnp.all(a > 0.25 + edge, axis=-1)  # "every coordinate" is an all over D
    on_peak = jnp.all((a > 0.3 + edge) & (a < 0.4 - edge), axis=-1)
    return 0.1 + 0.5 * on_plateau.astype(jnp.float32) + 2.0 * on_peak.astype(jnp.float32)


def hypergrid_reward_closed_bands(x, height):
    a = jnp.abs(x / (height - 1) - 0.5)
    return 0.1 + 0.5 * jnp.all(a >= 0.25, axis=-1) + 2.0 * jnp.all((a >= 0.3) & (a <= 0.4), axis=-1)


# ----------------------------------------------------------------------------------------------
# 2. trajectory_balance (the core)


def _trajectory_balance_inputs(rng: np.random.Generator) -> tuple:
    batch, steps = int(rng.integers(2, 30)), int(rng.integers(3, 20))
    # Padding past each length is NOT zero (an answer that sums every column fails), log P_B is not
    # zero (its sign matters), and log Z is drawn away from 0 (an answer without it fails). Lengths
    # run from 1 to T, and one trajectory exits at once (length 1, T - 1 padding steps): so a mean
    # over steps differs from the sum, and summing all the padding differs from counting one step.
    log_pf = -rng.exponential(size=(batch, steps)).astype(np.float32)
    log_pb = -rng.exponential(size=(batch, steps)).astype(np.float32)
    lengths = rng.integers(1, steps + 1, size=batch).astype(np.int32)
    lengths[rng.integers(batch)] = 1
    # As step_log_probs computes them: the exit action (step L - 1) has no backward move, so its
    # log P_B is 0. An answer that leaves the exit step out of the backward sum is then right too.
    log_pb[np.arange(batch), lengths - 1] = 0.0
    log_z = np.float32(rng.choice([-1.0, 1.0]) * rng.uniform(0.5, 3.0))
    return log_z, log_pf, log_pb, lengths, rng.normal(size=batch).astype(np.float32)


def _trajectory_balance_reference(log_z, log_pf, log_pb, lengths, log_rewards):
    valid = jnp.arange(log_pf.shape[1])[None, :] < lengths[:, None]
    residual = log_z + jnp.sum(jnp.where(valid, log_pf - log_pb, 0.0), axis=1) - log_rewards
    return jnp.mean(residual**2)


def trajectory_balance_solution(log_z, log_pf, log_pb, lengths, log_rewards):
    B, T = log_pf.shape
    real_step = jnp.arange(T)[None, :] < lengths[:, None]  # [B, T]: True up to the exit, False on padding
    log_pf = jnp.where(real_step, log_pf, 0.0)  # zero the padding rather than slicing each row:
    log_pb = jnp.where(real_step, log_pb, 0.0)  # every row keeps length T, so jax.jit can trace it
    residual = log_z + log_pf.sum(axis=1) - log_pb.sum(axis=1) - log_rewards  # [B]
    return jnp.mean(residual**2)


def trajectory_balance_sums_the_padding(log_z, log_pf, log_pb, lengths, log_rewards):
    residual = log_z + log_pf.sum(axis=1) - log_pb.sum(axis=1) - log_rewards
    return jnp.mean(residual**2)


def trajectory_balance_counts_one_padding_step(log_z, log_pf, log_pb, lengths, log_rewards):
    real_step = jnp.arange(log_pf.shape[1])[None, :] <= lengths[:, None]
    residual = log_z + jnp.where(real_step, log_pf - log_pb, 0.0).sum(axis=1) - log_rewards
    return jnp.mean(residual**2)


def trajectory_balance_without_log_z(log_z, log_pf, log_pb, lengths, log_rewards):
    real_step = jnp.arange(log_pf.shape[1])[None, :] < lengths[:, None]
    residual = jnp.where(real_step, log_pf - log_pb, 0.0).sum(axis=1) - log_rewards
    return jnp.mean(residual**2)


def trajectory_balance_adds_log_pb(log_z, log_pf, log_pb, lengths, log_rewards):
    real_step = jnp.arange(log_pf.shape[1])[None, :] < lengths[:, None]
    residual = log_z + jnp.where(real_step, log_pf + log_pb, 0.0).sum(axis=1) - log_rewards
    return jnp.mean(residual**2)


def trajectory_balance_mean_over_steps(log_z, log_pf, log_pb, lengths, log_rewards):
    real_step = jnp.arange(log_pf.shape[1])[None, :] < lengths[:, None]
    per_step = jnp.where(real_step, log_pf - log_pb, 0.0).sum(axis=1) / lengths
    return jnp.mean((log_z + per_step - log_rewards) ** 2)


def trajectory_balance_sum_over_trajectories(log_z, log_pf, log_pb, lengths, log_rewards):
    real_step = jnp.arange(log_pf.shape[1])[None, :] < lengths[:, None]
    residual = log_z + jnp.where(real_step, log_pf - log_pb, 0.0).sum(axis=1) - log_rewards
    return jnp.sum(residual**2)


# ----------------------------------------------------------------------------------------------
# 3. l1_sum_form


def _l1_inputs(rng: np.random.Generator) -> tuple:
    states, n = int(rng.integers(4, 300)), int(rng.integers(1, 5000))
    target = rng.dirichlet(np.ones(states))
    return rng.integers(0, states, size=n), target


def _l1_reference(terminal_indices, target):
    from labcore.envs import hypergrid

    counts = np.bincount(np.asarray(terminal_indices), minlength=len(target)).astype(np.float64)
    return hypergrid.l1_distance(counts / counts.sum(), target)


def l1_sum_form_solution(terminal_indices, target):
    counts = np.zeros(len(target))
    np.add.at(counts, terminal_indices, 1)  # one count per sample, repeated indices included
    p_hat = counts / len(terminal_indices)
    return float(np.sum(np.abs(p_hat - target)))


def l1_sum_form_mean_over_states(terminal_indices, target):
    counts = np.bincount(terminal_indices, minlength=len(target))
    return float(np.mean(np.abs(counts / counts.sum() - target)))


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
            solution=hypergrid_reward_solution,
            mistakes=(
                ("closed bands (>= and <=): points exactly on a band edge count as inside",
                 hypergrid_reward_closed_bands),
            ),
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
            # Right answers add the up to 19 float32 steps in other orders (log P_F and log P_B summed
            # apart, a cumsum read at L - 1, a product with the mask): over 1,500 draws they differ from
            # the reference by up to 1.4e-6 relative, and a batch whose residuals all nearly cancel would
            # lose more digits. 1e-4 leaves room for that, and every mistake below still fails, and is
            # named, on each seed 0 to 39.
            rtol=1e-4,
            atol=1e-5,
            solution=trajectory_balance_solution,
            mistakes=(
                ("every column is summed: the padding steps past each trajectory's length count too",
                 trajectory_balance_sums_the_padding),
                ("the mask is t <= L instead of t < L: one padding step counts (steps are numbered from 0)",
                 trajectory_balance_counts_one_padding_step),
                ("log Z is missing: without it the residual compares probabilities with unnormalised rewards",
                 trajectory_balance_without_log_z),
                ("log P_B is added; the balance is log Z + sum log P_F = log R(x) + sum log P_B, so it is subtracted",
                 trajectory_balance_adds_log_pb),
                ("the log-probabilities are averaged over steps; a trajectory's log-probability is their sum",
                 trajectory_balance_mean_over_steps),
                ("the squares are summed over trajectories; the loss is their mean",
                 trajectory_balance_sum_over_trajectories),
            ),
            core=True,
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
            solution=l1_sum_form_solution,
            mistakes=(("the mean over states instead of the sum: S times smaller", l1_sum_form_mean_over_states),),
        ),
    ]
