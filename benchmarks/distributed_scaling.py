"""Multi-process DQN throughput on this machine: 1, 2 and 4 processes on loopback.

* ``data-parallel`` (``labcore.agents.dqn.multi_process`` under ``labcore.distributed.launch``): P
  processes x 1 CPU device, each device with its own envs and replay, gradients averaged across
  processes every update. Rates are over the run's compiled chunks (the run's ``run_s``: compiles,
  start-up and the evaluation excluded; the replay warm-up's updates, which skip the gradient
  step, included). Each device makes the same number of updates, so updates/s is the cluster's
  update rate and env steps/s counts every device's steps.
* ``actor-learner (Ray)`` (``labcore.agents.dqn.actor_learner``): P Ray actors and one learner on
  a one-node Ray started by the run, parameters through Ray's object store; actor steps/s from the
  first rollout received, learner updates/s at one update per ``train_frequency`` transitions;
  staleness in learner updates between acting and learning.

The table in docs/results/distributed.md also has rows for the same design over ``multiprocessing`` pipes
(``labcore.agents.dqn.actor_learner_pipes`` in labcore at commit 0cc690f), measured in the same run by this script
as it is at that commit; this version of the script measures Ray's only.

    python benchmarks/distributed_scaling.py                  # 20k steps per device / 40k for actor-learner
    python benchmarks/distributed_scaling.py --processes 1 2

Writes benchmarks/results/distributed_scaling.json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from labcore import distributed
from labcore.agents.dqn import core as dqn
from labcore.agents.dqn import actor_learner as dqn_actor_learner
from labcore.tools.benchmarking import write_results

FLAGS = ["--env", "CartPole-v1", "--learning-starts", "1000", "--buffer-size", "5000", "--exploration-fraction", "0.3",
         "--log-every", "100"]


def data_parallel(processes: int, steps: int) -> dict:
    with tempfile.TemporaryDirectory() as run_dir:
        result = distributed.launch(["train", "dqn-data-parallel", *FLAGS, "--total-steps", str(steps), "--run-dir", run_dir],
                                    num_processes=processes, devices_per_process=1, timeout_s=900, stream=None)
        if result.returncode:
            raise RuntimeError(result.message + "\n" + "\n".join(result.output[0][-20:]))
        summary = json.loads((Path(run_dir) / "summary.json").read_text())
    seconds = summary["run_s"]
    return {"updates/s": summary["updates"] / seconds, "env steps/s": summary["timesteps"] / seconds,
            "final return": summary["eval_return_mean"]}


def actor_learner(actors: int, steps: int) -> dict:
    config = dqn.DQNConfig(env_id="CartPole-v1", total_steps=steps, learning_starts=1000, buffer_size=10_000,
                           exploration_fraction=0.3)
    result = dqn_actor_learner.train(config, num_actors=actors, broadcast_every=10, log_every=500, progress=False)
    summary = result.summary
    return {"updates/s": summary["learner_updates_per_second"], "env steps/s": summary["steps_per_second"],
            "final return": summary["eval_return_mean"], "staleness (updates)": summary["mean_staleness"]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--steps", type=int, default=20_000, help="agent steps per device (data-parallel)")
    parser.add_argument("--actor-learner-steps", type=int, default=40_000, help="transitions in all (actor-learner)")
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args(argv)

    rows = []
    for processes in args.processes:
        rows.append({"mode": "data-parallel", "processes": processes, **data_parallel(processes, args.steps)})
        print(rows[-1], flush=True)
    for processes in args.processes:
        rows.append({"mode": "actor-learner (Ray)", "processes": processes, **actor_learner(processes, args.actor_learner_steps)})
        print(rows[-1], flush=True)
    for mode in ("data-parallel", "actor-learner (Ray)"):
        base = next(row for row in rows if row["mode"] == mode)
        for row in rows:
            if row["mode"] == mode:
                row["updates/s vs 1"] = row["updates/s"] / base["updates/s"]
                row["env steps/s vs 1"] = row["env steps/s"] / base["env steps/s"]
    write_results("distributed_scaling", rows, out_dir=args.out,
                  columns=["mode", "processes", "updates/s", "updates/s vs 1", "env steps/s", "env steps/s vs 1",
                           "staleness (updates)", "final return"],
                  extra={"steps_per_device": args.steps, "actor_learner_steps": args.actor_learner_steps})


if __name__ == "__main__":
    main()
