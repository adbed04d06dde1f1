"""The ``python -m labcore`` command line.

    python -m labcore doctor            versions, devices and a measured micro-benchmark
    python -m labcore doctor --json     the same as JSON
    python -m labcore exercises         list the notebook exercises and what each asks
    python -m labcore train dqn --env CartPole-v1 --run-dir runs/cartpole [--total-steps ...]
    python -m labcore train dqn --preset atari_short --env ALE/Breakout-v5 --run-dir runs/breakout
    python -m labcore eval dqn --checkpoint runs/cartpole [--episodes 20 --epsilon 0.05]
    python -m labcore train ppo --env Vault-v0 --num-envs 64 --total-steps 2000000 --run-dir runs/vault
    python -m labcore train ppo --preset cartpole --run-dir runs/ppo-cartpole
    python -m labcore eval ppo --checkpoint runs/vault [--episodes 100]
    python -m labcore train pqn --preset minatar --env Breakout-MinAtar --total-steps 2000000 --run-dir runs/pqn
    python -m labcore eval pqn --checkpoint runs/pqn [--episodes 100]
    python -m labcore train dqn-scan --env CartPole-v1 --total-steps 100000 --run-dir runs/dqn-scan [--resume]
    python -m labcore launch --num-processes 2 --devices-per-process 2 -- cluster-check
    python -m labcore train gflownet --trainer hybrid --loss tb --ndim 4 --height 8 --iterations 2000
    python -m labcore launch --num-processes 2 --devices-per-process 2 -- train dqn --env CartPole-v1
    python -m labcore train dqn-actor-learner --env CartPole-v1 --num-actors 4 [--address auto]
    python -m labcore train iqn --mode jax_fused --epochs 200 --run-dir runs/iqn [--num-worlds 8 ...]
    python -m labcore eval iqn --checkpoint runs/iqn --epochs 10

Every field of DQNConfig, PPOConfig, PQNConfig and GFlowNetConfig, and every flat field of IQNRunConfig
(its own, its world's and its agents'), is a flag of ``train dqn`` and ``train dqn-scan``, ``train ppo``, ``train pqn``,
``train gflownet`` and ``train iqn`` (``--help`` lists them with their defaults).
Every ``train`` command with ``--run-dir`` also writes its metrics as TensorBoard event files there
(``--no-tensorboard``: not); ``tensorboard --logdir runs`` then shows every run folder below runs/.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def invoked_as(argv0: str) -> str:
    """The command a user typed, for help and errors: ``python -m labcore`` or the ``labcore`` script."""
    import os

    name = os.path.basename(argv0)
    return "python -m labcore" if name in ("__main__.py", "-m", "") else name


def build_parser() -> argparse.ArgumentParser:
    from labcore import __version__

    parser = argparse.ArgumentParser(prog=invoked_as(sys.argv[0]), description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="version", version=f"labcore {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    doctor = commands.add_parser("doctor", help="print versions, devices and a measured micro-benchmark")
    doctor.add_argument("--matmul-n", type=_positive_int, default=1024, help="square matmul size (default 1024)")
    doctor.add_argument(
        "--vector-size", type=_positive_int, default=1_000_000, help="length of the jit speed-up vector"
    )
    doctor.add_argument("--json", action="store_true", help="print the results as JSON")

    commands.add_parser("exercises", help="list the notebook exercises")

    train = commands.add_parser("train", help="train an agent").add_subparsers(dest="agent", required=True)
    train_dqn = train.add_parser("dqn", help="DQN on a gymnasium env (classic control or ALE/ Atari)")
    train_dqn.add_argument("--preset", choices=("default", "nature_atari", "atari_short"), default="default",
                           help="starting configuration that the other flags override")
    _add_config_flags(train_dqn)
    _add_auto_tune_flag(train_dqn, "buffer_size / batch_size / hidden_sizes / num_envs")
    train_dqn.add_argument("--run-dir", default=None, help="folder for metrics (JSONL, CSV, TensorBoard) and checkpoints/")
    train_dqn.add_argument("--log-every", type=_positive_int, default=100,
                           help="updates (train_frequency agent steps and a gradient step) between metric rows")
    train_dqn.add_argument("--checkpoint-every", type=_positive_int, default=None, help="updates between checkpoints")
    train_dqn.add_argument("--no-save-replay", action="store_true", help="leave the replay buffer out of checkpoints")
    train_dqn.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in --run-dir")
    train_dqn.add_argument("--overwrite", action="store_true", help="replace an earlier run in --run-dir")
    train_dqn.add_argument("--no-eval", action="store_true", help="skip the evaluation after training")
    train_dqn.add_argument("--replicas-per-device", type=_positive_int, default=1,
                           help="(under `launch`) DQN replicas on each device: 8 on 1 device run as 1 on each of 8")
    _add_tensorboard_flag(train_dqn)

    train_ppo = train.add_parser("ppo", help="action-masked PPO on Vault-v0 or a gymnax env (all on device)")
    train_ppo.add_argument("--preset", choices=("default", "cartpole"), default="default",
                           help="starting configuration: the default PPOConfig (masked Vault), or PureJaxRL's CartPole")
    _add_config_flags(train_ppo, "PPOConfig")
    _add_auto_tune_flag(train_ppo, "num_envs / num_steps / hidden_size")
    _add_loop_flags(train_ppo, log_every=10)

    train_pqn = train.add_parser("pqn", help="PQN (no replay, no target network) on a gymnax env (all on device)")
    train_pqn.add_argument("--preset", choices=("default", "cartpole", "minatar"), default="default",
                           help="starting configuration: CartPole (the default), or the PQN paper's MinAtar settings")
    _add_config_flags(train_pqn, "PQNConfig")
    _add_auto_tune_flag(train_pqn, "num_envs / num_steps / hidden_sizes")
    _add_loop_flags(train_pqn, log_every=10)

    train_scan = train.add_parser("dqn-scan", help="DQN on a gymnax env, all of training one jitted program")
    train_scan.add_argument("--preset", choices=("default", "minatar"), default="default",
                            help="starting configuration that the other flags override")
    _add_config_flags(train_scan)
    _add_loop_flags(train_scan, log_every=100, update="train_frequency agent steps and one gradient step")

    train_al = train.add_parser("dqn-actor-learner",
                                help="DQN with Ray actors feeding one learner: this machine, or a Ray cluster (--address)")
    _add_config_flags(train_al)
    train_al.add_argument("--address", default=None,
                          help="Ray cluster to join: 'auto' (the one `ray start` runs on this machine) or HEAD_IP:PORT; "
                               "default: start Ray on this machine, listening on 127.0.0.1 only")
    train_al.add_argument("--num-actors", type=_positive_int, default=2, help="Ray actors, spread over the cluster's nodes")
    train_al.add_argument("--envs-per-actor", type=_positive_int, default=4)
    train_al.add_argument("--rollout-steps", type=_positive_int, default=32, help="steps of each rollout an actor returns")
    train_al.add_argument("--broadcast-every", type=_positive_int, default=10, help="learner updates between parameter copies")
    train_al.add_argument("--max-restarts", type=int, default=3, help="times Ray restarts an actor that died")
    train_al.add_argument("--cpus-per-actor", type=float, default=1.0, help="Ray CPUs each actor reserves")
    train_al.add_argument("--stall-timeout", type=float, default=120.0,
                          help="seconds without any rollout before the run stops (actors that cannot be placed)")
    train_al.add_argument("--actor-deadline", type=float, default=60.0,
                          help="seconds an actor may go without delivering a rollout before it is killed and restarted "
                               "(its first after a start: at least three times the slowest first one measured)")
    train_al.add_argument("--timeout", type=float, default=None, help="seconds for the whole run (default: no limit)")
    train_al.add_argument("--run-dir", default=None, help="folder for metrics (JSONL, CSV, TensorBoard) and checkpoints/")
    train_al.add_argument("--log-every", type=_positive_int, default=200, help="learner updates between metric rows")
    train_al.add_argument("--checkpoint-every", type=_positive_int, default=None, help="learner updates between checkpoints")
    train_al.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in --run-dir")
    train_al.add_argument("--overwrite", action="store_true", help="replace an earlier run in --run-dir")
    _add_tensorboard_flag(train_al)

    launch = commands.add_parser("launch", help="run a labcore command as N local processes joined by jax.distributed")
    launch.add_argument("--num-processes", type=_positive_int, default=2)
    launch.add_argument("--devices-per-process", type=_positive_int, default=2, help="CPU devices in each process")
    launch.add_argument("--timeout", type=float, default=None,
                        help="seconds before every worker is stopped (default: no limit; a failed worker stops all)")
    launch.add_argument("--join-timeout", type=float, default=60.0, help="seconds for all workers to join the cluster")
    launch.add_argument("worker_command", nargs=argparse.REMAINDER,
                        help="after --: the labcore command each worker runs, e.g. -- train dqn --env CartPole-v1")
    commands.add_parser("cluster-check", help="(in a launched worker) join, psum across processes, compare values")

    train_gfn = train.add_parser("gflownet", help="a GFlowNet on HyperGrid: all PyTorch, PyTorch sampling + JAX gradients, or all JAX (checkpointed)")
    _add_config_flags(train_gfn, "GFlowNetConfig")
    _add_auto_tune_flag(train_gfn, "batch_size / hidden_size")
    # --checkpoint-every, --resume and --seeds need --trainer jax (the others run in one call, unsaved)
    _add_loop_flags(train_gfn, 100, "one iteration: a batch of trajectories and a gradient step")

    train_iqn = train.add_parser("iqn", help="multi-agent IQN on treasurehunt in one of four run modes (pytorch .. jax_fused)")
    _add_config_flags(train_iqn, "IQNRunConfig")
    _add_auto_tune_flag(train_iqn, "num_worlds / hidden_size / n_tau_act / batch_size / buffer_size")
    # --checkpoint-every, --resume and --seeds need --mode jax_fused (the others run in one call)
    _add_loop_flags(train_iqn, 10, "one epoch: the turns, then a train step per agent")

    evaluate = commands.add_parser("eval", help="evaluate a checkpoint").add_subparsers(dest="agent", required=True)
    eval_dqn = evaluate.add_parser("dqn", help="evaluate a DQN checkpoint")
    eval_dqn.add_argument("--checkpoint", required=True, help="a run directory or its checkpoints/ folder")
    eval_dqn.add_argument("--step", type=int, default=None, help="checkpoint step (default: the newest)")
    eval_dqn.add_argument("--episodes", type=_positive_int, default=None, help="default: the config's eval_episodes")
    eval_dqn.add_argument("--epsilon", type=float, default=None, help="default: the config's eval_epsilon")
    eval_dqn.add_argument("--seed", type=int, default=10_000)
    eval_ppo = evaluate.add_parser("ppo", help="greedy and sampled episodes of a PPO checkpoint, beside random play")
    eval_ppo.add_argument("--checkpoint", required=True, help="a run directory or its checkpoints/ folder")
    eval_ppo.add_argument("--step", type=int, default=None, help="checkpoint step in updates (default: the newest)")
    eval_ppo.add_argument("--episodes", type=_positive_int, default=100)
    eval_ppo.add_argument("--seed", type=int, default=10_000)
    eval_pqn = evaluate.add_parser("pqn", help="episodes of a PQN checkpoint (greedy by default), beside random play")
    eval_pqn.add_argument("--checkpoint", required=True, help="a run directory or its checkpoints/ folder")
    eval_pqn.add_argument("--step", type=int, default=None, help="checkpoint step in updates (default: the newest)")
    eval_pqn.add_argument("--episodes", type=_positive_int, default=100)
    eval_pqn.add_argument("--epsilon", type=float, default=0.0)
    eval_pqn.add_argument("--seed", type=int, default=10_000)
    eval_iqn = evaluate.add_parser("iqn", help="greedy play (epsilon 0) of an IQN checkpoint, beside random play")
    eval_iqn.add_argument("--checkpoint", required=True, help="a run directory or its checkpoints/ folder")
    eval_iqn.add_argument("--step", type=int, default=None, help="checkpoint step in epochs (default: the newest)")
    eval_iqn.add_argument("--epochs", type=_positive_int, default=10, help="epochs of greedy play")
    eval_iqn.add_argument("--seed", type=int, default=10_000)
    # The world and network flags override the checkpoint's config (a network flag that does not
    # fit the saved parameters is an error); the training-only fields are not flags here.
    _add_config_flags(eval_iqn, "IQNRunConfig", exclude=_IQN_TRAINING_ONLY)
    return parser


def _add_loop_flags(parser: argparse.ArgumentParser, log_every: int, update: str = "a rollout and its epochs") -> None:
    """The flags of a run on the shared driver (labcore.loop.train), which counts in updates."""
    parser.add_argument("--run-dir", default=None, help="results folder: config, metrics, plots, checkpoints, summary")
    parser.add_argument("--log-every", type=_positive_int, default=log_every,
                        help=f"updates between metric rows (an update: {update})")
    parser.add_argument("--checkpoint-every", type=_positive_int, default=None,
                        help="updates between checkpoints (default: one, at the end)")
    parser.add_argument("--resume", action="store_true", help="continue from the newest intact checkpoint in --run-dir")
    parser.add_argument("--overwrite", action="store_true", help="replace an earlier run in --run-dir")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--seeds", type=_positive_int, default=None,
                        help="train this many seeds at once (--seed, --seed + 1, ...) in one vmap; rows are their means")
    parser.add_argument("--no-eval", action="store_true", help="no evaluation episodes at the end")
    _add_tensorboard_flag(parser)


def _add_tensorboard_flag(parser: argparse.ArgumentParser) -> None:
    # On by default: a run folder is for looking at a run, and TensorBoard is how most people do.
    parser.add_argument("--tensorboard", action=argparse.BooleanOptionalAction, default=True,
                        help="also write the metrics as TensorBoard event files into --run-dir (default: on); "
                             "view them with `tensorboard --logdir runs` (the folder above the run folders), "
                             "or in Colab/Jupyter `%%load_ext tensorboard` then `%%tensorboard --logdir runs`")


def _add_auto_tune_flag(parser: argparse.ArgumentParser, fields: str) -> None:
    parser.add_argument("--auto-tune", action="store_true",
                        help=f"shrink {fields} to fit this device (labcore.devices.auto_tune; only shrinks)")


def _auto_tuned(args: argparse.Namespace, config):
    """The config fitted to this device when --auto-tune was given (one printed line per change)."""
    if not getattr(args, "auto_tune", False):
        return config
    from labcore import devices

    config, changes = devices.auto_tune(config)
    for change in changes:
        print(f"auto-tune: {change}")
    return config


# IQNRunConfig fields that only describe how a run trains, not the agents or the world.
_IQN_TRAINING_ONLY = ("mode", "epochs", "seed", "num_worlds", "epochs_per_call")


def _flag_type(annotation: str):
    """(argparse type, nargs) for a config field annotation (dataclass annotations are strings here)."""
    if annotation.startswith("tuple"):
        return int, "+"
    if annotation == "float | None":
        return (lambda text: None if text.lower() == "none" else float(text)), None
    return {"int": int, "float": float, "str": str}[annotation], None


def _config_class(name: str):
    if name == "IQNRunConfig":  # its own import: the other configs need not load for it
        from labcore.agents.iqn.run_config import IQNRunConfig

        return IQNRunConfig
    from labcore.agents.dqn.core import DQNConfig
    from labcore.agents.gflownet.core import GFlowNetConfig
    from labcore.agents.ppo.core import PPOConfig
    from labcore.agents.pqn.core import PQNConfig

    return {"DQNConfig": DQNConfig, "PPOConfig": PPOConfig, "PQNConfig": PQNConfig, "GFlowNetConfig": GFlowNetConfig}[name]


def _add_config_flags(parser: argparse.ArgumentParser, config_class: str = "DQNConfig",
                      exclude: tuple[str, ...] = ()) -> None:
    group = parser.add_argument_group(f"{config_class} fields (unset flags keep the preset's value)")
    cls = _config_class(config_class)
    # A composed config (IQNRunConfig: the run, the world, the agent) has one flag per flat field.
    for field in cls.flat_fields() if hasattr(cls, "flat_fields") else dataclasses.fields(cls):
        if field.name in exclude:
            continue
        flag = "--" + ("env" if field.name == "env_id" else field.name.replace("_", "-"))
        default = field.default
        if field.type == "bool":
            group.add_argument(flag, dest=field.name, action=argparse.BooleanOptionalAction, default=None,
                               help=f"(default {default})")
            continue
        kind, nargs = _flag_type(field.type)
        group.add_argument(flag, dest=field.name, type=kind, nargs=nargs, default=None, help=f"(default {default})")


def _config_from(args: argparse.Namespace, config_class: str = "DQNConfig"):
    cls = _config_class(config_class)
    overrides = {}
    for field in cls.flat_fields() if hasattr(cls, "flat_fields") else dataclasses.fields(cls):
        value = getattr(args, field.name)
        if value is not None:
            overrides[field.name] = tuple(value) if isinstance(value, list) else value
    preset = getattr(args, "preset", "default")  # commands without presets (train gflownet) have no flag
    if preset == "default":
        return cls(**overrides)
    return getattr(cls, preset)(**overrides)


def _train_dqn(args: argparse.Namespace) -> int:
    from labcore import distributed

    if distributed.launched():  # a worker of `python -m labcore launch`: data-parallel over the cluster
        return _train_dqn_distributed(args)  # main has joined the cluster, before anything touched a device
    from labcore.agents.dqn import host_loop as dqn_loop

    if args.replicas_per_device != 1:
        raise ValueError("replicas_per_device: replicas are the data-parallel DQN's, started by `python -m labcore "
                         "launch ... -- train dqn ...`; this process was not launched")
    config = _auto_tuned(args, _config_from(args))
    print(config)
    result = dqn_loop.train(
        config,
        run_dir=args.run_dir,
        log_every=args.log_every,
        checkpoint_every=args.checkpoint_every,
        save_replay=not args.no_save_replay,
        resume=args.resume,
        overwrite=args.overwrite,
        eval_episodes=0 if args.no_eval else config.eval_episodes,
        tensorboard=args.tensorboard,
    )
    print(json.dumps(result.summary))
    return 0


def _train_dqn_distributed(args: argparse.Namespace) -> int:
    import jax

    from labcore.agents.dqn import multi_process as dqn_distributed

    config = _auto_tuned(args, _config_from(args))
    if jax.process_index() == 0:
        print(config)
    result = dqn_distributed.train(config, run_dir=args.run_dir, log_every=args.log_every,
                                   checkpoint_every=args.checkpoint_every,
                                   resume=args.resume, overwrite=args.overwrite, tensorboard=args.tensorboard,
                                   evaluate=not args.no_eval, progress=False, on_metrics=_print_row_on_first_process,
                                   replicas_per_device=args.replicas_per_device)
    summary = result.summary
    print(json.dumps({"process": jax.process_index(), **{name: summary.get(name) for name in (
        "processes", "devices", "replicas", "updates", "timesteps", "run_s", "final_episode_return", "eval_return_mean",
        "params_fingerprint")}}))
    return 0


def _print_row_on_first_process(row: dict) -> None:  # a launched run's output has rank prefixes: lines, not a bar
    import jax

    if jax.process_index() == 0:
        print("  ".join(f"{name} {float(row[name]):.4g}" for name in ("update", "timesteps", "episode_return", "loss")))


def _train_dqn_actor_learner(args: argparse.Namespace) -> int:
    from labcore.agents.dqn import actor_learner

    config = _config_from(args)
    print(config)
    result = actor_learner.run(
        config, num_actors=args.num_actors, envs_per_actor=args.envs_per_actor, rollout_steps=args.rollout_steps,
        broadcast_every=args.broadcast_every, log_every=args.log_every, address=args.address,
        max_restarts=args.max_restarts, cpus_per_actor=args.cpus_per_actor, run_dir=args.run_dir,
        checkpoint_every=args.checkpoint_every, resume=args.resume, overwrite=args.overwrite, tensorboard=args.tensorboard,
        stall_timeout_s=args.stall_timeout, actor_deadline_s=args.actor_deadline, timeout_s=args.timeout)
    # summary.json without its two lists (every actor, every evaluation episode): one line to read
    print(json.dumps({name: value for name, value in result.summary.items() if name not in ("actors", "eval_returns")}))
    return 0


def _cpu_scheduler_flag() -> None:
    """Before jax is imported: jax 0.10.2 on the CPU can hang after compiling a vmapped training run
    with its concurrency-optimised scheduler; ``train iqn`` vmaps whole
    epochs over worlds and agents, so it turns that scheduler off, as the tests and benchmarks do.
    Called by ``main`` before the parser is built (building it imports the configs, hence jax)."""
    import os

    flag = "--xla_cpu_enable_concurrency_optimized_scheduler=false"
    if "jax" not in sys.modules and flag.split("=")[0] not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + flag).strip()


def _eval_iqn(args: argparse.Namespace) -> int:
    from labcore.agents.iqn import run as iqn_run
    from labcore.agents.iqn.run_config import IQNRunConfig

    # The world and agent flags given override the checkpoint's config (flat field names).
    overrides = {field.name: getattr(args, field.name) for field in IQNRunConfig.flat_fields()
                 if field.name not in _IQN_TRAINING_ONLY and getattr(args, field.name) is not None}
    config, params = iqn_run.load_params(args.checkpoint, step=args.step, overrides=overrides)
    greedy = iqn_run.evaluate(config, params, epochs=args.epochs, seed=args.seed, epsilon=0.0)
    random_play = iqn_run.evaluate(config, params, epochs=args.epochs, seed=args.seed, epsilon=1.0)
    for epoch, gems in enumerate(greedy["gems"]):
        print(f"epoch {epoch}: {gems:g} gems (random play {random_play['gems'][epoch]:g})")
    print(json.dumps({"trained_mode": config.mode, "trained_epochs": config.epochs, "n_agents": config.world.n_agents,
                      "num_worlds": config.num_worlds, "epochs": args.epochs, "gems_per_epoch": greedy["gems"],
                      "mean_gems": greedy["mean_gems"], "random_mean_gems": random_play["mean_gems"],
                      "mean_reward": greedy["mean_reward"], "random_mean_reward": random_play["mean_reward"]}))
    return 0


def _train_on_loop(args: argparse.Namespace) -> int:
    """train ppo | pqn | dqn-scan | gflownet | iqn: through the agent contract's ``train`` (labcore.loop.train;
    the GFlowNet's host trainers and IQN's host modes refuse the flags that need checkpoints)."""
    import importlib

    package, config_class = {"ppo": ("ppo", "PPOConfig"), "pqn": ("pqn", "PQNConfig"), "dqn-scan": ("dqn", "DQNConfig"),
                             "gflownet": ("gflownet", "GFlowNetConfig"), "iqn": ("iqn", "IQNRunConfig")}[args.agent]
    agent = importlib.import_module(f"labcore.agents.{package}")  # the agent contract: agent.train
    config = _auto_tuned(args, _config_from(args, config_class))
    print(config)
    result = agent.train(config, args.run_dir, log_every=args.log_every, checkpoint_every=args.checkpoint_every,
                         resume=args.resume, overwrite=args.overwrite, progress=not args.no_progress,
                         tensorboard=args.tensorboard, evaluate=not args.no_eval, seeds=args.seeds)
    print(json.dumps(result.summary))
    return 0


def _eval_ppo(args: argparse.Namespace) -> int:
    from labcore.agents.ppo import core as ppo
    from labcore.agents.ppo import run as ppo_run

    config, runner = ppo_run.load_checkpoint(args.checkpoint, args.step)
    returns = ppo_run.play_returns(ppo.make_ppo(config), runner.params, args.episodes, args.seed)
    greedy = returns["greedy"]
    print(json.dumps({"env": config.env_id, "update_step": int(runner.update_step), "episodes": args.episodes,
                      "greedy_mean": float(greedy.mean()), "greedy_min": float(greedy.min()),
                      "greedy_max": float(greedy.max()), "sampled_mean": float(returns["sampled"].mean()),
                      "random_mean": float(returns["random"].mean())}))
    return 0


def _eval_pqn(args: argparse.Namespace) -> int:
    from labcore.agents.pqn import run as pqn_run

    config, runner = pqn_run.load_checkpoint(args.checkpoint, args.step)
    config = dataclasses.replace(config, eval_episodes=args.episodes, eval_epsilon=args.epsilon)
    summary = pqn_run.evaluate(config, runner.params, seed=args.seed)
    print(json.dumps({"env": config.env_id, "update_step": int(runner.update_step), **summary}))
    return 0


def _eval_dqn(args: argparse.Namespace) -> int:
    from labcore.agents.dqn import host_loop as dqn_loop

    config, state = dqn_loop.load_checkpoint(args.checkpoint, args.step)
    scores = dqn_loop.evaluate(config, state.params, episodes=args.episodes, epsilon=args.epsilon, seed=args.seed)
    print(json.dumps({"env": config.env_id, "episodes": len(scores), "mean": sum(scores) / len(scores),
                      "min": min(scores), "max": max(scores), "scores": scores}))
    return 0


def main(argv: list[str] | None = None) -> int:
    from labcore import compile_cache

    compile_cache.configure()  # the CLI opts into JAX's persistent compilation cache, before JAX starts
    words = sys.argv[1:] if argv is None else argv
    if words[:2] in (["train", "iqn"], ["eval", "iqn"]):
        _cpu_scheduler_flag()
    if words[:2] in (["train", "dqn"], ["eval", "dqn"]):
        from labcore import devices

        devices.synchronous_cpu_dispatch()  # a per-step host loop: no thread hand-off per jitted call
    # A launched worker joins its cluster first: JAX allows that only before its backends start, and
    # building the parser imports every config's module, any of which may start them (gymnax does).
    from labcore import distributed

    if distributed.launched() and words == ["cluster-check"]:
        distributed.cluster_check()  # joins, then checks
        return 0
    if distributed.launched() and words[:2] == ["train", "dqn"]:
        distributed.initialize()
    args = build_parser().parse_args(argv)
    if args.command in ("train", "eval"):
        commands = {("train", "dqn"): _train_dqn, ("eval", "dqn"): _eval_dqn, ("train", "ppo"): _train_on_loop,
                    ("eval", "ppo"): _eval_ppo, ("train", "pqn"): _train_on_loop, ("eval", "pqn"): _eval_pqn,
                    ("train", "gflownet"): _train_on_loop, ("train", "iqn"): _train_on_loop,
                    ("eval", "iqn"): _eval_iqn, ("train", "dqn-actor-learner"): _train_dqn_actor_learner,
                    ("train", "dqn-scan"): _train_on_loop}
        try:
            return commands[args.command, args.agent](args)
        except (ValueError, FileNotFoundError, FileExistsError, NotADirectoryError, ConnectionError) as error:
            print(f"error: {error}", file=sys.stderr)  # bad config, env, folder (in use) or address: one line
            return 2
        except RuntimeError as error:
            from labcore.checkpoint import DamagedCheckpoints  # loaded by then: the command read checkpoints

            if not isinstance(error, DamagedCheckpoints):
                raise
            print(f"error: {error}", file=sys.stderr)  # no intact checkpoint: one line naming each
            return 2
    if args.command == "launch":
        from labcore import distributed

        worker_command = [part for part in args.worker_command if part != "--"] or ["cluster-check"]
        result = distributed.launch(worker_command, args.num_processes, args.devices_per_process,
                                    timeout_s=args.timeout, join_timeout_s=args.join_timeout)
        if result.returncode:
            print(f"error: {result.message}", file=sys.stderr)
        return result.returncode
    if args.command == "cluster-check":
        from labcore import distributed

        distributed.cluster_check()
        return 0
    if args.command == "doctor":
        from labcore.tools import doctor

        doctor.run(matmul_n=args.matmul_n, vector_size=args.vector_size, as_json=args.json)
    elif args.command == "exercises":
        from labcore.course import exercises

        for name in exercises.names():
            print(f"{name:<24} {exercises.get(name).description.splitlines()[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
