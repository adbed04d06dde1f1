"""labcore.agents.registry: every algorithm trains, resumes, loads and evaluates the same way, in
Python and on the command line, and refuses another algorithm's run folder in one line."""

from __future__ import annotations

import dataclasses
import json
import numbers
import shutil
from pathlib import Path

import jax
import numpy as np
import pytest

from labcore import __main__ as cli
from labcore import is_quick, runs
from labcore.agents import registry


def tiny_config(name: str):
    """The smallest config of ``name`` that trains and evaluates (its config's ``smallest`` preset): seconds here,
    four updates or more (two checkpoints or more at its record's ``smallest_run``)."""
    return getattr(registry.get(name).config_class, registry.SMALLEST)()


def smallest_run(name: str) -> tuple[int, dict]:
    """(checkpoint_every, the settings beyond it) of ``name``'s smallest run, as its record says."""
    options = dict(registry.get(name).smallest_run)
    return options.pop("checkpoint_every"), options


@pytest.mark.parametrize("name", registry.NAMES)
def test_every_config_has_the_smallest_preset_and_the_command_line_offers_it(name):
    algorithm = registry.get(name)
    config_class = algorithm.config_class
    assert algorithm.starting_points()[0] == registry.SMALLEST
    assert isinstance(tiny_config(name), config_class) and tiny_config(name) != config_class()
    args = cli.build_parser().parse_args(["train", name, "--preset", registry.SMALLEST])
    assert cli._config_from(args, algorithm) == tiny_config(name)


def test_every_name_is_one_algorithm_and_dqn_names_its_driver():
    assert len(set(registry.NAMES)) == len(registry.NAMES)
    assert {name for name in registry.NAMES if name.startswith("dqn")} == {
        "dqn-scan", "dqn-host", "dqn-data-parallel", "dqn-actor-learner"}
    with pytest.raises(ValueError, match=r"no algorithm 'dqn' \(DQN: name its driver\); labcore has ppo, pqn, dqn-scan"):
        registry.get("dqn")
    from labcore.agents import dqn

    assert dqn.train is registry.get("dqn-scan").driver().train  # the package's train is the jitted DQN's
    cli_names = cli.build_parser()._subparsers._group_actions[0].choices
    for command in ("train", "eval"):
        assert tuple(cli_names[command]._subparsers._group_actions[0].choices) == registry.NAMES


def newest_checkpoint(run: Path) -> Path:
    return max((path for path in (run / "checkpoints").iterdir() if path.name.isdigit()), key=lambda p: int(p.name))


def interrupted(run: Path) -> int:
    """Remove the run's newest checkpoint, as a run killed before writing it leaves the folder; its step."""
    newest = newest_checkpoint(run)
    shutil.rmtree(newest)
    return int(newest.name)


def same_leaves(a, b) -> bool:
    def plain(leaf):
        return np.asarray(jax.random.key_data(leaf) if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key) else leaf)

    leaves_a, leaves_b = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    return len(leaves_a) == len(leaves_b) and all(np.array_equal(plain(x), plain(y)) for x, y in zip(leaves_a, leaves_b))


def a_report_of_numbers(report: dict) -> bool:
    return bool(report) and all(isinstance(value, numbers.Number) and not isinstance(value, bool)
                                for value in report.values())


@pytest.mark.parametrize("name", registry.NAMES)
def test_every_algorithm_trains_resumes_loads_and_evaluates_in_python_and_on_the_command_line(name, tmp_path, capsys):
    trains_resumes_loads_and_evaluates(name, tmp_path, capsys)


def trains_resumes_loads_and_evaluates(name: str, tmp_path: Path, capsys) -> None:
    """The whole contract of registry algorithm ``name``, from its smallest config, in Python and on the command line.

    A run is trained in Python, interrupted (its newest checkpoint removed) and resumed in Python; the command line
    trains its own run from the saved config.json, interrupted and resumed too. The Python run loads and ends where
    the uninterrupted one did (where the algorithm is repeatable), and the command line's run evaluates as it does.
    Under LABCORE_QUICK=1 (as in CI) one run is trained and resumed once, not twice: the command line resumes an
    interrupted copy of the Python run, and that resumed run is the one loaded, compared and evaluated."""
    algorithm = registry.get(name)
    config = tiny_config(name)
    checkpoint_every, settings = smallest_run(name)
    options = dict(checkpoint_every=checkpoint_every, progress=False, **settings)

    # Python: a run folder holding what the registry says, and (full budgets) a resume after an interruption
    run = tmp_path / "python"
    first = algorithm.train(config, run, **options)
    for entry in algorithm.run_folder:
        assert list(run.glob(entry.rstrip("/"))), f"{name}'s run folder has no {entry}"
    command_run = tmp_path / "command-line"
    if is_quick():
        shutil.copytree(run, command_run)
    else:
        interrupted(run)
        resumed = algorithm.train(config, run, resume=True, **options)
        assert resumed.summary["updates"] == first.summary["updates"]

    # The command line, from the saved config.json: its own run (full budgets), interrupted, resumed
    flags = [flag for key, value in settings.items() for flag in (f"--{key.replace('_', '-')}", str(value))]
    train = ["train", name, "--config", str(run / "config.json"), "--run-dir", str(command_run), "--no-progress",
             "--checkpoint-every", str(checkpoint_every), *flags]
    if not is_quick():
        assert cli.main(train) == 0
    interrupted(command_run)
    assert cli.main([*train, "--resume"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["updates"] == first.summary["updates"]

    # A resumed run (Python's; under quick the command line's) loads and ends where the uninterrupted one did, and
    # the command line's run evaluates the same
    resumed_run = command_run if is_quick() else run
    loaded_config, state = algorithm.load_checkpoint(resumed_run)
    assert loaded_config == config
    params = algorithm.params(state)
    if algorithm.repeatable:  # bit for bit
        assert same_leaves(algorithm.params(first.state), params)
    report = algorithm.evaluate(loaded_config, params, seed=0)
    assert a_report_of_numbers(report), report
    capsys.readouterr()
    assert cli.main(["eval", name, "--checkpoint", str(command_run), "--seed", "0"]) == 0
    evaluated = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert evaluated["algorithm"] == name and evaluated["seed"] == 0
    if algorithm.repeatable:  # the same config, seed and program: the same parameters, the same evaluation
        assert {key: evaluated[key] for key in report} == report

    # Every other algorithm refuses this folder in one line naming what it holds and the command that evaluates it
    from labcore.checkpoint import WrongCheckpoint

    for other in registry.NAMES:
        if other == name:
            continue
        with pytest.raises(WrongCheckpoint) as refused:
            registry.get(other).load_checkpoint(run)
        message = str(refused.value)
        assert "\n" not in message and f"eval {name} --checkpoint" in message and other in message, message
        assert cli.main(["eval", other, "--checkpoint", str(run)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("error: ") and f"eval {name} --checkpoint" in err, err


def test_train_from_a_saved_config_with_flags_overriding_and_a_config_of_another_algorithm_refused(tmp_path, capsys):
    saved = tmp_path / "config.json"
    saved.write_text(json.dumps(runs.config_dict(tiny_config("ppo"))))
    args = cli.build_parser().parse_args(["train", "ppo", "--config", str(saved), "--total-steps", "1024"])
    assert cli._config_from(args, registry.get("ppo")) == dataclasses.replace(tiny_config("ppo"), total_steps=1024)
    folder = cli.build_parser().parse_args(["train", "ppo", "--config", str(tmp_path)])  # the folder holding it
    assert cli._config_from(folder, registry.get("ppo")) == tiny_config("ppo")
    assert cli.main(["train", "pqn", "--config", str(saved)]) == 2
    assert "error: --config: " in capsys.readouterr().err
    with pytest.raises(SystemExit):  # a preset and a saved config are two starting points: one of them
        cli.build_parser().parse_args(["train", "ppo", "--config", str(saved), "--preset", "cartpole"])


@pytest.mark.parametrize(("name", "driver", "function", "settings_class"), [
    ("dqn-actor-learner", "actor_learner", "train", "ActorLearnerSettings"),
    ("dqn-host", "host_loop", "train", "HostLoopSettings"),
    ("dqn-data-parallel", "multi_process", "train", "DataParallelSettings"),
])
def test_a_drivers_settings_are_written_once_and_are_its_keywords_defaults(name, driver, function, settings_class):
    import importlib
    import inspect

    from labcore.agents.dqn import config as dqn_config

    keywords = inspect.signature(getattr(importlib.import_module(f"labcore.agents.dqn.{driver}"), function)).parameters
    settings = registry.get(name).settings
    defaults = {field.name: field.default for field in dataclasses.fields(getattr(dqn_config, settings_class))}
    flags = vars(cli.build_parser().parse_args(["train", name]))  # what the command line gives unasked
    assert settings and {setting.name: setting.default for setting in settings} == defaults
    for setting in settings:
        assert keywords[setting.name].default == defaults[setting.name] == flags[setting.name], setting.name
        assert setting.default is None or setting.type is type(setting.default), setting.name


@pytest.mark.parametrize(("annotation", "metadata"), [(tuple[int, ...], {"help": "?"}), (int | str, {"help": "?"}),
                                                      (int, {})])
def test_a_setting_the_command_line_cannot_take_is_refused(annotation, metadata):
    bad = dataclasses.make_dataclass("Bad", [("size", annotation, dataclasses.field(default=1, metadata=metadata))])
    with pytest.raises(TypeError, match=r"Bad.size: a setting is an int, float, str or bool \(or None\) with its help"):
        registry.settings_of(bad)


def test_an_option_an_algorithm_cannot_honour_is_refused_by_name():
    with pytest.raises(ValueError, match="seeds: dqn-host runs one seed per call"):
        registry.get("dqn-host").train(tiny_config("dqn-host"), seeds=2)
    with pytest.raises(TypeError, match=r"ppo: train\(\) got unexpected keyword arguments \['num_actors'\]"):
        registry.get("ppo").train(tiny_config("ppo"), num_actors=2)


def test_help_and_version_answer_without_starting_jax():
    import subprocess
    import sys

    code = ("import sys; from labcore import __main__ as cli\n"
            "try:\n    cli.main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
            "heavy = sorted(m for m in ('jax', 'flax', 'optax', 'haiku', 'orbax') if m in sys.modules)\n"
            "print('imported:', heavy)")
    for words in (["--help"], ["train", "--help"], *(["train", name, "--help"] for name in registry.NAMES),
                  ["eval", "iqn", "--help"], ["--version"]):
        done = subprocess.run([sys.executable, "-c", code, *words], capture_output=True, text=True, timeout=120)
        assert done.stdout.strip().endswith("imported: []"), (words, done.stdout[-500:], done.stderr[-2000:])


def registry_table():
    """docs/tooling/registry_table.py, which writes the architecture guide's table at build time."""
    import importlib.util

    from conftest import REPO_ROOT

    spec = importlib.util.spec_from_file_location("registry_table", REPO_ROOT / "docs" / "tooling" / "registry_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_architecture_guide_lists_every_algorithm_of_the_registry():
    from conftest import REPO_ROOT

    page = (REPO_ROOT / "docs" / "guide" / "architecture.md").read_text()
    assert "{{ algorithms_table }}" in page and not [line for line in page.splitlines() if line.startswith("| `")]
    rows = registry_table().table().splitlines()[2:]  # under the header: one row per algorithm, in the registry's order
    assert rows == [f"| `{a.name}` | `{a.driver().__name__}` | {a.help} |" for a in registry.ALGORITHMS]


def test_every_algorithms_name_is_written_once_in_labcore_and_its_driver_records_it():
    import ast

    from conftest import REPO_ROOT

    constants = [node.value for path in (REPO_ROOT / "labcore").rglob("*.py")
                 for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Constant)]
    for algorithm in registry.ALGORITHMS:
        assert constants.count(algorithm.name) == 1, algorithm.name  # in its config module, nowhere else
        assert algorithm.driver().ALGORITHM == algorithm.name  # what its checkpoints record


def test_a_driver_implements_the_contract_itself():
    import inspect

    for algorithm in registry.ALGORITHMS:
        driver = algorithm.driver()
        assert driver.__name__.startswith(algorithm.config_class.__module__.rsplit(".", 1)[0] + ".")  # in its folder
        for name, leading in (("train", ["config", "run_dir"]), ("load_checkpoint", ["path", "step"]),
                              ("params", ["state"]), ("evaluate", ["config", "params", "seed"])):
            function = getattr(driver, name)
            # the driver's own (PPO's and PQN's train built by the shared loop): no adapter in the registry
            assert inspect.getmodule(function).__name__ not in ("labcore.agents.registry", "labcore.agents.contract")
            parameters = list(inspect.signature(function).parameters.values())
            if name == "params":  # one argument, whatever the driver calls its state
                assert len(parameters) == 1, (algorithm.name, name)
            else:
                assert [p.name for p in parameters[:len(leading)]] == leading, (algorithm.name, name)


# An algorithm written from scratch, outside labcore: its folder (a config module importable without JAX, its record,
# a driver on labcore.loop) and one registry entry; nothing else in labcore or in these tests names it.
BANDIT_FILES = {
    "__init__.py": '''"""bandit: epsilon-greedy sample means on a Gaussian bandit (a test's algorithm)."""
from bandit_agent.config import BanditConfig as Config
''',
    "config.py": '''import dataclasses

from labcore import validation

NAME = "bandit"


@dataclasses.dataclass(frozen=True)
class BanditConfig:
    """Arm i of ``arms`` pays i / (arms - 1) plus unit normal noise; each update pulls ``pulls_per_update`` arms."""

    arms: int = 5
    pulls_per_update: int = 64
    updates: int = 100
    epsilon: float = 0.1
    seed: int = 0

    def __post_init__(self):
        validation.require_ints(self, "arms", "pulls_per_update", "updates", minimum=1)

    @classmethod
    def smallest(cls, **overrides):
        return cls(**{**dict(arms=3, pulls_per_update=8, updates=4), **overrides})
''',
    "algorithm.py": '''from bandit_agent.config import NAME, BanditConfig
from labcore.agents.contract import Algorithm


def _driver():
    from bandit_agent import run

    return run


ALGORITHM = Algorithm(NAME, "epsilon-greedy sample means on a Gaussian bandit", BanditConfig, _driver)
''',
    "run.py": '''from typing import NamedTuple

import jax
import jax.numpy as jnp

from bandit_agent.config import NAME as ALGORITHM
from labcore import loop


class State(NamedTuple):
    estimates: jax.Array  # [arms] sample means
    counts: jax.Array  # [arms]
    key: jax.Array
    update_step: jax.Array


def make_program(config, callback=None, log_every=1):
    means = jnp.linspace(0.0, 1.0, config.arms)

    def init(key):
        zeros = jnp.zeros(config.arms)
        return State(zeros, zeros, key, jnp.zeros((), jnp.int32))

    def update(state, _):
        key, explore_key, arm_key, noise_key = jax.random.split(state.key, 4)
        explore = jax.random.uniform(explore_key, (config.pulls_per_update,)) < config.epsilon
        random_arms = jax.random.randint(arm_key, (config.pulls_per_update,), 0, config.arms)
        arms = jnp.where(explore, random_arms, jnp.argmax(state.estimates))
        rewards = means[arms] + jax.random.normal(noise_key, arms.shape)
        counts = state.counts + jnp.bincount(arms, length=config.arms)
        sums = state.estimates * state.counts + jnp.bincount(arms, weights=rewards, length=config.arms)
        estimates = sums / jnp.maximum(counts, 1)
        return State(estimates, counts, key, state.update_step + 1), {"episode_return": rewards.mean()}

    return loop.Program(
        config=config, init=init, run=lambda state, n: jax.lax.scan(update, state, None, length=n),
        updates_done=lambda state: int(state.update_step), num_updates=config.updates,
        steps_per_update=config.pulls_per_update, name="bandit", streams_metrics=False,
        evaluate=lambda state, seed: evaluate(config, state.estimates, seed), algorithm=ALGORITHM)


train = loop.trainer(make_program, "the bandit")


def evaluate(config, params, seed=0):
    return {"greedy_arm_mean": float(jnp.linspace(0.0, 1.0, config.arms)[jnp.argmax(params)])}


def params(state):
    return state.estimates


def load_checkpoint(path, step=None):
    from bandit_agent.config import BanditConfig

    return loop.load_checkpoint(path, BanditConfig, make_program, step, algorithm=ALGORITHM)
''',
}


def test_an_algorithm_added_with_its_folder_and_one_entry_trains_resumes_evaluates_and_is_in_the_docs(
        tmp_path, monkeypatch, capsys):
    folder = tmp_path / "packages" / "bandit_agent"
    folder.mkdir(parents=True)
    for name, text in BANDIT_FILES.items():
        (folder / name).write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path / "packages"))
    from bandit_agent.algorithm import ALGORITHM as bandit

    monkeypatch.setattr(registry, "ALGORITHMS", (*registry.ALGORITHMS, bandit))  # the one entry
    monkeypatch.setattr(registry, "NAMES", (*registry.NAMES, "bandit"))  # as the registry derives it on import

    (tmp_path / "runs").mkdir()
    trains_resumes_loads_and_evaluates("bandit", tmp_path / "runs", capsys)  # in Python and on the command line
    assert registry_table().table().splitlines()[-1] == (
        "| `bandit` | `bandit_agent.run` | epsilon-greedy sample means on a Gaussian bandit |")
