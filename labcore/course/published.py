"""Published learning curves to hold labcore's runs against, with where each number comes from.

    published.at(published.MINATAR_DQN["Breakout-MinAtar"], 1_000_000)    # 9.2
    published.DOPAMINE_BREAKOUT_DQN[0]                                    # (1_000_000, 1.64, 1.79)

Compare at equal environment steps: ``at`` interpolates a curve between its points and returns
None outside them, never extrapolates.
"""

from __future__ import annotations

from collections.abc import Sequence

MINATAR_SOURCE = (
    "Young & Tian (2019), 'MinAtar: An Atari-Inspired Testbed for Thorough and Reproducible "
    "Reinforcement Learning Experiments', arXiv:1903.03176; the DQN learning curves of its "
    "repository's README (github.com/kenjyoung/MinAtar, img/learning_curves.gif at commit 4241f24): "
    "each curve the mean of 30 runs of the moving average of the last 100 training-episode returns "
    "(epsilon-greedy), 5M frames (one frame = one agent step, no frame skip). The figure gives no "
    "table: the values were read off the image's pixels (about +-0.3; +-2 for Space Invaders)."
)

# (env steps, DQN return) read off the MinAtar README's learning-curve figure. The original games
# use sticky actions (0.1) and all 6 actions; gymnax's (labcore's envs) have neither, and cap an
# episode at 1,000 steps (Freeway at 2,500, as in the original).
MINATAR_DQN: dict[str, tuple[tuple[int, float], ...]] = {
    "Breakout-MinAtar": (
        (250_000, 6.7), (500_000, 8.3), (1_000_000, 9.2), (1_500_000, 9.4), (2_000_000, 9.7),
        (2_500_000, 9.8), (3_000_000, 9.9), (4_000_000, 9.9), (5_000_000, 10.1),
    ),
    "SpaceInvaders-MinAtar": (
        (250_000, 21.5), (500_000, 28.1), (1_000_000, 33.0), (1_500_000, 38.5), (2_000_000, 41.4),
        (2_500_000, 42.5), (3_000_000, 44.1), (4_000_000, 43.9), (5_000_000, 43.2),
    ),
    "Asterix-MinAtar": (
        (250_000, 0.9), (500_000, 1.0), (1_000_000, 7.2), (1_500_000, 13.0), (2_000_000, 14.3),
        (2_500_000, 15.3), (3_000_000, 15.6), (4_000_000, 16.5), (5_000_000, 17.2),
    ),
    "Freeway-MinAtar": (
        (250_000, 7.4), (500_000, 34.4), (1_000_000, 47.7), (1_500_000, 50.4), (2_000_000, 50.7),
        (2_500_000, 50.5), (3_000_000, 50.2), (4_000_000, 49.9), (5_000_000, 50.2),
    ),
}  # fmt: skip

PQN_SOURCE = (
    "Gallici et al. (2025), 'Simplifying Deep Temporal Difference Learning', ICLR 2025, "
    "arXiv:2407.04811; code github.com/mttga/purejaxql (config/alg/pqn_minatar.yaml at commit "
    "47af6d7): 1e7 env steps, 128 envs x 32 steps, 2 epochs of 32 minibatches, lambda 0.65, RAdam 5e-4 "
    "decayed linearly, LayerNorm. The paper states a speed-up of up to 50x over DQN; its repository "
    "reports MinAtar trained in under a minute on one NVIDIA A40 and publishes no per-game MinAtar "
    "score table, so there is no PQN number to print beside ours."
)

DOPAMINE_SOURCE = (
    "Dopamine's baseline data, github.com/google/dopamine baselines/atari/data/breakout.json: the "
    "mean undiscounted return of the training episodes of each iteration (250k agent steps = 1M "
    "frames, epsilon-greedy, sticky actions), averaged over 5 runs."
)

# (frames at the end of the iteration, Dopamine's default DQN, Dopamine's JAX DQN with Adam + MSE)
DOPAMINE_BREAKOUT_DQN: tuple[tuple[int, float, float], ...] = (
    (1_000_000, 1.64, 1.79), (2_000_000, 3.06, 6.52), (3_000_000, 3.94, 15.23), (5_000_000, 9.34, 23.74),
    (10_000_000, 21.48, 46.90), (20_000_000, 52.86, 85.83), (50_000_000, 101.2, 106.66), (100_000_000, 119.71, 139.70),
)  # fmt: skip


def at(curve: Sequence[tuple[int, float]], steps: float) -> float | None:
    """The curve's value at ``steps``, linear between its points; None outside them."""
    points = sorted(curve)
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if x0 <= steps <= x1:
            return y0 + (y1 - y0) * (steps - x0) / (x1 - x0)
    if points and steps == points[0][0]:
        return points[0][1]
    return None
