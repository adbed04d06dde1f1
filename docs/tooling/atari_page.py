"""The Atari results page's tables and figure, rendered at build time from the recorded runs.

``docs/results/atari.md`` holds the prose; its numbers come from ``labcore.course.recorded``'s
``pqn_atari_breakout`` (written by ``benchmarks/atari.py curve``) through MyST substitutions that
``docs/conf.py`` sets from ``substitutions()``, and its figure is ``write_figure``'s. So the page
cannot drift from the file lesson 12 reads.
"""

from __future__ import annotations

import pathlib
from typing import Any

from labcore.course import published, recorded

NAME = "pqn_atari_breakout"


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.2f}"


def _seeds(data: dict[str, Any]) -> str:
    """"seed 0" or "seeds 0, 1 and 2"."""
    seeds = [str(run["seed"]) for run in data["runs"]]
    return f"seed {seeds[0]}" if len(seeds) == 1 else f"seeds {', '.join(seeds[:-1])} and {seeds[-1]}"


def run_line(data: dict[str, Any]) -> str:
    beside = f" Beside the run{'s' if len(data['runs']) > 1 else ''}: {data['beside']}." if data.get("beside") else ""
    order = "" if len(data["runs"]) == 1 else ", the runs one after the other"
    return (f"`{data['command']}` ({_seeds(data)}){order} on {data['machine']}, JAX {data['jax']}, "
            f"ale-py {data['ale_py']}, finished {data['date']}.{beside}")


def blocks_table(data: dict[str, Any]) -> str:
    frames, mean, low, high = recorded.block_means(data["runs"])
    agents = list(published.DOPAMINE_BREAKOUT)
    several = len(data["runs"]) > 1
    header = ["frames (block end)"] + ([f"PQN, mean of {len(data['runs'])} seeds (range)"] if several else [])
    header += [f"PQN seed {run['seed']}" for run in data["runs"]] + [f"Dopamine {agent}" for agent in agents]
    rows = []
    for b, block_end in enumerate(frames):
        row = [f"{block_end:,}"] + ([f"**{mean[b]:.1f}** ({low[b]:.1f}-{high[b]:.1f})"] if several else [])
        row += [f"{run['blocks'][b]['mean_return']:.1f}" for run in data["runs"]]
        for agent in agents:
            value = {f: m for f, m, _, _ in published.DOPAMINE_BREAKOUT[agent]}.get(block_end)
            row.append("" if value is None else f"{value:.1f}")
        rows.append(row)
    return _table(header, rows)


def where_line(data: dict[str, Any]) -> str:
    """What every table of the page was measured on, said above each."""
    runs = "The runs" if len(data["runs"]) > 1 else "The run"
    return f"{runs} above: {data['machine']}; JAX {data['jax']}, ale-py {data['ale_py']}; {data['date']}."


def games_line(data: dict[str, Any]) -> str:
    counts = [f"seed {run['seed']}: {run['games']:,}" for run in data["runs"]]
    whole = "each whole run" if len(data["runs"]) > 1 else "the whole run"
    return f"Training games finished in {whole} (each counted in the block it ended in): " + "; ".join(counts) + "."


def final_sentence(data: dict[str, Any]) -> str:
    """PQN's last block that Dopamine's data also has, against all six of its agents in that block."""
    frames, mean, low, high = recorded.block_means(data["runs"])
    curves = {agent: {f: m for f, m, _, _ in curve} for agent, curve in published.DOPAMINE_BREAKOUT.items()}
    shared = [b for b, f in enumerate(frames) if all(f in curve for curve in curves.values())]
    if not shared:
        return "No block of the recorded runs is one Dopamine's data has."
    b = shared[-1]
    theirs = sorted(((curve[frames[b]], agent) for agent, curve in curves.items()), reverse=True)
    below = [f"{agent} {value:.1f}" for value, agent in theirs if value < mean[b]]
    above = [f"{agent} {value:.1f}" for value, agent in theirs if value >= mean[b]]
    said = (f"above all six of Dopamine's agents in the same block ({'; '.join(below)})" if not above
            else f"below all six of Dopamine's agents in the same block ({'; '.join(above)})" if not below
            else f"above {len(below)} of Dopamine's six agents in the same block ({'; '.join(below)}) and below "
                 f"{len(above)} ({'; '.join(above)})")
    spread = "" if len(data["runs"]) == 1 else f", from {low[b]:.1f} to {high[b]:.1f}"
    best = theirs[0][1]
    theirs_said = "these runs'" if len(data["runs"]) > 1 else "this run's"
    _, _, best_low, best_high = next(point for point in published.DOPAMINE_BREAKOUT[best] if point[0] == frames[b])
    average = "on average" if len(data["runs"]) == 1 else "as the mean of the seeds' block means"
    below_best = [f"seed {run['seed']}'s {run['blocks'][b]['mean_return']:.1f}" for run in data["runs"]
                  if run["blocks"][b]["mean_return"] < theirs[0][0]]
    counted = {2: "two", 3: "three", 4: "four", 5: "five"}.get(len(data["runs"]), str(len(data["runs"])))
    unsettled = "" if not below_best else (
        f" {' and '.join(below_best).capitalize()} {'is' if len(below_best) == 1 else 'are'} below {best}'s "
        f"{theirs[0][0]:.1f}: {counted} runs against five, their ranges overlapping, do not settle the order against "
        f"{best}.")
    return (f"In the block to {frames[b]:,} frames PQN's training games returned {mean[b]:.1f} {average} "
            f"({_seeds(data)}{spread}), {said}.{unsettled} Dopamine's values are each the mean of five runs ({best}'s "
            f"five: {best_low:.1f} to {best_high:.1f}), under Dopamine's own protocol, which differs from {theirs_said} "
            f"(below): not like for like.")


def evaluations_table(data: dict[str, Any]) -> str:
    header = ["frames"] + [f"seed {run['seed']}: mean (std) of {run['evaluations'][0]['games'] if run['evaluations'] else ''} games"
                           for run in data["runs"]]
    frames = sorted({e["frames"] for run in data["runs"] for e in run["evaluations"]})
    rows = []
    for f in frames:
        row = [f"{f:,}"]
        for run in data["runs"]:
            found = next((e for e in run["evaluations"] if e["frames"] == f), None)
            row.append("" if found is None else f"{found['mean_return']:.1f} ({found['std']:.1f})")
        rows.append(row)
    return _table(header, rows)


def time_table(data: dict[str, Any]) -> str:
    header = ["seed", "frames", "calls", "training (h)", "start to end, evaluations included (h)", "agent steps/s",
              "frames/s", "ALE stepping"]
    missing = "not recorded"
    rows = [[str(run["seed"]), f"{run['frames']:,}", str(run.get("calls", 1)),
             missing if run["train_s"] is None else _hours(run["train_s"]),
             missing if run["wall_s"] is None else _hours(run["wall_s"]),
             missing if run["agent_steps_per_s"] is None else f"{run['agent_steps_per_s']:,.0f}",
             missing if run["agent_steps_per_s"] is None else f"{4 * run['agent_steps_per_s']:,.0f}", run["env_stepping"]]
            for run in data["runs"]]
    return _table(header, rows)


def time_note(data: dict[str, Any]) -> str:
    """What the time table's rates are beside the speed table's, measured apart from the run."""
    speed = data.get("speed")
    if speed is None or not data.get("beside"):
        return ""
    update = next(row for row in speed["rows"] if row["part"] == "PQN update")
    steps = 1000 / update["ms per agent step"]
    runs = "The runs" if len(data["runs"]) > 1 else "The run"
    return (f"{runs} shared the machine (above), so these rates are lower bounds for it. The speed table below timed one "
            f"update apart from {'them' if len(data['runs']) > 1 else 'it'}, but not on an idle machine either (its load "
            f"averages are beside it): {update['per update (s)']:.2f} s, {steps:,.0f} agent steps/s" + "".join(
                f"; seed {run['seed']}'s whole run went faster ({run['agent_steps_per_s']:,.0f})" for run in data["runs"]
                if (run["agent_steps_per_s"] or 0) > steps) + ".")


def speed_table(data: dict[str, Any]) -> str:
    speed = data.get("speed")
    if speed is None:
        return "(not measured with the recorded runs)"
    header = ["part", "seconds per update", "ms per agent step", "what it is"]
    shown = {"floors: games + acting + learning": "games floor + acting floor + learning"}
    once = "learning, JAX's own convolution gradients"  # timed once: it takes minutes
    rows = [[shown.get(row["part"], row["part"]) + (" (one timing)" if row["part"] == once else ""),
             "" if row["per update (s)"] is None else f"{row['per update (s)']:.2f}",
             f"{row['ms per agent step']:.2f}", row["what"]] for row in speed["rows"]]
    return _table(header, rows)


def speed_line(data: dict[str, Any]) -> str:
    speed = data.get("speed")
    if speed is None:
        return ""
    machine = speed["machine"]
    label = machine.get("label") or f"{machine['processor']}, {machine['cpu_count']} CPU cores"
    load = speed.get("load_average")
    beside = "" if load is None else f", the 1-minute load average {load[0]:.2f} before and {load[1]:.2f} after"
    return f"`python benchmarks/atari.py speed` on {label}, JAX {machine['jax']}, {speed['time'][:10]}{beside}:"


def speed_reading(data: dict[str, Any]) -> str:
    speed = data.get("speed")
    if speed is None:
        return ""
    parts = {row["part"]: row for row in speed["rows"]}
    update = parts["PQN update"]["per update (s)"]
    rollout, learning = parts["rollout"]["per update (s)"], parts["learning"]["per update (s)"]
    games, acting = parts["floor: the games"]["per update (s)"], parts["floor: acting"]["per update (s)"]
    dqn = parts["DQN (atari_short)"]["ms per agent step"]
    pqn = parts["PQN update"]["ms per agent step"]
    rest = update - rollout - learning
    text = (f"One update took {update:.2f} s. The rollout, {rollout:.2f} s ({100 * rollout / update:.0f}%), is "
            f"{rollout / (games + acting):.1f}x its floor of {games + acting:.2f} s: the games alone with random actions "
            f"({games:.2f} s, ALE's throughput on these cores) and the acting forwards alone ({acting:.2f} s). The "
            f"learning, the network's minibatch steps alone on the same number of frames, took {learning:.2f} s "
            f"({100 * learning / update:.0f}% of the update). The update is {update / (games + acting + learning):.2f}x the "
            f"sum of the three; the {rest:.2f} s that the rollout and the learning timed apart do not cover (the lambda-return "
            f"targets among it) is not timed on its own. DQN's network costs "
            f"{dqn:.1f} ms per agent step here, PQN's whole update {pqn:.2f} ms: {dqn / pqn:.1f}x.")
    if "learning, JAX's own convolution gradients" in parts:
        plain = parts["learning, JAX's own convolution gradients"]["per update (s)"]
        text += (f" With JAX's own gradients of the convolutions instead of labcore.nets.conv's, the same learning "
                 f"took {plain:.1f} s, {plain / learning:.1f}x. The reason, with the XLA source it rests on, is in "
                 f"`labcore.nets.conv`'s docstring: XLA's CPU backend rewrites convolutions into the form its Eigen "
                 f"kernels take only at a program's top level, and the convolutions of JAX's own gradients are not in "
                 f"that form; `tests/test_q_networks.py` checks that the epochs' loop of labcore's program holds only "
                 f"convolutions in that form.")
    return text


def substitutions() -> dict[str, str]:
    """The MyST substitutions atari.md uses, from the recorded runs."""
    data = recorded.load(NAME)
    return {
        "atari_run": run_line(data),
        "atari_where": where_line(data),
        "atari_protocol": data["protocol"],
        "atari_blocks": blocks_table(data),
        "atari_games": games_line(data),
        "atari_final": final_sentence(data),
        "atari_evaluations": evaluations_table(data),
        "atari_time": time_table(data),
        "atari_time_note": time_note(data),
        "atari_sources": (f"- Dopamine's data ({{py:mod}}`labcore.course.published`, `DOPAMINE_BREAKOUT_SOURCE`): "
                          f"{published.DOPAMINE_BREAKOUT_SOURCE}\n- CleanRL's PQN (`CLEANRL_PQN_BREAKOUT_SOURCE`): "
                          f"{published.CLEANRL_PQN_BREAKOUT_SOURCE}"),
        "atari_speed_line": speed_line(data),
        "atari_speed": speed_table(data),
        "atari_speed_reading": speed_reading(data),
        "cleanrl_pqn": f"{published.CLEANRL_PQN_BREAKOUT[1]:.2f} +- {published.CLEANRL_PQN_BREAKOUT[2]:.2f}",
    }


def write_figure(path: pathlib.Path) -> pathlib.Path:
    """The recorded curve beside Dopamine's agents, as the page shows it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ax = recorded.atari_figure(recorded.load(NAME))
    path.parent.mkdir(parents=True, exist_ok=True)
    ax.figure.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(ax.figure)
    return path
