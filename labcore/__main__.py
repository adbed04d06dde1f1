"""The ``python -m labcore`` command line (also installed as ``labcore``).

    python -m labcore doctor [--json]      versions, devices and a measured micro-benchmark
    python -m labcore exercises            the notebook exercises and what each asks
    python -m labcore train ALGORITHM [--preset NAME | --config FILE] [flags]
    python -m labcore eval ALGORITHM --checkpoint RUN_DIR [--step N] [--seed S] [flags]
    python -m labcore launch --num-processes 2 --devices-per-process 2 -- train dqn-data-parallel [flags]

ALGORITHM is a name of ``labcore.agents.registry``: ppo, pqn, dqn-scan, dqn-host, dqn-data-parallel,
dqn-actor-learner, gflownet, iqn. For example:

    python -m labcore train ppo --preset cartpole --run-dir runs/ppo-cartpole
    python -m labcore train ppo --config runs/ppo-cartpole/config.json --total-steps 1000000 --run-dir runs/longer
    python -m labcore train dqn-host --preset atari_short --env ALE/Breakout-v5 --run-dir runs/breakout
    python -m labcore train pqn --preset minatar --env Breakout-MinAtar --run-dir runs/pqn --checkpoint-every 100
    python -m labcore train pqn --preset minatar --env Breakout-MinAtar --run-dir runs/pqn --checkpoint-every 100 --resume
    python -m labcore eval pqn --checkpoint runs/pqn --episodes 100
    python -m labcore train dqn-actor-learner --env CartPole-v1 --num-actors 4 [--address auto]

Every ``train`` takes every field of its config as a flag (``--help`` lists them with their
defaults), the same loop flags (--run-dir, --log-every, --checkpoint-every, --resume, --overwrite,
--no-progress, --seeds, --no-eval, --no-tensorboard; counts in updates; an algorithm that cannot
honour one refuses it by name) and its own settings. A run folder holds config.json, metrics
(JSONL, CSV, TensorBoard), metrics.png, summary.json and checkpoints/; ``tensorboard --logdir runs``
shows every run folder below runs/.

Exit status: 0 done; 2 the command is wrong (an unknown flag, a value the config refuses, an option
the algorithm cannot honour, a folder that holds another algorithm's run); 1 running it failed (a
folder in use or holding an earlier run, no intact checkpoint, a cluster that does not answer).
``--help`` and ``--version`` answer without starting JAX.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

from labcore.agents import registry
from labcore.training_run import RunOptions  # imports neither JAX nor orbax


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def invoked_as(argv0: str) -> str:
    """The command a user typed, for help and errors: ``python -m labcore`` or the ``labcore`` script."""
    name = os.path.basename(argv0)
    return "python -m labcore" if name in ("__main__.py", "-m", "") else name


def build_parser() -> argparse.ArgumentParser:
    from labcore import __version__

    parser = argparse.ArgumentParser(prog=invoked_as(sys.argv[0]), description=__doc__.split("\n\n")[0],
                                     epilog="ALGORITHM: " + ", ".join(registry.NAMES))
    parser.add_argument("--version", action="version", version=f"labcore {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    doctor = commands.add_parser("doctor", help="print versions, devices and a measured micro-benchmark")
    doctor.add_argument("--matmul-n", type=_positive_int, default=1024, help="square matmul size (default 1024)")
    doctor.add_argument(
        "--vector-size", type=_positive_int, default=1_000_000, help="length of the jit speed-up vector"
    )
    doctor.add_argument("--json", action="store_true", help="print the results as JSON")
    commands.add_parser("exercises", help="list the notebook exercises")

    train = commands.add_parser("train", help="train an algorithm into a run folder")
    train_commands = train.add_subparsers(dest="agent", required=True, metavar="ALGORITHM")
    evaluate = commands.add_parser("eval", help="play a checkpoint of a run folder, no learning")
    eval_commands = evaluate.add_subparsers(dest="agent", required=True, metavar="ALGORITHM")
    for algorithm in registry.ALGORITHMS:
        _add_train_command(train_commands, algorithm)
        _add_eval_command(eval_commands, algorithm)

    launch = commands.add_parser("launch", help="run a labcore command as N local processes joined by jax.distributed")
    launch.add_argument("--num-processes", type=_positive_int, default=2)
    launch.add_argument("--devices-per-process", type=_positive_int, default=2, help="CPU devices in each process")
    launch.add_argument("--timeout", type=float, default=None,
                        help="seconds before every worker is stopped (default: no limit; a failed worker stops all)")
    launch.add_argument("--join-timeout", type=float, default=60.0, help="seconds for all workers to join the cluster")
    launch.add_argument("worker_command", nargs=argparse.REMAINDER,
                        help="after --: the labcore command each worker runs, e.g. -- train dqn-data-parallel --env "
                             "CartPole-v1 (default: cluster-check)")
    commands.add_parser("cluster-check", help="(in a launched worker) join, psum across processes, compare values")
    return parser


def _add_train_command(commands, algorithm: registry.Algorithm) -> None:
    parser = commands.add_parser(algorithm.name, help=algorithm.help, description=algorithm.help)
    config_class = algorithm.config_class
    start = parser.add_mutually_exclusive_group()
    start.add_argument("--preset", choices=("default", *algorithm.starting_points()), default="default",
                       help=f"starting configuration (classmethods of {config_class.__name__}) that the other "
                            "flags override")
    start.add_argument("--config", metavar="FILE", default=None,
                       help="start from a saved config.json (or the run folder holding it); the other flags override it")
    _add_config_flags(parser, config_class)
    if hasattr(config_class, "DEVICE_SIZES"):
        parser.add_argument("--auto-tune", action="store_true",
                            help="shrink the config's sizes to fit this device (labcore.devices.auto_tune; only shrinks)")
    loop = parser.add_argument_group("run (every count in updates)")
    loop.add_argument("--run-dir", default=None, help="results folder: config, metrics, plots, checkpoints, summary")
    _add_run_option_flags(loop)
    if algorithm.settings:
        own = parser.add_argument_group(f"{algorithm.name}'s own settings")
        for setting in algorithm.settings:
            _add_setting_flag(own, setting)


def _add_eval_command(commands, algorithm: registry.Algorithm) -> None:
    parser = commands.add_parser(algorithm.name, help=f"play a {algorithm.name} checkpoint")
    parser.add_argument("--checkpoint", required=True, help="a run folder or its checkpoints/ folder")
    parser.add_argument("--step", type=int, default=None, help="checkpoint step as checkpoints/ names it: updates, agent steps for dqn-host (default: the newest intact)")
    parser.add_argument("--seed", type=int, default=10_000, help="evaluation seed (default 10000, apart from training's)")
    for flag, field in algorithm.eval_fields.items():
        parser.add_argument(f"--{flag}", dest=field, type=_flag_type(_field(algorithm.config_class, field).type)[0],
                            default=None, help=f"sets the checkpoint config's {field}")
    for setting in algorithm.eval_settings:
        _add_setting_flag(parser, setting)
    if algorithm.eval_overrides:
        _add_config_flags(parser, algorithm.config_class, exclude=algorithm.training_only,
                          title="fields that override the checkpoint's config")


def _add_run_option_flags(group) -> None:
    """One flag per field of ``labcore.training_run.RunOptions`` that has one: a count (a positive int),
    a switch on (``--resume``), a ``--no-...`` switch off, or both (``--tensorboard`` / ``--no-tensorboard``)."""
    for option in dataclasses.fields(RunOptions):
        flag, help = option.metadata["flag"], option.metadata["help"]
        if flag is None:
            continue
        if option.type == "bool" and option.default and not flag.startswith("--no-"):
            # on by default, with a switch each way (TensorBoard: a run folder is for looking at a run)
            group.add_argument(flag, dest=option.name, action=argparse.BooleanOptionalAction, default=True, help=help)
        elif option.type == "bool":
            group.add_argument(flag, dest=option.name, action="store_false" if option.default else "store_true",
                               help=help)
        else:
            group.add_argument(flag, dest=option.name, type=_positive_int, default=option.default, help=help)


def _add_setting_flag(group, setting: registry.Setting) -> None:
    flag = "--" + setting.name.removesuffix("_s").replace("_", "-")  # stall_timeout_s: --stall-timeout (seconds)
    if setting.type is bool:
        group.add_argument(flag, dest=setting.name, action=argparse.BooleanOptionalAction, default=setting.default,
                           help=f"{setting.help} (default: {'on' if setting.default else 'off'})")
        return
    kind = _positive_int if setting.type is int and setting.name != "max_restarts" else setting.type
    said = "default" in setting.help  # "default: no limit" says it better than "default None"
    group.add_argument(flag, dest=setting.name, type=kind, default=setting.default,
                       help=setting.help if said else f"{setting.help} (default {setting.default})")


def _fields(config_class: type) -> tuple[dataclasses.Field, ...]:
    # A composed config (the run's, its world's and its agents' fields) has one flag per flat field.
    return tuple(config_class.flat_fields() if hasattr(config_class, "flat_fields") else dataclasses.fields(config_class))


def _field(config_class: type, name: str) -> dataclasses.Field:
    return next(field for field in _fields(config_class) if field.name == name)


def _flag_type(annotation: str | type):
    """(argparse type, nargs) for a config field annotation: a string (a module with ``from __future__ import
    annotations``, as labcore's configs are) or the type itself (a config module without it)."""
    if not isinstance(annotation, str):
        annotation = annotation.__name__ if isinstance(annotation, type) else str(annotation)
    if annotation.startswith("tuple"):
        return int, "+"
    if annotation == "float | None":
        return (lambda text: None if text.lower() == "none" else float(text)), None
    return {"int": int, "float": float, "str": str}[annotation], None


def _add_config_flags(parser: argparse.ArgumentParser, config_class: type, exclude: tuple[str, ...] = (),
                      title: str = "") -> None:
    group = parser.add_argument_group(title or f"{config_class.__name__} fields (unset flags keep the starting value)")
    for field in _fields(config_class):
        if field.name in exclude:
            continue
        flag = "--" + ("env" if field.name == "env_id" else field.name.replace("_", "-"))
        if field.type == "bool":
            group.add_argument(flag, dest=field.name, action=argparse.BooleanOptionalAction, default=None,
                               help=f"(default {field.default})")
            continue
        kind, nargs = _flag_type(field.type)
        group.add_argument(flag, dest=field.name, type=kind, nargs=nargs, default=None, help=f"(default {field.default})")


def _overrides(args: argparse.Namespace, config_class: type) -> dict:
    """The config fields given as flags (unset flags are None)."""
    return {field.name: tuple(value) if isinstance(value, list) else value
            for field in _fields(config_class) if (value := getattr(args, field.name, None)) is not None}


def _saved_config(path: str, config_class: type):
    """The config of a saved config.json (or of the run folder holding one), as ``config_class``."""
    from pathlib import Path

    file = Path(path) / "config.json" if Path(path).is_dir() else Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"--config: no config file at {file}")
    fields = json.loads(file.read_text())
    known = {field.name for field in _fields(config_class)} | {field.name for field in dataclasses.fields(config_class)}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise ValueError(f"--config: {file} is not a {config_class.__name__} (fields it does not have: "
                         f"{', '.join(unknown[:6])}{', ...' if len(unknown) > 6 else ''})")
    from labcore import runs

    return runs.config_from_dict(config_class, fields)


def _config_from(args: argparse.Namespace, algorithm: registry.Algorithm):
    """The config a ``train`` command asks for: the preset or saved config, with the flags given."""
    config_class = algorithm.config_class
    overrides = _overrides(args, config_class)
    if getattr(args, "config", None):
        saved = _saved_config(args.config, config_class)
        config = dataclasses.replace(saved, **overrides) if overrides else saved
    elif getattr(args, "preset", "default") == "default":
        config = config_class(**overrides)
    else:
        config = getattr(config_class, args.preset)(**overrides)
    if getattr(args, "auto_tune", False):
        from labcore import devices

        config, changes = devices.auto_tune(config)
        for change in changes:
            print(f"auto-tune: {change}")
    return config


def _train(args: argparse.Namespace, algorithm: registry.Algorithm) -> int:
    from labcore import distributed

    config = _config_from(args, algorithm)
    launched = distributed.launched()  # one of `launch`'s workers: output lines carry the worker's rank
    process = _process_index() if launched else 0
    if process == 0:
        print(config)
    options = {option.name: getattr(args, option.name) for option in dataclasses.fields(RunOptions)
               if option.metadata["flag"] is not None}
    options["progress"] = options["progress"] and not launched
    options.update({setting.name: getattr(args, setting.name) for setting in algorithm.settings})
    if launched:  # rows as lines, not a bar, from the first process (the others would repeat them)
        options["on_metrics"] = _print_row if process == 0 else None
    result = algorithm.train(config, args.run_dir, **options)
    # summary.json without its long lists (e.g. every evaluation episode's return): one line to read;
    # every launched process prints its own (they can be compared: the parameters' fingerprint)
    summary = {name: value for name, value in result.summary.items() if not (isinstance(value, list) and len(value) > 10)}
    print(json.dumps({"process": process, **summary} if launched else summary))
    return 0


def _process_index() -> int:
    import jax

    return jax.process_index()


def _print_row(row: dict) -> None:
    print("  ".join(f"{name} {float(row[name]):.4g}" for name in ("update", "timesteps", "episode_return", "loss")
                    if name in row))


def _evaluate(args: argparse.Namespace, algorithm: registry.Algorithm) -> int:
    from labcore import checkpoint, runs

    config, state = algorithm.load_checkpoint(args.checkpoint, args.step)
    params = algorithm.params(state)
    changed = {field: getattr(args, field) for field in algorithm.eval_fields.values() if getattr(args, field) is not None}
    if algorithm.eval_overrides:
        changed.update({name: value for name, value in _overrides(args, algorithm.config_class).items()
                        if name not in algorithm.training_only})
    if changed:
        config = dataclasses.replace(config, **changed)
    report = algorithm.evaluate(config, params, args.seed,
                                **{setting.name: getattr(args, setting.name) for setting in algorithm.eval_settings})
    step = checkpoint.restore_metadata(runs.checkpoint_dir(args.checkpoint), args.step).get("step")
    print(json.dumps({"algorithm": algorithm.name, "checkpoint": str(args.checkpoint), "step": step,
                      "env": getattr(config, "env_id", None), "seed": args.seed, **report}))
    return 0


def _before_jax(words: list[str]) -> None:
    """What must be set before JAX starts, for the algorithm a ``train`` or ``eval`` command names."""
    if len(words) < 2 or words[0] not in ("train", "eval") or words[1] not in registry.NAMES:
        return
    if {"-h", "--help"} & set(words):  # help only: nothing will run, JAX need not start
        return
    algorithm = registry.get(words[1])
    if algorithm.synchronous_dispatch:
        import warnings

        from labcore import devices

        with warnings.catch_warnings():  # main() called in a process whose JAX has started (a test, a
            warnings.simplefilter("ignore")  # notebook): the setting cannot apply, the run is only slower
            devices.synchronous_cpu_dispatch()  # a per-step host loop: no thread hand-off per jitted call
    for flag in algorithm.xla_flags:
        if "jax" not in sys.modules and flag.split("=")[0] not in os.environ.get("XLA_FLAGS", ""):
            os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + flag).strip()


def main(argv: list[str] | None = None) -> int:
    from labcore import compile_cache, distributed

    words = sys.argv[1:] if argv is None else list(argv)
    compile_cache.configure()  # the CLI opts into JAX's persistent compilation cache, before JAX starts
    _before_jax(words)
    if distributed.launched():
        # A launched worker joins its cluster first: JAX allows that only before its backends start.
        if words in (["cluster-check"], []):
            distributed.cluster_check()  # joins, then checks
            return 0
        joining = [algorithm.name for algorithm in registry.ALGORITHMS if algorithm.joins_cluster]
        if words[:1] != ["train"] or len(words) < 2 or words[1] not in joining:
            print(f"error: a launched worker runs `cluster-check` or `train` of {', '.join(joining)}; "
                  f"{' '.join(words[:2])!r} runs in one process", file=sys.stderr)
            return 2
        distributed.initialize()
    args = build_parser().parse_args(argv)
    if args.command in ("train", "eval"):
        algorithm = registry.get(args.agent)
        from labcore.checkpoint import DamagedCheckpoints

        try:
            return (_train if args.command == "train" else _evaluate)(args, algorithm)
        except ValueError as error:  # the command asked for something invalid: a config value, an option, a folder
            print(f"error: {error}", file=sys.stderr)
            return 2
        except (OSError, DamagedCheckpoints) as error:  # running it failed: folder in use or taken, no checkpoint,
            print(f"error: {error}", file=sys.stderr)   # damaged ones, a cluster that does not answer
            return 1
    if args.command == "launch":
        worker_command = [part for part in args.worker_command if part != "--"] or ["cluster-check"]
        result = distributed.launch(worker_command, args.num_processes, args.devices_per_process,
                                    timeout_s=args.timeout, join_timeout_s=args.join_timeout)
        if result.returncode:
            print(f"error: {result.message}", file=sys.stderr)
        return result.returncode
    if args.command == "cluster-check":
        distributed.cluster_check()
    elif args.command == "doctor":
        from labcore.tools import doctor

        doctor.run(matmul_n=args.matmul_n, vector_size=args.vector_size, as_json=args.json)
    elif args.command == "exercises":
        from labcore.course import exercises

        for name in exercises.names():
            print(f"{name:<24} {exercises.get(name).description.splitlines()[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
