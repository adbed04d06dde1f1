"""Published learning curves to hold labcore's runs against, with where each number comes from.

    published.at(published.MINATAR_DQN["Breakout-MinAtar"], 1_000_000)    # 9.2
    published.DOPAMINE_BREAKOUT_DQN[0]                                    # (1_000_000, 1.64, 1.79)

Compare at equal environment steps: ``at`` interpolates a curve between its points and returns
None outside them, never extrapolates.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple


class Quote(NamedTuple):
    """A number a lesson's prose takes from a source, recorded once with where in the source it stands."""

    value: str  # as the prose writes it: "333.6", "50x", "1.5e-4"
    source: str  # the bibliography key the prose cites (docs/references.bib), or the URL it links
    where: str  # the place in the source: a table, a figure, a file at a commit, a section

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


DOPAMINE_BREAKOUT_SOURCE = (
    "Dopamine's baseline data (Castro et al. 2018), github.com/google/dopamine "
    "baselines/atari/data/breakout.json at commit 8842298e89cfe42c80ea71f63913017696785f0f (its last "
    "change, 2021-08-24): for each of six agents, five runs of 199 iterations; an iteration is 250,000 "
    "agent steps (1M frames) and its value the mean undiscounted return of the training games it "
    "finished (epsilon-greedy, sticky actions with probability 0.25, a game all its lives, capped at "
    "27,000 agent steps). DOPAMINE_BREAKOUT holds the first 10 iterations: the mean over the five runs and their range."
)

# agent -> ((frames at the end of the iteration, mean of the 5 runs, lowest run, highest run), ...),
# iterations 0-9 of DOPAMINE_BREAKOUT_SOURCE's file, computed from it
DOPAMINE_BREAKOUT: dict[str, tuple[tuple[int, float, float, float], ...]] = {
    "DQN": (
        (1_000_000, 1.64, 1.57, 1.70), (2_000_000, 3.06, 2.83, 3.27), (3_000_000, 3.94, 3.33, 4.51),
        (4_000_000, 6.69, 5.88, 7.51), (5_000_000, 9.34, 6.68, 11.13), (6_000_000, 12.08, 8.91, 13.68),
        (7_000_000, 14.16, 11.41, 15.92), (8_000_000, 16.33, 14.12, 18.98), (9_000_000, 18.64, 16.43, 22.84),
        (10_000_000, 21.48, 19.26, 28.51),
    ),
    "DQN (Adam + MSE in JAX)": (
        (1_000_000, 1.79, 1.71, 1.90), (2_000_000, 6.52, 6.36, 6.63), (3_000_000, 15.23, 14.76, 15.58),
        (4_000_000, 18.86, 18.39, 20.04), (5_000_000, 23.74, 22.80, 24.17), (6_000_000, 27.84, 27.08, 28.31),
        (7_000_000, 32.43, 30.37, 34.20), (8_000_000, 38.33, 34.96, 42.27), (9_000_000, 41.65, 41.09, 41.88),
        (10_000_000, 46.90, 45.04, 50.69),
    ),
    "C51": (
        (1_000_000, 1.63, 1.61, 1.66), (2_000_000, 2.91, 2.68, 3.10), (3_000_000, 6.41, 5.65, 7.07),
        (4_000_000, 13.29, 12.10, 14.88), (5_000_000, 17.77, 15.96, 20.07), (6_000_000, 21.99, 19.64, 24.68),
        (7_000_000, 28.49, 25.42, 30.15), (8_000_000, 32.93, 31.77, 34.71), (9_000_000, 39.60, 36.40, 42.70),
        (10_000_000, 47.14, 43.62, 49.58),
    ),
    "Rainbow": (
        (1_000_000, 1.75, 1.69, 1.78), (2_000_000, 4.52, 4.15, 5.13), (3_000_000, 11.76, 11.07, 12.90),
        (4_000_000, 15.57, 15.27, 15.97), (5_000_000, 19.82, 18.87, 20.37), (6_000_000, 24.08, 22.86, 25.18),
        (7_000_000, 27.39, 24.89, 29.62), (8_000_000, 32.35, 30.24, 34.10), (9_000_000, 37.62, 36.04, 38.15),
        (10_000_000, 41.90, 38.24, 45.18),
    ),
    "Quantile (JAX)": (
        (1_000_000, 4.53, 4.44, 4.61), (2_000_000, 18.73, 17.75, 19.06), (3_000_000, 27.75, 25.18, 29.48),
        (4_000_000, 32.13, 29.59, 34.42), (5_000_000, 34.59, 33.05, 38.34), (6_000_000, 34.56, 32.58, 36.33),
        (7_000_000, 31.41, 15.20, 36.98), (8_000_000, 30.92, 6.78, 38.77), (9_000_000, 30.47, 5.20, 37.61),
        (10_000_000, 31.92, 10.47, 38.65),
    ),
    "IQN": (
        (1_000_000, 4.10, 3.86, 4.31), (2_000_000, 16.28, 15.45, 17.46), (3_000_000, 22.52, 20.47, 23.82),
        (4_000_000, 31.55, 26.74, 35.52), (5_000_000, 41.59, 35.90, 45.56), (6_000_000, 49.79, 41.71, 56.07),
        (7_000_000, 59.03, 50.56, 64.84), (8_000_000, 71.64, 59.21, 83.92), (9_000_000, 84.36, 68.79, 97.62),
        (10_000_000, 102.70, 82.29, 121.78),
    ),
}  # fmt: skip


CLEANRL_PQN_BREAKOUT_SOURCE = (
    "CleanRL (Huang et al. 2022), docs/rl-algorithms/pqn.md at commit 1ed80620842b4cdeb1edc07e12825dff18091da9, "
    "the 'Episode Rewards' table of pqn_atari_envpool.py: Breakout-v5 384.85 +- 12.39, three seeds "
    "(benchmark/pqn.sh, the script's defaults): 10M agent steps (40M frames: envpool repeats each action for 4), "
    "8 envs x 128 steps, 4 epochs of 4 minibatches, RAdam 2.5e-4 decayed linearly, lambda 0.65, epsilon to 0.01 "
    "over the first 10%; envpool with episodic_life and reward_clip (cleanrl/pqn_atari_envpool.py)."
)
CLEANRL_PQN_BREAKOUT = (40_000_000, 384.85, 12.39)  # (frames, return, its +-), CLEANRL_PQN_BREAKOUT_SOURCE


def at(curve: Sequence[tuple[int, float]], steps: float) -> float | None:
    """The curve's value at ``steps``, linear between its points; None outside them."""
    points = sorted(curve)
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if x0 <= steps <= x1:
            return y0 + (y1 - y0) * (steps - x0) / (x1 - x0)
    if points and steps == points[0][0]:
        return points[0][1]
    return None


# Every number a lesson's prose quotes from a source, with where it stands there
# (docs/tooling/prose_numbers.py accepts a cited number only if it is here).
QUOTES: tuple[Quote, ...] = (
    Quote("50x", "gallici2025simplifying",
          "the abstract (arXiv:2407.04811): PQN 'can be up to 50x faster than traditional DQN'"),
    Quote("0.1", "young2019minatar",
          "the paper's repository, github.com/kenjyoung/MinAtar at 1517497, minatar/environment.py: "
          "Environment(env_name, sticky_action_prob=0.1, ...)"),
    Quote("0.017", "fortunato2018noisy",
          "section 3.2, 'Initialisation of Noisy Networks': for independent Gaussian noise each sigma_{i,j} is "
          "initialised to 0.017"),
    Quote("36", "https://github.com/torvalds/linux/blob/v6.6/kernel/sched/core.c", "the table sched_prio_to_weight: the weight of niceness 15"),
    Quote("1,024", "https://github.com/torvalds/linux/blob/v6.6/kernel/sched/core.c", "the table sched_prio_to_weight: the weight of niceness 0 (NICE_0_LOAD)"),
)
