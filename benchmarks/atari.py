"""PQN on Atari from pixels: long training runs on this machine, resumable, and the curve they leave.

    python benchmarks/atari.py train --runs ~/atari-runs --seeds 0 1 2           # hours on a 2-core CPU
    python benchmarks/atari.py train --runs ~/atari-runs --seeds 0 --preset atari_dopamine
    python benchmarks/atari.py speed                  # where an update's time goes, against its floors (an idle machine)
    python benchmarks/atari.py curve --runs ~/atari-runs --speed benchmarks/results/atari_speed.json

``train`` runs ``PQNConfig.<preset>(env_id)`` through ``labcore.agents.pqn.train`` (the same driver
as ``python -m labcore train pqn --preset atari``) into ``RUNS/<preset>-<game>-seed<k>``, one seed
after another, with a checkpoint and an evaluation (32 whole games at epsilon 0.001) every
``--eval-every`` updates (61 updates of 4,096 agent steps: about 1M frames). Run it again after an
interruption and each run goes on from its newest checkpoint (a finished run is skipped), so it can
run in slices, e.g. ``--max-seconds 540`` where a GPU's time comes ten minutes at a time (``make
bench-device PART=atari BUDGET=540``: 40M frames on a GPU, a slice a call). Keep the run
folders outside the repository: they hold checkpoints.

``speed`` times, on this machine with nothing else running, one PQN update of the preset (128 envs
x 32 steps, 2 epochs of 32 minibatches) and its parts: the rollout (the games and the acting
network), the learning (the 64 minibatch steps), each against its floor (ALE's vector env stepped
with random actions inside a jitted scan; the network's forwards and minibatch steps alone on random
frames), and DQN's network cost per agent step beside PQN's. It writes benchmarks/results/atari_speed.json.

``curve`` reads the run folders (and the speed results) and writes the small file the results page
and lesson 12 render from, ``labcore/course/recorded/pqn_atari_breakout.json``: per seed, the mean
return of every training game (all five lives, the game's points) that ended in each 1M-frame block
(the statistic Dopamine's baselines plot), the evaluations, wall time and throughput.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import sys
import time
from pathlib import Path

FRAMES_PER_STEP = 4  # ALE's action repeat: one agent step is 4 frames
BLOCK_FRAMES = 1_000_000  # Dopamine's iteration: 250,000 agent steps
REPO = Path(__file__).resolve().parents[1]
RECORDED = REPO / "labcore" / "course" / "recorded" / "pqn_atari_breakout.json"


def run_folder(runs: Path, preset: str, env_id: str, seed: int) -> Path:
    game = env_id.split("/")[-1].split("-")[0].lower()
    return runs / f"{preset}-{game}-seed{seed}"


def train(args: argparse.Namespace) -> int:
    from labcore.agents import pqn

    overrides = {} if args.frames is None else {"total_steps": args.frames // FRAMES_PER_STEP}
    if args.env_stepping:
        overrides["env_stepping"] = args.env_stepping
    for setting in args.set or ():
        field, _, value = setting.partition("=")
        overrides[field] = json.loads(value)
    began = time.time()
    for seed in args.seeds:
        config = getattr(pqn.Config, args.preset)(args.env, seed=seed, **overrides)
        folder = run_folder(args.runs, args.preset, args.env, seed)
        if (folder / "summary.json").exists():
            print(f"{folder}: finished", flush=True)
            continue
        resume = (folder / "checkpoints").exists() and any((folder / "checkpoints").iterdir())
        deadline = None if args.max_seconds is None else began + args.max_seconds

        def show(row, folder=folder):
            if int(row["update"]) % 10 == 0:
                print(f"{folder.name} update {int(row['update'])}: return {float(row['episode_return']):.1f} "
                      f"epsilon {float(row['epsilon']):.3f} loss {float(row['loss']):.4f}", flush=True)

        print(f"{folder}: {'resuming' if resume else 'starting'} {config}", flush=True)
        call_began = time.time()
        result = pqn.train(config, folder, log_every=1, checkpoint_every=args.eval_every, eval_every=args.eval_every,
                           resume=resume, progress=False, on_metrics=show, stop_after_s=None if deadline is None
                           else max(0.0, deadline - time.time()))
        record_call(folder, call_began, result.summary)
        print(f"{folder}: {json.dumps(result.summary)}", flush=True)
        if "stopped_at_update" in result.summary or (deadline is not None and time.time() >= deadline):
            print(f"stopped at the budget of {args.max_seconds:.0f} s: the same command goes on", flush=True)
            return 0
    return 0


def record_call(folder: Path, began: float, summary: dict) -> None:
    """One line in the run folder's calls.jsonl per call of ``train`` that ended at a checkpoint: a run trained
    in several calls has its time in several summaries (summary.json holds the last call's only)."""
    call = {"began": began, "ended": time.time(), "updates_to": summary.get("stopped_at_update", summary.get("updates")),
            "steps_run": steps_this_call(summary), "compile_s": summary.get("compile_s"), "run_s": summary.get("run_s")}
    with open(folder / "calls.jsonl", "a") as out:
        out.write(json.dumps(call) + "\n")


def steps_this_call(summary: dict) -> int | None:
    """The agent steps one call ran: its rate times its run seconds (the summary's rate divides by these)."""
    if summary.get("steps_per_second") is None or summary.get("run_s") is None:
        return None
    return round(summary["steps_per_second"] * summary["run_s"])


def training_time(folder: Path, summary: dict) -> tuple[float | None, float | None, int]:
    """(compiled chunks' seconds, first start to last end in seconds, calls) over every call of a run.

    A run finished in one call: its summary (compile and run seconds) and its folder's files' times. A run
    resumed: the calls ``train`` recorded (calls.jsonl); a call killed before a checkpoint left no line, so
    where the recorded calls do not cover every step, both times are None (not recorded)."""
    this_call = steps_this_call(summary)
    if this_call is not None and abs(this_call - summary["timesteps"]) <= 0.01 * summary["timesteps"]:
        wall = (folder / "summary.json").stat().st_mtime - (folder / "config.json").stat().st_mtime
        return summary["compile_s"] + summary["run_s"], wall, 1
    path = folder / "calls.jsonl"
    calls = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    if abs(sum(call["steps_run"] or 0 for call in calls) - summary["timesteps"]) > 0.01 * summary["timesteps"]:
        return None, None, len(calls)
    return (sum(call["compile_s"] + call["run_s"] for call in calls), calls[-1]["ended"] - calls[0]["began"], len(calls))


def block_returns(rows: list[dict]) -> list[dict]:
    """The mean return of the training games that ended in each 1M-frame block, from the metrics rows
    of every update (a row: the mean return of the games that ended in that update, and how many)."""
    blocks: dict[int, list[float]] = {}
    for row in rows:
        if "episodes" not in row or not row["episodes"]:
            continue
        block = (row["timesteps"] * FRAMES_PER_STEP - 1) // BLOCK_FRAMES  # the block the update ends in
        total = blocks.setdefault(block, [0.0, 0])
        total[0] += row["episode_return"] * row["episodes"]
        total[1] += row["episodes"]
    return [{"frames_end": (block + 1) * BLOCK_FRAMES, "games": int(count), "mean_return": round(total / count, 3)}
            for block, (total, count) in sorted(blocks.items())]


def read_run(folder: Path) -> dict:
    from labcore.logging import read_metrics

    rows = read_metrics(folder)
    summary = json.loads((folder / "summary.json").read_text())
    config = json.loads((folder / "config.json").read_text())
    evaluations = [{"frames": row["timesteps"] * FRAMES_PER_STEP, "mean_return": round(row["eval_return_mean"], 3),
                    "std": round(row["eval_return_std"], 3), "games": row["eval_episodes"]}
                   for row in rows if "eval_return_mean" in row]
    train_s, wall_s, calls = training_time(folder, summary)
    frames = summary["timesteps"] * FRAMES_PER_STEP
    return {
        "seed": config["seed"],
        "frames": frames,
        "blocks": [block for block in block_returns(rows) if block["frames_end"] <= frames + BLOCK_FRAMES // 2],
        "evaluations": evaluations,
        "final_evaluation": {"mean_return": round(summary["eval_return_mean"], 3), "std": round(summary["eval_return_std"], 3),
                             "games": summary["eval_episodes"], "random_return": round(summary["random_return_mean"], 3)},
        "calls": calls,
        "train_s": None if train_s is None else round(train_s, 1),
        "wall_s": None if wall_s is None else round(wall_s, 1),
        "agent_steps_per_s": None if train_s is None else round(summary["timesteps"] / train_s, 1),
        "env_stepping": summary["env_stepping"],
        "games": sum(row.get("episodes", 0) or 0 for row in rows),
    }


def curve(args: argparse.Namespace) -> int:
    import jax

    from labcore.tools.benchmarking import machine_description

    folders = sorted(p for p in args.runs.glob(f"{args.preset}-*-seed*") if (p / "summary.json").exists())
    if not folders:
        print(f"no finished run in {args.runs}", file=sys.stderr)
        return 1
    config = json.loads((folders[0] / "config.json").read_text())
    runs = [read_run(folder) for folder in folders]
    data = {
        "command": f"python benchmarks/atari.py train --runs RUNS --seeds {' '.join(str(r['seed']) for r in runs)}"
                   + ("" if args.preset == "atari" else f" --preset {args.preset}"),
        "machine": args.machine or machine_description()["label"],
        "jax": jax.__version__,
        "ale_py": importlib.metadata.version("ale-py"),
        "date": args.date or time.strftime("%Y-%m-%d", time.localtime((folders[-1] / "summary.json").stat().st_mtime)),
        "env_id": config["env_id"],
        "preset": args.preset,
        "protocol": "a lost life terminal for learning, rewards clipped to [-1, 1] for learning, no sticky actions, "
                    "FIRE and then 0 to 28 no-op actions when a game starts" if config["life_loss_terminal"] else
                    "sticky actions 0.25, no life-loss terminal, rewards clipped to [-1, 1] for learning, "
                    "FIRE and then 0 to 28 no-op actions when a game starts",
        "protocol_short": "a lost life terminal" if config["life_loss_terminal"] else "sticky actions, whole games",
        "eval_epsilon": config["eval_epsilon"],
        "beside": args.beside,
        "config": config,
        "runs": runs,
    }
    if args.speed is not None:
        data["speed"] = json.loads(args.speed.read_text())
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


def speed(args: argparse.Namespace) -> int:
    """Time one PQN update of the preset and its parts against their floors; see the module docstring."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from labcore.agents.dqn import host_loop
    from labcore.agents.dqn.config import DQNConfig
    from labcore.agents.dqn.core import Transition
    from labcore.agents.pqn import core as pqn
    from labcore.envs.ale_jax import AtariJaxEnv
    from labcore.tools.benchmarking import time_call, write_results

    load_before = os.getloadavg()[0]

    config = getattr(pqn.PQNConfig, args.preset)(args.env)
    agent = pqn.make_pqn(config)
    runner = agent.init(jax.random.key(0))
    steps = config.batch_size  # agent steps per update
    repeats = args.repeats
    rows = []

    def row(name, seconds, per_update, note):
        rows.append({"part": name, "seconds (median)": round(seconds, 4), "per update (s)": round(per_update, 3),
                     "ms per agent step": round(1000 * per_update / steps, 3), "what": note})

    # the whole update, as training runs it (its chunk: num updates in one compiled run)
    run2 = jax.jit(lambda r: agent.run(r, 2)[0])
    full = time_call(run2, runner, warmup=1, repeats=repeats).median_s / 2
    row("PQN update", full, full, "rollout of 128 envs x 32 steps, targets, 2 epochs x 32 minibatch steps")
    # its two halves
    collect = jax.jit(lambda r: agent.collect(r, jnp.float32(0.01)))
    rollout_s = time_call(collect, runner, warmup=1, repeats=repeats).median_s
    row("rollout", rollout_s, rollout_s, "32 steps of the 128 games, the Q-network acting at each")
    frames = jnp.asarray(np.random.default_rng(0).integers(0, 256, (steps, 4, 84, 84)), jnp.uint8)
    data = (frames, jnp.zeros(steps, jnp.int32), jnp.zeros(steps, jnp.float32))
    learn = jax.jit(agent.learn)
    learn_s = time_call(learn, runner.params, runner.opt_state, data, jax.random.key(1), warmup=1, repeats=repeats).median_s
    row("learning", learn_s, learn_s, "2 epochs x 32 minibatch steps of 128 frames (random frames)")
    if args.plain_conv:  # the same learning, traced with JAX's own convolution gradients (labcore.nets.conv)
        from labcore import devices

        # conv2d takes lax's convolution, as it does for a GPU; a new agent, so that its functions are traced
        # afresh (JAX reuses a function's trace, and agent.learn's was made with labcore's convolution)
        with devices.compiling_for("gpu"):
            plain_agent = pqn.make_pqn(config)
            plain = jax.jit(plain_agent.learn).lower(runner.params, runner.opt_state, data, jax.random.key(1)).compile()
        plain_s = time_call(plain, runner.params, runner.opt_state, data, jax.random.key(1), warmup=0, repeats=1).median_s
        row("learning, JAX's own convolution gradients", plain_s, plain_s,
            "the same, with lax's convolution and its automatic gradient (non-canonical inside the loop)")
    # floors: the games alone (random actions, the same stepping), the acting network alone
    games = AtariJaxEnv(pqn.atari_settings(config), config.env_stepping)

    def random_play(state, key):
        def body(state, key):
            actions = jax.random.randint(key, (config.num_envs,), 0, games.num_actions)
            _, state, step = games.step(None, state, actions)
            return state, step.score.sum()
        return jax.lax.scan(body, state, jax.random.split(key, config.num_steps))

    _, state = games.reset(jax.random.key(2))
    play = jax.jit(random_play)
    env_s = time_call(play, state, jax.random.key(3), warmup=1, repeats=repeats).median_s
    row("floor: the games", env_s, env_s, f"ALE's vector env, random actions, 32 steps of 128 games ({games.stepping})")
    forward = jax.jit(lambda p, o: jax.lax.scan(lambda c, x: (c + agent.network.apply(p, None, x).max(), None), 0.0, o)[0])
    act_s = time_call(forward, runner.params, frames.reshape(config.num_steps, config.num_envs, *frames.shape[1:]),
                      warmup=1, repeats=repeats).median_s
    row("floor: acting", act_s, act_s, "32 forwards of the Q-network on 128 frames")
    row("floors: games + acting + learning", env_s + act_s + learn_s, env_s + act_s + learn_s, "the sum of the three")
    # DQN's network cost per agent step (one batch-32 update every 4 agent steps, a forward on 1 frame each step)
    dqn_config = DQNConfig.atari_short(args.env)
    dqn_agent = host_loop.make_agent(dqn_config)
    train_state = dqn_agent.init(jax.random.key(4))
    batch = Transition(obs=frames[:32], action=jnp.zeros(32, jnp.int32), reward=jnp.zeros(32),
                                     next_obs=frames[32:64], terminated=jnp.zeros(32, bool))
    dqn_update = jax.jit(dqn_agent.learn)
    update_s = time_call(dqn_update, train_state, batch, warmup=1, repeats=repeats).median_s
    act1 = jax.jit(lambda p, o: dqn_agent.act(p, o, 0.01, jax.random.key(0)))
    act1_s = time_call(act1, train_state.params, frames[:1], warmup=1, repeats=repeats).median_s
    dqn_per_step = update_s / dqn_config.train_frequency + act1_s
    rows.append({"part": "DQN (atari_short)", "seconds (median)": round(update_s, 4), "per update (s)": None,
                 "ms per agent step": round(1000 * dqn_per_step, 3),
                 "what": f"one update on 32 frames every {dqn_config.train_frequency} agent steps, a forward on 1 frame each step"})
    extra = {"preset": args.preset, "env_id": args.env, "agent_steps_per_update": steps,
             "pqn_agent_steps_per_s": round(steps / full, 1), "env_floor_agent_steps_per_s": round(steps / env_s, 1),
             # what else the machine ran: the 1-minute load average before and after (2 cores: 2.0 is both busy)
             "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)]}
    write_results("atari_speed", rows, extra=extra)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("train", help="train (or go on training) one run per seed")
    run.add_argument("--runs", type=Path, required=True, help="folder of the run folders (outside the repository)")
    run.add_argument("--seeds", type=int, nargs="+", default=[0])
    run.add_argument("--preset", default="atari", choices=("atari", "atari_dopamine"))
    run.add_argument("--env", default="ALE/Breakout-v5")
    run.add_argument("--frames", type=int, default=None, help="frames per run (default: the preset's 10M)")
    run.add_argument("--eval-every", type=int, default=61, help="updates between checkpoints and evaluations")
    run.add_argument("--env-stepping", default=None, choices=("xla", "callback"))
    run.add_argument("--set", nargs="+", metavar="FIELD=VALUE",
                     help="other PQNConfig fields, values as JSON (e.g. num_envs=8 eval_episodes=4)")
    run.add_argument("--max-seconds", type=float, default=None,
                     help="stop at the last checkpoint that fits in about this many seconds; the same command goes on")
    measure = commands.add_parser("speed", help="one update of the preset and its parts against their floors")
    measure.add_argument("--preset", default="atari", choices=("atari", "atari_dopamine"))
    measure.add_argument("--env", default="ALE/Breakout-v5")
    measure.add_argument("--repeats", type=int, default=3)
    measure.add_argument("--plain-conv", action=argparse.BooleanOptionalAction, default=True,
                         help="also time the learning with JAX's own convolution gradients (minutes on a CPU)")
    record = commands.add_parser("curve", help="the recorded curve the results page and lesson 12 read")
    record.add_argument("--runs", type=Path, required=True)
    record.add_argument("--preset", default="atari", choices=("atari", "atari_dopamine"))
    record.add_argument("--speed", type=Path, default=None, help="benchmarks/results/atari_speed.json to fold in")
    record.add_argument("--beside", default=None, help="what else ran on the machine during the runs, in words "
                        "(the time table says it)")
    record.add_argument("--machine", default=None, help="the machine in words (default: its CPU model, cores and accelerator)")
    record.add_argument("--date", default=None)
    record.add_argument("--out", type=Path, default=RECORDED)
    args = parser.parse_args(argv)
    return {"train": train, "speed": speed, "curve": curve}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
