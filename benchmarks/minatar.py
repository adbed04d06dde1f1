"""DQN (the jitted scan) and PQN on MinAtar, side by side in one run: curves, wall time, time to a score.

For each game, each algorithm trains ``--seeds`` seeds at once (``labcore.curves``: a point of the
learning curve against env steps and against wall time at each chunk's end, compiles apart):

* DQN: ``DQNConfig.minatar`` (the MinAtar paper's DQN: one update of 32 transitions per agent
  step, a 100k replay, a target network), ``labcore.agents.dqn.scan``;
* PQN: ``PQNConfig.minatar`` (the PQN paper's settings: 128 envs x 32 steps, LayerNorm,
  Q(lambda)), ``labcore.agents.pqn.core``.

Beside each run: the MinAtar paper's DQN at the same env steps (``labcore.published``). Two
times to a score: to ``--score`` (default: the published DQN return at ``--pqn-steps``), where
a run that never reaches it gives its whole time as a bound; and to DQN's own final return,
which both reach, measured for PQN against DQN's whole run.

    python benchmarks/minatar.py                                   # the README's run
    python benchmarks/minatar.py --games Breakout-MinAtar --pqn-steps 200000 --dqn-steps 20000

Writes benchmarks/results/minatar.json (curves included) and prints a markdown table.
"""

from __future__ import annotations

import argparse
import os

# Before jax is imported: jax 0.10.2 on the CPU can hang after compiling a vmapped training run
# with its concurrency-optimised scheduler (labcore/__main__.py says more); this setting avoids it.
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_enable_concurrency_optimized_scheduler=false").strip()
os.environ["LABCORE_COMPILATION_CACHE"] = "0"  # compile times are real compiles

from labcore import curves, published  # noqa: E402
from labcore.agents.dqn.core import DQNConfig  # noqa: E402
from labcore.agents.pqn.core import PQNConfig  # noqa: E402
from labcore.benchmarking import write_results  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--games", nargs="+", default=["Breakout-MinAtar", "SpaceInvaders-MinAtar"])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--pqn-steps", type=int, default=1_000_000)
    parser.add_argument("--dqn-steps", type=int, default=100_000)
    parser.add_argument("--chunks", type=int, default=10, help="curve points per run")
    parser.add_argument("--score", type=float, default=None,
                        help="time-to-score threshold (default: each game's published DQN return at --pqn-steps)")
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args(argv)

    rows, runs = [], {}
    for env_id in args.games:
        pqn_run = curves.pqn_curve(PQNConfig.minatar(env_id, total_steps=args.pqn_steps), args.seeds, args.chunks)
        dqn_run = curves.dqn_scan_curve(DQNConfig.minatar(env_id, total_steps=args.dqn_steps), args.seeds, args.chunks)
        published_curve = published.MINATAR_DQN.get(env_id, ())
        score = args.score if args.score is not None else published.at(published_curve, args.pqn_steps)
        dqn_final = dqn_run.mean_return[-1]
        for run in (pqn_run, dqn_run):
            steps, wall = run.env_steps[-1], run.wall_s[-1]
            reached_steps, reached_s = run.time_to(score) if score is not None else (None, None)
            rows.append({
                "game": env_id, "algorithm": run.name, "seeds": run.seeds, "env steps": steps,
                "compile (s)": run.compile_s, "wall (s)": wall, "env steps/s (all seeds)": run.seeds * steps / wall,
                "final training return": run.mean_return[-1],
                "published DQN at these steps": published.at(published_curve, steps),
                "greedy return": run.greedy_return, "score": score,
                "steps to score": reached_steps, "seconds to score": reached_s,
                "seconds to DQN's final return": run.time_to(dqn_final)[1],
            })  # fmt: skip
            runs[f"{env_id} {run.name}"] = run.as_dict()
            print(rows[-1], flush=True)
        pqn_row, dqn_row = rows[-2], rows[-1]
        dqn_row["seconds to DQN's final return"] = dqn_row["wall (s)"]  # where its curve ends
        if pqn_row["seconds to DQN's final return"]:
            pqn_row["DQN / PQN seconds to DQN's final return"] = dqn_row["wall (s)"] / pqn_row["seconds to DQN's final return"]
        if pqn_row["seconds to score"]:
            pqn_row["DQN / PQN seconds to score"] = (dqn_row["seconds to score"] or dqn_row["wall (s)"]) / pqn_row["seconds to score"]
            pqn_row["that ratio is a lower bound"] = dqn_row["seconds to score"] is None
    write_results("minatar", rows, out_dir=args.out, extra={"curves": runs, "args": vars(args),
                                                             "published_source": published.MINATAR_SOURCE})


if __name__ == "__main__":
    main()
