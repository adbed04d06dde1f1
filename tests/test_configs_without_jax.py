"""Every algorithm's config imports and builds without JAX.

The command line lists every config field as a flag, so building its parser imports the config
classes; they live in modules that import no jax, flax, optax or haiku (several seconds before
``--help`` could print otherwise), and each core module re-exports its config unchanged.
"""

from __future__ import annotations

import dataclasses
import importlib
import subprocess
import sys

import pytest

from labcore.agents import registry  # imports no JAX: the command line's --help reads it

# The configs an algorithm's config holds (module, class, the module that re-exports it).
NESTED = (
    ("labcore.agents.iqn.config", "IQNConfig", "labcore.agents.iqn.core"),
    ("labcore.envs.treasurehunt_params", "TreasurehuntParams", "labcore.envs.treasurehunt"),
)
# A registry config its core module does not re-export: IQN's run config (mode, epochs, world) never lived there.
RUN_ONLY = {"IQNRunConfig"}


def core_module(config_class: type) -> str | None:
    """The module that re-exports a registry config: its folder's core (None for ``RUN_ONLY``)."""
    return None if config_class.__name__ in RUN_ONLY else config_class.__module__.rsplit(".", 1)[0] + ".core"


# (config module, class, the module that re-exports it or None): every algorithm's config, then the nested ones
CONFIGS = tuple(dict.fromkeys(
    (algorithm.config_class.__module__, algorithm.config_class.__name__, core_module(algorithm.config_class))
    for algorithm in registry.ALGORITHMS)) + NESTED
HEAVY = ("jax", "flax", "optax", "haiku", "gymnax", "distrax")

# The fields of the configs runs were written with, in order, as they were when the configs moved out of the core
# modules: the command line's flags, config.json and the checkpoints' metadata are written from them, and a run
# folder written before names them (an algorithm added since has no such runs to stay readable for).
FIELDS = {
    "PPOConfig": [
        "env_id", "num_envs", "num_steps", "total_steps", "learning_rate", "anneal_lr", "gamma", "gae_lambda",
        "num_minibatches", "update_epochs", "clip_eps", "vf_coef", "ent_coef", "max_grad_norm", "hidden_size",
        "num_layers", "activation", "normalize_advantages", "mask_actions", "bootstrap_truncation", "compute_dtype",
        "eval_episodes", "seed",
    ],
    "PQNConfig": [
        "env_id", "network", "hidden_sizes", "layer_norm", "num_envs", "num_steps", "total_steps", "learning_rate",
        "anneal_lr", "optimizer", "max_grad_norm", "gamma", "q_lambda", "num_minibatches", "update_epochs",
        "epsilon_start", "epsilon_end", "exploration_fraction", "reward_scale", "bootstrap_truncation", "clip_rewards",
        "repeat_action_probability", "life_loss_terminal", "max_episode_steps", "env_stepping",
        "eval_episodes", "eval_epsilon", "seed",
    ],
    "DQNConfig": [
        "env_id", "network", "hidden_sizes", "total_steps", "buffer_size", "batch_size", "gamma", "learning_rate",
        "optimizer", "adam_eps", "learning_starts", "train_frequency", "target_update_frequency",
        "target_update_rate", "epsilon_start", "epsilon_end", "exploration_fraction", "double_dqn", "max_grad_norm",
        "td_loss", "huber_delta", "num_envs", "replay_storage", "life_loss_terminal", "repeat_action_probability",
        "eval_episodes", "eval_epsilon", "seed",
    ],
    "GFlowNetConfig": [
        "ndim", "height", "loss", "trainer", "batch_size", "iterations", "learning_rate", "log_z_learning_rate",
        "hidden_size", "num_layers", "uniform_backward", "exploration_epsilon", "subtb_lambda", "l1_samples", "seed",
    ],
    "IQNConfig": [
        "obs_size", "n_actions", "n_frames", "hidden_size", "n_quantiles", "n_tau_act", "n_step", "gamma",
        "learning_rate", "target_update_rate", "target_sync_epochs", "buffer_size", "batch_size", "max_grad_norm",
        "epsilon_start", "epsilon_decay", "epsilon_end", "fixed",
    ],
    "IQNRunConfig": ["mode", "epochs", "seed", "num_worlds", "epochs_per_call", "world", "agent"],
    "TreasurehuntParams": [
        "height", "width", "n_agents", "gem_value", "wall_value", "spawn_prob", "vision_radius", "max_turns",
    ],
}  # fmt: skip


def test_the_configs_import_and_build_without_jax():
    """Every registry config, from its defaults and from each preset the command line offers, every nested config,
    and each algorithm package's ``Config``, with none of the heavy libraries imported."""
    script = (
        "import importlib, sys\n"
        "from labcore.agents import registry\n"
        "for algorithm in registry.ALGORITHMS:\n"
        "    config_class = algorithm.config_class\n"
        "    config_class()\n"
        "    for preset in algorithm.starting_points():\n"
        "        getattr(config_class, preset)()\n"
        "    importlib.import_module(config_class.__module__.rsplit('.', 1)[0]).Config()\n"
        f"for module, name, _ in {NESTED!r}:\n"
        "    getattr(importlib.import_module(module), name)()\n"
        "from labcore.agents.iqn.run_config import IQNRunConfig\n"
        "config = IQNRunConfig(height=8, hidden_size=64)\n"
        "assert IQNRunConfig.from_dict(config.as_dict()) == config\n"
        f"loaded = [name for name in {HEAVY!r} if name in sys.modules]\n"
        "sys.exit(f'imported {loaded}' if loaded else 0)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]


@pytest.mark.parametrize("module, name, core", [entry for entry in CONFIGS if entry[2]],
                         ids=[name for _, name, core in CONFIGS if core])
def test_the_core_module_re_exports_the_same_class(module, name, core):
    assert getattr(importlib.import_module(core), name) is getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("name", FIELDS)
def test_the_fields_are_unchanged(name):
    module = next(module for module, config_name, _ in CONFIGS if config_name == name)
    assert [field.name for field in dataclasses.fields(getattr(importlib.import_module(module), name))] == FIELDS[name]


@pytest.mark.parametrize("name", registry.NAMES)
def test_each_algorithm_package_s_config_is_its_config_module_s(name):
    config_class = registry.get(name).config_class
    assert importlib.import_module(config_class.__module__.rsplit(".", 1)[0]).Config is config_class


def test_the_treasurehunt_params_are_a_pytree_without_leaves():
    """As flax.struct made them: no leaves, equal params equal structures, a jit argument either way."""
    import jax

    from labcore.envs import treasurehunt as th

    params = th.make_params(height=8)
    assert jax.tree_util.tree_leaves(params) == []
    assert jax.tree_util.tree_structure(params) == jax.tree_util.tree_structure(th.TreasurehuntParams(height=8))
    assert jax.tree_util.tree_structure(params) != jax.tree_util.tree_structure(th.TreasurehuntParams())
    assert int(jax.jit(lambda p, x: x + p.height)(params, 1)) == 9
    assert int(jax.jit(lambda x, p: x + p.height, static_argnums=1)(1, params)) == 9
    assert params.replace(width=6) == th.TreasurehuntParams(height=8, width=6)
    assert all(field.metadata["pytree_node"] is False for field in dataclasses.fields(params))
