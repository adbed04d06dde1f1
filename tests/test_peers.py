"""benchmarks/peers.py's harness, run at a tiny budget against Rejax in its own environment, so that the
comparison cannot rot: the peer's environment is built pinned (once; about a minute), both sides train the
same pair in processes of their own, the same evaluation scores both, and the row says what was compared.
SBX, which pulls in Stable-Baselines3 and PyTorch, is not run here."""

from __future__ import annotations

import importlib.util
import json
import math
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.several_processes


def load_peers():
    spec = importlib.util.spec_from_file_location("peers", REPO / "benchmarks" / "peers.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["peers"] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_every_pair_translates_both_sides_to_the_same_step_counts_and_says_what_differs():
    peers = load_peers()
    for pair in peers.PAIRS:
        ours, theirs = (pair.labcore[pair.total_steps_field[0]], pair.peer_config[pair.total_steps_field[1]])
        assert ours == theirs, pair.name
        assert pair.unmatched and pair.source and pair.peer in peers.peers()
        tiny = pair.scaled(0.02)
        assert tiny.labcore[pair.total_steps_field[0]] == tiny.peer_config[pair.total_steps_field[1]], pair.name
    assert any(128 in pair.agents for pair in peers.PAIRS)  # the many-agents row
    assert peers.UNMATCHED_ALGORITHMS  # IQN is said, not dropped


def test_the_harness_times_labcore_beside_rejax_in_its_own_environment(tmp_path):
    peers = load_peers()
    rejax = peers.peers()["rejax"]
    python = peers.setup(rejax)
    assert python != pathlib.Path(sys.executable) and rejax.ready()
    command = [sys.executable, str(REPO / "benchmarks" / "peers.py"), "run", "--pairs", "ppo-cartpole-rejax",
               "--agents", "1", "--rounds", "1", "--scale", "0.02", "--out", str(tmp_path)]
    finished = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert finished.returncode == 0, finished.stderr[-3000:]
    record = json.loads((tmp_path / "peers.json").read_text())
    (row,) = record["rows"]
    ours, theirs = row["runs"]["labcore"][0], row["runs"]["rejax"][0]
    assert ours["steps"] == theirs["steps"] == 2_000  # 100k steps x 0.02: the same work on both sides
    assert theirs["versions"]["rejax"] == "0.1.3" and theirs["versions"]["jax"] == ours["versions"]["jax"]
    for side in (ours, theirs):
        assert side["compile_s"] > 0 and side["steps_per_s"] > 0 and math.isfinite(side["return_mean"])
        assert 8 <= side["return_mean"] <= 500  # CartPole's greedy episodes, scored by the same code
    assert row["ratios"][0] == pytest.approx(ours["steps_per_s"] / theirs["steps_per_s"])
    assert row["unmatched"] and "rejax==0.1.3" in record["peers"]["rejax"]
    # run again with --resume: both sides are read back from peers-sides.jsonl, none is run again
    again = subprocess.run([*command, "--resume"], capture_output=True, text=True, timeout=600, cwd=REPO)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.count("recorded before") == 2 and ", ran)" not in again.stdout, again.stdout
    resumed = json.loads((tmp_path / "peers.json").read_text())
    assert resumed["rows"][0]["runs"] == row["runs"] and resumed["wall_s"] == pytest.approx(record["wall_s"])
    assert "--resume" not in resumed["command"] and resumed["measured"] == record["measured"]


def test_the_anatomy_reads_loops_kernels_callbacks_and_the_costliest_lines_of_a_program(tmp_path):
    import jax
    import jax.numpy as jnp

    load_peers()
    spec = importlib.util.spec_from_file_location("peers_anatomy", REPO / "benchmarks" / "peers_anatomy.py")
    anatomy = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(anatomy)

    def program(x):
        def step(carry, _):
            jax.debug.callback(lambda value: None, carry[0])  # one round trip to Python a turn
            return jnp.sort(jnp.tanh(carry @ carry.T), axis=-1)[:, :8], None

        return jax.lax.scan(step, x, None, length=50)[0]

    compiled = jax.jit(program).lower(jnp.ones((64, 8))).compile()
    with jax.profiler.trace(str(tmp_path / "trace")):
        jax.block_until_ready(compiled(jnp.ones((64, 8))))
    seen = anatomy.anatomy(compiled.as_text(), tmp_path / "trace", steps=50, top=5)
    (loop,) = [loop for loop in seen["loops"] if loop["trips"] == 50]
    assert loop["where"].startswith("program (") and loop["kernels per turn"] >= 3  # dot, tanh+sort, callback
    assert seen["host callbacks"] == 1
    assert seen["kernels per call"] >= 50 * loop["kernels per turn"] and seen["kernels per env step"] >= 3
    opcodes = {row["name"] for row in seen["by opcode"]}
    assert "sort" in opcodes and "custom-call" in opcodes
    assert any(row["name"].startswith("step (") and "tests/test_peers.py:" in row["name"] for row in seen["by source"])
    assert 0 < seen["op ms"] and seen["ops busy ms"] <= seen["profiled ms"]


def test_a_labcore_variant_changes_labcores_ppo_in_its_own_process_only(tmp_path):
    peers = load_peers()
    pair = next(pair for pair in peers.PAIRS if pair.name == "ppo-cartpole-rejax")
    assert peers.spec_of(pair, "labcore", 1, variants=("element-clip",))["labcore_variants"] == ["element-clip"]
    assert "labcore_variants" not in peers.spec_of(pair, "rejax", 1, variants=("element-clip",))  # the peer as it is
    assert "labcore_variants" not in peers.spec_of(pair, "labcore", 1)  # a run recorded before the option: same key
    with pytest.raises(SystemExit):  # DQN is not what the variants change
        peers.main(["run", "--pairs", "dqn-cartpole-rejax", "--labcore-variant", "no-metrics", "--out", str(tmp_path)])
    # In a process of its own, as a side runs: the clipping is per element and the program returns no metrics
    code = (
        "import importlib.util, sys, jax, optax\n"
        f"spec = importlib.util.spec_from_file_location('child', {str(REPO / 'benchmarks' / 'peers_child.py')!r})\n"
        "child = importlib.util.module_from_spec(spec); spec.loader.exec_module(child)\n"
        "from labcore.agents.ppo import core\n"
        "child.changed_labcore(['element-clip', 'no-metrics'], 'ppo')\n"
        "assert optax.clip_by_global_norm is optax.clip\n"
        "state, metrics = jax.jit(core.make_ppo(core.PPOConfig.smallest()).train)(jax.random.key(0))\n"
        "assert metrics == {} and int(state.update_step) == core.PPOConfig.smallest().num_updates\n"
        "try:\n    child.changed_labcore(['no-metrics'], 'dqn-scan')\nexcept ValueError as error:\n    print('refused:', error)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "refused: --labcore-variant changes labcore's PPO and PQN only, not 'dqn-scan'" in done.stdout
