"""What an algorithm is to labcore: one ``Algorithm`` record, written in its own folder; ``labcore.agents.registry``
lists them.

    ALGORITHM = Algorithm(NAME, "action-masked PPO ...", PPOConfig, _driver, presets=("cartpole",))

A record lives in its folder's ``algorithm`` module, which imports no JAX, so that the command line builds every
algorithm's flags and help in a fraction of a second; ``driver`` imports the module that trains (JAX and all) only
when it is called. The name (``NAME``) is written once, in the folder's config module, which the driver reads to
record it in its checkpoints (``labcore.checkpoint``'s schema). The driver implements the contract itself, in
these shapes:

* ``train(config, run_dir=None, **options) -> labcore.training_run.RunResult``: the options of
  ``labcore.training_run.RunOptions`` (log_every, checkpoint_every, resume, overwrite, progress,
  tensorboard, evaluate, seeds, on_metrics; every count in updates), less those the record ``refuses``,
  plus its ``settings``; the result's ``state`` is one ``params`` reads, as ``load_checkpoint``'s is;
* ``load_checkpoint(path, step=None) -> (config, state)`` of one of its run folders (another algorithm's
  folder is refused in one line naming what it holds: ``labcore.checkpoint.expect``);
* ``params(state)``: the policy's parameters in a state of ``train`` or ``load_checkpoint``;
* ``evaluate(config, params, seed=0, **eval_settings) -> dict`` of numbers: the trained policy played,
  no learning.

The record's methods of the same names check the options and call the driver's functions.
"""

from __future__ import annotations

import dataclasses
import os
import typing
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any, NamedTuple

from labcore import training_run

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


@dataclasses.dataclass(frozen=True)
class Algorithm:
    """One algorithm as labcore runs it: see the module docstring."""

    name: str  # the command line's (train NAME, eval NAME) and the one its checkpoints record
    help: str  # one line: what it is and where it runs
    config_class: type  # the validated config dataclass (its module imports no JAX)
    driver: Callable[[], ModuleType]  # imports and returns the module that implements the contract
    presets: tuple[str, ...] = ()  # the config's classmethods, besides smallest(), a run can start from
    settings: tuple[Setting, ...] = ()
    refuses: Mapping[str, str] = dataclasses.field(default_factory=dict)  # option -> why it cannot be given
    eval_fields: Mapping[str, str] = dataclasses.field(default_factory=dict)  # eval flag -> config field it sets
    eval_settings: tuple[Setting, ...] = ()  # keywords of evaluate beyond (config, params, seed)
    # eval_overrides: the config flags, all but ``training_only``, override the checkpoint's config
    # at evaluation (IQN: another world; a network that does not fit the parameters is refused)
    eval_overrides: bool = False
    training_only: tuple[str, ...] = ()
    run_folder: tuple[str, ...] = RUN_FOLDER
    # How the config's smallest() run is trained (what the tests and a first try of the lifecycle pass to ``train``):
    # checkpoint_every giving it two checkpoints or more, and the settings it needs beyond their defaults
    smallest_run: Mapping[str, Any] = dataclasses.field(default_factory=lambda: {"checkpoint_every": 2})
    # False: two runs of one config and seed differ (an asynchronous run: which actor's data comes first is the
    # operating system's choice), so neither a resume nor an evaluation repeats an uninterrupted run's numbers
    repeatable: bool = True
    # Set in a command-line process before JAX starts (they cannot change after): run CPU calls on
    # the calling thread (a host loop acting one step at a time), and extra XLA flags.
    synchronous_dispatch: bool = False
    xla_flags: tuple[str, ...] = ()
    # True: under `python -m labcore launch` each worker joins the jax.distributed cluster and trains
    # its share of one run (every other algorithm runs in one process and is refused there)
    joins_cluster: bool = False

    def starting_points(self) -> tuple[str, ...]:
        """The config's classmethods a run can start from besides its defaults (``--preset``): ``smallest``,
        which every config has, then ``presets``."""
        return (SMALLEST, *self.presets)

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
        return self.driver().train(config, run_dir, **options)

    def load_checkpoint(self, path: str | os.PathLike, step: int | None = None) -> tuple[Any, Any]:
        """(config, state) of a run folder of this algorithm, or its checkpoints/ folder (default: newest step)."""
        return self.driver().load_checkpoint(path, step)

    def params(self, state: Any) -> Any:
        """The policy's parameters in a state of ``train`` or ``load_checkpoint``."""
        return self.driver().params(state)

    def evaluate(self, config: Any, params: Any, seed: int = 0, **settings: Any) -> dict[str, Any]:
        """The trained policy played with ``seed``, no learning: a dict of numbers."""
        return self.driver().evaluate(config, params, seed, **settings)
