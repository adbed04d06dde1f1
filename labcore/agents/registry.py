"""Every algorithm labcore trains, one record each; the command line, the tests and the docs read them here.

    from labcore.agents import registry

    ppo = registry.get("ppo")
    result = ppo.train(ppo.config_class().cartpole(total_steps=20_480), "runs/ppo", checkpoint_every=10)
    config, state = ppo.load_checkpoint("runs/ppo")
    print(ppo.evaluate(config, ppo.params(config, state), seed=0))  # {"greedy_return_mean": ..., ...}

Each ``Algorithm`` gives the same six things, whatever drives the algorithm underneath:

* ``config_class()``: its validated config dataclass (``starting_points()``: its classmethods giving
  other starting points: ``smallest()``, which every config has, the smallest run that trains and
  evaluates, then ``presets``, e.g. ``PPOConfig.cartpole``);
* ``train(config, run_dir=None, **options) -> labcore.training_run.RunResult``, with the options of
  ``labcore.training_run.RunOptions`` (log_every, checkpoint_every, resume, overwrite, progress,
  tensorboard, evaluate, seeds, on_metrics; every count in updates) and its own ``settings``; an
  option the algorithm cannot honour is refused by name (``refuses``), never ignored;
* ``load_checkpoint(path, step=None) -> (config, state)`` of one of its run folders (another
  algorithm's folder is refused in one line naming what it holds: ``labcore.checkpoint.expect``);
* ``params(config, state)``: the policy's parameters in a state of ``train`` or ``load_checkpoint``;
* ``evaluate(config, params, seed=0) -> dict`` of numbers: the trained policy played, no learning;
* ``run_folder``: what its run folder holds.

The names are the command line's (``python -m labcore train NAME``, ``eval NAME``) and the
``algorithm`` its checkpoints record. DQN has four drivers, so four names: ``dqn-scan`` (all of
training one jitted program on gymnax envs; also ``labcore.agents.dqn.train``), ``dqn-host``
(gymnasium envs, Atari included, stepped in Python), ``dqn-data-parallel`` (one update over every
device of one or several processes) and ``dqn-actor-learner`` (Ray actors feeding one learner).

**Adding an algorithm** is its folder, ``labcore/agents/<name>/`` (a config module importable
without JAX whose config class has a ``smallest()`` classmethod, a ``core``, a driver module with
``train``, ``load_checkpoint`` and ``evaluate``), and one ``Algorithm(...)`` entry in ``ALGORITHMS``
below: the command line, the registry's tests (tests/test_registry.py trains, resumes, loads and
evaluates every entry from its smallest config) and the architecture guide's table follow from it.
tests/test_registry.py adds a bandit algorithm written outside labcore that way and checks it.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import typing
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from labcore import training_run
from labcore.agents.dqn.config import ActorLearnerSettings, DataParallelSettings, HostLoopSettings

# Every config class's smallest run that trains and evaluates (a classmethod): what the tests train.
SMALLEST = "smallest"

# What a run folder of labcore.loop.train holds (labcore.runs.RunDir), the files every driver writes.
RUN_FOLDER = ("config.json", "metrics.jsonl", "metrics.csv", "metrics.png", "summary.json", "checkpoints/",
              "events.out.tfevents.*")


class Setting(NamedTuple):
    """A keyword of an algorithm's ``train`` beyond the loop's options (a flag on the command line)."""

    name: str  # the keyword, e.g. "num_actors" (flag --num-actors)
    type: Callable[[str], Any]  # int, float, str; bool: a --NAME / --no-NAME switch
    default: Any
    help: str


@dataclasses.dataclass(frozen=True)
class Algorithm:
    """One algorithm as labcore runs it: see the module docstring."""

    name: str
    help: str  # one line: what it is and where it runs
    package: str  # "labcore.agents.ppo": its folder; ``Config`` there is the config class
    driver: str  # the module holding train / load_checkpoint / evaluate ("labcore.agents.ppo.run")
    params: Callable[[Any, Any], Any]  # (config, state) -> the policy's parameters
    presets: tuple[str, ...] = ()
    settings: tuple[Setting, ...] = ()
    refuses: Mapping[str, str] = dataclasses.field(default_factory=dict)  # option -> why it cannot be given
    eval_fields: Mapping[str, str] = dataclasses.field(default_factory=dict)  # eval flag -> config field it sets
    eval_settings: tuple[Setting, ...] = ()  # keywords of evaluate beyond (config, params, seed)
    # eval_overrides: the config flags, all but ``training_only``, override the checkpoint's config
    # at evaluation (IQN: another world; a network that does not fit the parameters is refused)
    eval_overrides: bool = False
    training_only: tuple[str, ...] = ()
    run_folder: tuple[str, ...] = RUN_FOLDER
    # Set in a command-line process before JAX starts (they cannot change after): run CPU calls on
    # the calling thread (a host loop acting one step at a time), and extra XLA flags.
    synchronous_dispatch: bool = False
    xla_flags: tuple[str, ...] = ()
    # True: under `python -m labcore launch` each worker joins the jax.distributed cluster and trains
    # its share of one run (every other algorithm runs in one process and is refused there)
    joins_cluster: bool = False
    # the module-level names of ``driver`` (an adapter in this module where the driver's own
    # function has another shape: see the adapters at the end)
    train_function: str = "train"
    evaluate_function: str = "evaluate"

    def config_class(self) -> type:
        return importlib.import_module(self.package).Config

    def starting_points(self) -> tuple[str, ...]:
        """The config's classmethods a run can start from besides its defaults (``--preset``): ``smallest``,
        which every config has, then ``presets``."""
        return (SMALLEST, *self.presets)

    def _function(self, name: str) -> Callable[..., Any]:
        if name.startswith("_"):  # an adapter of this module
            return globals()[name]
        return getattr(importlib.import_module(self.driver), name)

    def train(self, config: Any, run_dir: str | os.PathLike | None = None, **options: Any):
        """Train ``config`` into ``run_dir`` (None: in memory) -> ``labcore.training_run.RunResult``."""
        unknown = sorted(set(options) - set(training_run.RUN_OPTIONS) - {setting.name for setting in self.settings})
        if unknown:
            raise TypeError(f"{self.name}: train() got unexpected keyword arguments {unknown}")
        for option, why in self.refuses.items():
            if options.get(option) not in (None, False):
                raise ValueError(f"{option}: {self.name} {why}")
        options = {name: value for name, value in options.items() if name not in self.refuses}
        if options.get("log_every") is None:  # the drivers' one default: about 100 rows a run
            options.pop("log_every", None)
        return self._function(self.train_function)(config, run_dir, **options)

    def load_checkpoint(self, path: str | os.PathLike, step: int | None = None) -> tuple[Any, Any]:
        """(config, state) of a run folder of this algorithm, or its checkpoints/ folder (default: newest step)."""
        return self._function("load_checkpoint")(path, step)

    def evaluate(self, config: Any, params: Any, seed: int = 0, **settings: Any) -> dict[str, Any]:
        """The trained policy played with ``seed``, no learning: a dict of numbers."""
        return self._function(self.evaluate_function)(config, params, seed, **settings)


SETTING_TYPES = (int, float, str, bool)  # what a flag parses


def settings_of(settings_class: type) -> tuple[Setting, ...]:
    """The ``Setting`` of each field of a driver's settings dataclass (its type, its default, and its help
    in the field's metadata), in field order: the defaults and help are written once, there. A field may
    be None (``int | None``); its type is what a given flag parses to."""
    hints = typing.get_type_hints(settings_class)
    found = []
    for field in dataclasses.fields(settings_class):
        kinds = [kind for kind in typing.get_args(hints[field.name]) or (hints[field.name],) if kind is not type(None)]
        if len(kinds) != 1 or kinds[0] not in SETTING_TYPES or "help" not in field.metadata:
            raise TypeError(f"{settings_class.__name__}.{field.name}: a setting is an int, float, str or bool (or None) "
                            f"with its help in the field's metadata, not {hints[field.name]}")
        found.append(Setting(field.name, kinds[0], field.default, field.metadata["help"]))
    return tuple(found)


def _attribute(path: str) -> Callable[[Any, Any], Any]:
    """params(config, state) reading ``state.<path>`` (dots for nested attributes)."""

    def params(config: Any, state: Any) -> Any:
        for name in path.split("."):
            state = getattr(state, name)
        return state

    return params


def _gflownet_params(config: Any, state: Any) -> Any:
    return state.params if hasattr(state, "params") else state  # a host trainer's result: the parameters


def _data_parallel_params(config: Any, state: Any) -> Any:
    """The learner's parameters: of replica 0's carry (``load_checkpoint``), or of the global carry
    ``train`` returns (leaves [devices, replicas_per_device, ...]; every replica holds the same)."""
    from labcore.agents.dqn import multi_process

    params = state.train_state.params
    return params if state.step.ndim == 0 else multi_process.first_replica(params)


def _learner_params(config: Any, state: Any) -> Any:
    """The learner's parameters: of its ``TrainState`` (``train``'s result) or of the checkpoint's
    {"train_state", "replay", "key"} (``load_checkpoint``)."""
    return (state["train_state"] if isinstance(state, dict) else state).params


def _iqn_params(config: Any, state: Any) -> Any:
    from labcore.agents.iqn import run

    return run.agent_params(config, state)


ONE_RUN = "runs one seed per call; run it once per seed"
HOST_ROWS = "logs its rows itself; read them from the result or the run folder"

ALGORITHMS: tuple[Algorithm, ...] = (
    Algorithm(
        "ppo", "action-masked PPO on Vault-v0 or a gymnax env, all of training one jitted program",
        "labcore.agents.ppo", "labcore.agents.ppo.run", _attribute("params"), presets=("cartpole",),
        eval_fields={"episodes": "eval_episodes"}),
    Algorithm(
        "pqn", "PQN (no replay, no target network) on a gymnax env or on Atari through ALE's vector env, all of "
               "training one jitted program",
        "labcore.agents.pqn", "labcore.agents.pqn.run", _attribute("params"),
        presets=("cartpole", "minatar", "atari", "atari_dopamine"),
        eval_fields={"episodes": "eval_episodes", "epsilon": "eval_epsilon"}),
    Algorithm(
        "dqn-scan", "DQN on a gymnax env, all of training one jitted program (labcore.agents.dqn.train)",
        "labcore.agents.dqn", "labcore.agents.dqn.scan", _attribute("train_state.params"), presets=("minatar",),
        eval_fields={"episodes": "eval_episodes", "epsilon": "eval_epsilon"}),
    Algorithm(
        "dqn-host", "DQN on gymnasium envs stepped in Python: classic control, or Atari through ale-py",
        "labcore.agents.dqn", "labcore.agents.dqn.host_loop", _attribute("params"),
        presets=("nature_atari", "atari_short"),
        settings=settings_of(HostLoopSettings),
        refuses={"seeds": ONE_RUN, "on_metrics": HOST_ROWS}, eval_fields={"episodes": "eval_episodes", "epsilon": "eval_epsilon"},
        train_function="_train_dqn_host", evaluate_function="summarize_evaluation", synchronous_dispatch=True),
    Algorithm(
        "dqn-data-parallel", "DQN over every device of this process, or of every process `launch` starts "
                             "(gradients averaged, parameters identical everywhere)",
        "labcore.agents.dqn", "labcore.agents.dqn.multi_process", _data_parallel_params,
        presets=("minatar",),
        settings=settings_of(DataParallelSettings),
        refuses={"seeds": "runs one seed: its replicas already fill the devices"},
        eval_fields={"episodes": "eval_episodes", "epsilon": "eval_epsilon"}, evaluate_function="_evaluate_dqn_scan",
        joins_cluster=True),
    Algorithm(
        "dqn-actor-learner", "DQN with Ray actors feeding one learner: this machine, or a Ray cluster (--address)",
        "labcore.agents.dqn", "labcore.agents.dqn.actor_learner", _learner_params,
        settings=settings_of(ActorLearnerSettings),
        refuses={"seeds": ONE_RUN, "on_metrics": HOST_ROWS}, eval_fields={"episodes": "eval_episodes", "epsilon": "eval_epsilon"},
        train_function="_train_dqn_actor_learner", evaluate_function="_evaluate_dqn_scan"),
    Algorithm(
        "gflownet", "a GFlowNet on HyperGrid: all PyTorch, PyTorch sampling + JAX gradients, or all JAX "
                    "(--trainer jax: checkpoints, resume, seeds)",
        "labcore.agents.gflownet", "labcore.agents.gflownet.run", _gflownet_params,
        eval_fields={"samples": "l1_samples"}),
    Algorithm(
        "iqn", "multi-agent IQN on treasurehunt in one of four run modes, pytorch .. jax_fused "
               "(--mode jax_fused: checkpoints, resume, seeds)",
        "labcore.agents.iqn", "labcore.agents.iqn.run", _iqn_params,
        eval_settings=(Setting("epochs", int, 10, "epochs of play"),), eval_overrides=True,
        training_only=("mode", "epochs", "seed", "num_worlds", "epochs_per_call"),
        # as lesson 06 runs it: XLA's concurrency-optimised CPU scheduler off
        # (set when vmapped PPO runs hung; docs/results/ppo.md, "Many agents at once on a CPU")
        xla_flags=("--xla_cpu_enable_concurrency_optimized_scheduler=false",)),
)

NAMES = tuple(algorithm.name for algorithm in ALGORITHMS)


def get(name: str) -> Algorithm:
    """The algorithm called ``name``; ValueError listing the names otherwise."""
    for algorithm in ALGORITHMS:
        if algorithm.name == name:
            return algorithm
    hint = " (DQN: name its driver)" if name == "dqn" else ""
    raise ValueError(f"algorithm: no algorithm {name!r}{hint}; labcore has {', '.join(NAMES)}")


# ----------------------------------------------------------------------------------------------
# Adapters: the drivers whose own functions have another shape than the contract's


def _train_dqn_host(config: Any, run_dir: str | os.PathLike | None = None, *, evaluate: bool = True, **options: Any):
    from labcore.agents.dqn import host_loop

    return host_loop.train(config, run_dir=run_dir, eval_episodes=config.eval_episodes if evaluate else 0, **options)


def _train_dqn_actor_learner(config: Any, run_dir: str | os.PathLike | None = None, **options: Any):
    from labcore.agents.dqn import actor_learner

    options.pop("progress", None)  # it shows rows, never a bar
    return actor_learner.run(config, run_dir=run_dir, **options)


def _evaluate_dqn_scan(config: Any, params: Any, seed: int = 0) -> dict[str, Any]:
    """The jitted DQN's evaluation (gymnax envs), for the drivers that train the same network on them."""
    from labcore.agents.dqn import scan

    return scan.evaluate(config, params, seed)
