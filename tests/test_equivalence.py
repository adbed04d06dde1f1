"""The agent contract and the equivalence of the ways one run can be cut (labcore.loop).

Every algorithm on the shared driver (PPO, PQN, the jitted DQN, the all-JAX GFlowNet, IQN's fused mode) is imported the same way and run
by the same ``train``; seed i of a vmap over seeds ends where the run of that seed alone ends.
"""

from __future__ import annotations

import dataclasses
import importlib

import jax
import numpy as np
import pytest

from labcore import loop
from labcore.agents import CONTRACT, registry
from test_registry import tiny_config


def small_config(algorithm: str):
    """The registry test's tiny config of a registry name (the package names its jitted DQN "dqn")."""
    return tiny_config("dqn-scan" if algorithm == "dqn" else algorithm)


# The algorithms' packages (each exports the contract), and the registry's algorithms that run on
# labcore.loop with seeds in one vmap (those that refuse seeds run one per call).
PACKAGES = tuple(sorted({algorithm.config_class.__module__.split(".")[2] for algorithm in registry.ALGORITHMS}))
ALGORITHMS = tuple(name for name in registry.NAMES if "seeds" not in registry.get(name).refuses)


@pytest.mark.parametrize("algorithm", PACKAGES)
def test_every_algorithm_exports_the_same_contract(algorithm):
    agent = importlib.import_module(f"labcore.agents.{algorithm}")
    assert tuple(agent.__all__) == CONTRACT
    for name in CONTRACT:
        assert callable(getattr(agent, name)), name
    assert dataclasses.is_dataclass(agent.Config)
    # the names are the driver's own (its record's), make_train included: nothing is looked up by string
    record = registry.get("dqn-scan" if algorithm == "dqn" else algorithm)  # the package's record, by its name
    assert agent.Config is record.config_class
    assert all(getattr(agent, name) is getattr(record.driver(), name) for name in CONTRACT[1:])
    with pytest.raises(AttributeError, match="has no attribute 'Confg'"):
        agent.Confg  # noqa: B018  (a typo is an AttributeError naming it, not a silent None)


@pytest.mark.parametrize("algorithm", PACKAGES)
def test_every_make_train_has_one_shape(algorithm):
    """make_train(config, *, callback=None, log_every=1, ...) -> train(key) -> (state, metrics), in every
    package: the state is the program's (what its checkpoints hold and load_checkpoint returns, so that
    params reads it), every metric has a leading axis of one entry per update, and the callback receives
    every log_every-th update's row on the host while the compiled run goes on."""
    import inspect

    agent = importlib.import_module(f"labcore.agents.{algorithm}")
    signature = inspect.signature(agent.make_train)
    config_parameter, *options = signature.parameters.values()
    assert config_parameter.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    assert all(option.kind is inspect.Parameter.KEYWORD_ONLY for option in options)
    assert {"callback", "log_every"} <= set(signature.parameters)
    config = small_config(algorithm)
    program = agent.make_program(config)
    rows = []
    state, metrics = jax.jit(agent.make_train(config, callback=rows.append, log_every=2))(jax.random.key(config.seed))
    expected = jax.eval_shape(program.init, jax.random.key(config.seed))
    assert jax.tree_util.tree_structure(state) == jax.tree_util.tree_structure(expected)
    assert [leaf.shape for leaf in jax.tree_util.tree_leaves(state)] == [leaf.shape for leaf in jax.tree_util.tree_leaves(expected)]
    assert program.updates_done(state) == program.num_updates
    assert jax.tree_util.tree_structure(agent.params(state)) == jax.tree_util.tree_structure(jax.eval_shape(agent.params, expected))
    assert metrics and all(np.shape(value)[0] == program.num_updates for value in metrics.values())
    assert [int(row["update"]) for row in rows] == list(range(2, program.num_updates + 1, 2))


def as_numpy(leaf) -> np.ndarray:
    """A state leaf as numpy (a typed PRNG key by its data)."""
    return np.asarray(jax.random.key_data(leaf) if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key) else leaf)


def max_difference(a, b) -> float:
    """The largest absolute difference between two pytrees' leaves."""
    leaves_a, leaves_b = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    assert len(leaves_a) == len(leaves_b)
    return max((float(np.max(np.abs(as_numpy(x).astype(np.float64) - as_numpy(y).astype(np.float64)), initial=0.0))
                for x, y in zip(leaves_a, leaves_b)), default=0.0)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_seed_inside_a_vmap_over_seeds_ends_where_it_ends_alone(algorithm, tmp_path):
    """train(config, seeds=2) runs config.seed and config.seed + 1 in one jax.vmap. Seed 1's final
    state (parameters, optimiser, envs, replay, key, counters) and its evaluation equal those of
    train(config with seed + 1) alone. XLA compiles the batched program apart from the single one,
    so float operations may round differently: the state agrees to 1e-5 (the bound of the
    equivalence table in docs/guide/runs.md), every integer leaf and the evaluation exactly."""
    agent = registry.get(algorithm)
    config = small_config(algorithm)
    together = agent.train(config, tmp_path / "together", seeds=2, log_every=2, progress=False)  # one chunk (chunks: (b))
    alone = agent.train(dataclasses.replace(config, seed=config.seed + 1), log_every=2, progress=False)
    seed_1 = loop.seed_slice(together.state, 1)
    for x, y in zip(jax.tree_util.tree_leaves(seed_1), jax.tree_util.tree_leaves(alone.state)):
        if not np.issubdtype(as_numpy(x).dtype, np.inexact):  # counts, keys, actions, flags: exact
            np.testing.assert_array_equal(as_numpy(x), as_numpy(y))
    assert max_difference(seed_1, alone.state) <= 1e-5
    per_seed = together.summary["per_seed"][1]
    assert {name: per_seed[name] for name in per_seed} == {name: alone.summary[name] for name in per_seed}
    # the rows: one per logged update, each a mean over the two seeds
    assert [row["update"] for row in together.metrics] == [row["update"] for row in alone.metrics]
    assert together.summary["seeds"] == 2
    if hasattr(config, "eval_episodes"):
        assert together.summary["eval_episodes"] == config.eval_episodes  # a setting, kept
    # the checkpoint holds both seeds, and loads back as such
    loaded_config, state = agent.load_checkpoint(tmp_path / "together")
    assert loaded_config == config and max_difference(state, together.state) == 0.0
    # resuming it with another number of seeds is refused before anything is read or compiled
    for other in (None, 3):
        with pytest.raises(ValueError, match=rf"seeds: the run in .* was written with seeds=2, this resume asks for seeds={other}"):
            agent.train(config, tmp_path / "together", resume=True, seeds=other, progress=False)


def test_seeds_must_be_positive():
    from labcore.agents import pqn

    with pytest.raises(ValueError, match="seeds must be >= 1"):
        pqn.train(small_config("pqn"), seeds=0, progress=False)


def test_the_gflownet_program_is_make_train_cut_into_chunks(tmp_path):
    """The all-JAX GFlowNet on the loop runs make_train's iterations with make_train's keys: the
    same final state (parameters, optimiser state, key, count, ring of recent samples) and losses, and an L1 row computed on the device equal to hypergrid.l1_curve's
    (float32 against float64) over the same last l1_samples terminal states, whatever the chunks."""
    from labcore.agents import gflownet
    from labcore.envs import hypergrid

    # batches of 8 into a ring of 20: the ring wraps mid-batch
    config = dataclasses.replace(small_config("gflownet"), iterations=12)
    whole, metrics = jax.jit(gflownet.make_train(config))(jax.random.key(config.seed))
    chunked = gflownet.train(config, tmp_path, log_every=1, checkpoint_every=5, evaluate=False, progress=False)
    assert max_difference(chunked.state, whole) <= 1e-6
    np.testing.assert_allclose([row["loss"] for row in chunked.metrics], np.asarray(metrics["loss"]), rtol=1e-5)
    curve = hypergrid.l1_curve(config, np.asarray(metrics["terminals"]), 1)
    assert [row["update"] for row in chunked.metrics] == [update for update, _ in curve]
    np.testing.assert_allclose([row["l1"] for row in chunked.metrics], [l1 for _, l1 in curve], atol=1e-5)
    assert [row["trajectories"] for row in chunked.metrics] == [8 * update for update, _ in curve]
    loaded_config, state = gflownet.load_checkpoint(tmp_path)
    assert loaded_config == config and max_difference(state, chunked.state) == 0.0
    # the host trainers write the same rows, and refuse what needs a checkpoint
    with pytest.raises(ValueError, match="trainer: resume, seeds need the checkpointed all-JAX trainer"):
        gflownet.train(dataclasses.replace(config, trainer="hybrid"), tmp_path / "h", resume=True, seeds=2)
    with pytest.raises(ValueError, match="trainer: make_program builds the all-JAX trainer"):
        gflownet.make_program(dataclasses.replace(config, trainer="torch"))


def test_the_iqn_program_is_the_fused_runner_cut_into_chunks(tmp_path, xla_default_emitters):
    """IQN's fused mode on the loop plays the game of the fused runner (one compiled call per
    epoch here) and of make_train (the whole run in one scan): the same parameters, bit for bit,
    and the same rows, whatever the chunks. Compiled with XLA's default loop emitters, as in a
    user's session: with the older ones the unit tests use elsewhere (tests/conftest.py), the
    chunked run and the fused runner ended 9.3e-10 apart after these 6 epochs (a 2-core AMD EPYC,
    jax 0.10.2)."""
    from labcore.agents import iqn
    from labcore.agents.iqn import run as iqn_run
    from labcore.agents.iqn import runners

    config = small_config("iqn")
    chunked = iqn.train(config, tmp_path, log_every=1, checkpoint_every=4, evaluate=False, progress=False)  # 4 + 2
    runner = runners.JaxFusedRunner(config)
    rows = iqn_run.metric_rows(0, runners.EpochNumbers(*(np.concatenate(parts) for parts in zip(
        *[runner.run_epochs(1) for _ in range(config.epochs)]))))
    assert max_difference(iqn_run.params(chunked.state), runner.params()) == 0.0
    for row, expected in zip(chunked.metrics, rows, strict=True):
        assert row["update"] == expected["update"] and row["gems_per_world"] == expected["gems_per_world"]
        assert row["mean_reward"] == pytest.approx(expected["mean_reward"], rel=1e-6)
        assert (row["loss"] is None) == (expected["loss"] is None)
    whole, _ = jax.jit(iqn.make_train(config))(jax.random.key(config.seed))
    assert max_difference(whole, chunked.state) == 0.0
    loaded_config, state = iqn.load_checkpoint(tmp_path)
    assert loaded_config == config and max_difference(state, chunked.state) == 0.0
    # the host modes write the same rows, and refuse what needs a checkpoint
    with pytest.raises(ValueError, match="mode: resume, seeds need the checkpointed fused mode"):
        iqn.train(dataclasses.replace(config, mode="jax_parallel"), tmp_path / "host", resume=True, seeds=2)
