"""Runs recorded on a named machine, shipped with labcore so that lessons and results pages read them.

    data = recorded.load("pqn_atari_breakout")   # the JSON benchmarks/atari.py curve writes
    recorded.atari_figure(data)                  # its learning curve beside Dopamine's agents

Each file names the command that produced it, the machine, the JAX version and the date.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from labcore.course import published


def load(name: str) -> dict[str, Any]:
    """The recorded run ``name`` (a JSON file of this package)."""
    return json.loads(resources.files(__package__).joinpath(f"{name}.json").read_text())


def block_means(runs: list[dict[str, Any]]) -> tuple[list[int], list[float], list[float], list[float]]:
    """(frames at each 1M-frame block's end, mean over the runs, lowest, highest) of the runs' block returns,
    for the blocks every run reached."""
    blocks = min(len(run["blocks"]) for run in runs)
    frames = [runs[0]["blocks"][b]["frames_end"] for b in range(blocks)]
    values = [[run["blocks"][b]["mean_return"] for run in runs] for b in range(blocks)]
    return frames, [sum(v) / len(v) for v in values], [min(v) for v in values], [max(v) for v in values]


def atari_figure(data: dict[str, Any], ax: Any = None, dopamine: bool = True):
    """PQN's recorded Breakout curve (the mean training return of each 1M-frame block, averaged over the
    recorded runs with their range shaded where there are several, the first run's evaluations dotted)
    beside Dopamine's agents at the same frames."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(9, 4.5))
    frames, mean, low, high = block_means(data["runs"])
    millions = [f / 1e6 for f in frames]
    seeds = [run["seed"] for run in data["runs"]]
    said = f"seed {seeds[0]}" if len(seeds) == 1 else f"mean of {len(seeds)} seeds, their range shaded"
    ax.plot(millions, mean, "o-", color="black", lw=2.5, label=f"PQN, {data['protocol_short']} ({said})")
    if len(seeds) > 1:
        ax.fill_between(millions, low, high, color="black", alpha=0.15)
    evaluations = [(e["frames"] / 1e6, e["mean_return"]) for e in data["runs"][0]["evaluations"]]
    if evaluations:
        ax.plot(*zip(*evaluations), ":", color="black", label=f"PQN evaluation, seed {data['runs'][0]['seed']} (epsilon {data['eval_epsilon']})")
    if dopamine:
        for agent, curve in published.DOPAMINE_BREAKOUT.items():
            ax.plot([f / 1e6 for f, *_ in curve], [m for _, m, _, _ in curve], "--", lw=1.2, label=f"Dopamine {agent}")
    ax.set_xlabel("frames (millions)")
    ax.set_ylabel("return: the training games' mean in each\n1M-frame block (dotted: the evaluations)")
    ax.set_title(f"Breakout: PQN ({data['machine'].split(';')[0]}, JAX {data['jax']}, {data['date']}) beside Dopamine's "
                 f"agents (sticky actions)", fontsize=9)
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(alpha=0.3)
    return ax
