"""Try it: the experiments each lesson ends with, run and measured, with what happens.

Each lesson's "Try it" section names two experiments a learner can run in minutes; this script runs
them all the same way (each lesson in a fresh process, lesson 04's with 8 CPU devices) and records
the answers: a table of measured numbers and one sentence written from them.

    python benchmarks/try_it.py                          # every lesson's experiments
    python benchmarks/try_it.py --lessons 07 12          # some lessons
    python benchmarks/try_it.py --page docs/results/try-it.md   # and write the results page from the records
    python benchmarks/try_it.py --render-only --page docs/results/try-it.md   # only write the page, running nothing

Writes benchmarks/results/try_it.json (every run merges into it, so lessons can be run apart) and
prints each answer. The page's headings are the anchors the lessons link (``anchor``). The page is
written from the records' rows: each experiment's question, change and answer come from this file's
current text (``EXPERIMENTS``, ``ANSWERS``), its numbers, machine and date from the record.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "docs" / "tooling"))
import executed  # noqa: E402  (the machine, as the site's lesson pages name it)

RESULTS = REPO_ROOT / "benchmarks" / "results" / "try_it.json"
LESSONS = {
    "00": "JAX primitives", "01": "A Haiku DQN", "02": "Flax NNX", "03": "jit, scan and vmap",
    "04": "Many devices in one process", "05": "Many processes and machines", "06": "The IQN port",
    "07": "Action-masked PPO", "08": "GPUs, TPUs and Colab", "09": "GFlowNets", "10": "Debugging",
    "11": "Profiling", "12": "PQN",
}
# Before jax is imported: jax 0.10.2 on the CPU can hang after compiling a vmapped training run with its
# concurrency-optimised scheduler (labcore/__main__.py says more); lesson 04 needs 8 CPU devices.
CPU_FLAGS = "--xla_cpu_enable_concurrency_optimized_scheduler=false"
EXTRA_FLAGS = {"04": "--xla_force_host_platform_device_count=8"}


@dataclasses.dataclass(frozen=True)
class Experiment:
    lesson: str
    name: str
    question: str  # what the lesson asks the learner to try
    change: str  # the code to change, as the lesson shows it
    run: Callable[[], list[dict]]  # -> the rows of measurements


EXPERIMENTS: list[Experiment] = []
ANSWERS: dict[str, Callable[[list[dict]], str]] = {}  # experiment name -> its answer, written from its rows


def experiment(lesson: str, question: str, change: str):
    def register(run):
        EXPERIMENTS.append(Experiment(lesson, run.__name__, question, change, run))
        return run

    return register


def answer(name: str):
    """Register the function that writes experiment ``name``'s answer from its rows."""

    def register(write):
        ANSWERS[name] = write
        return write

    return register


def shown(value) -> str:
    """A number as the page's tables show it (``labcore.tools.benchmarking.markdown_table``'s cells: three
    significant figures, thousands separated), so that an answer quotes what its table shows."""
    from labcore.tools.benchmarking import _format_cell

    return _format_cell(value)


def seconds_of(fn: Callable, repeats: int = 20) -> float:
    """Median seconds of ``fn()`` after one warm-up call (labcore.tools.benchmarking.time_call)."""
    from labcore.tools.benchmarking import time_call

    return time_call(fn, repeats=repeats).median_s


# Shared by the DQN experiments of lessons 01 and 03: the jitted DQN (labcore.agents.dqn.scan) on
# gymnax CartPole, seeds vmapped; the greedy-ish evaluation (epsilon 0.05) of the final parameters.
def dqn_runs(seeds: int = 3, **overrides) -> dict:
    import jax
    import numpy as np

    from labcore.agents.dqn import core as dqn
    from labcore.agents.dqn import scan as dqn_scan

    settings = dict(total_steps=50_000, learning_starts=2_000, eval_episodes=10)
    config = dqn.DQNConfig(**{**settings, **overrides})
    keys = jax.random.split(jax.random.key(0), seeds)
    compiled = jax.jit(jax.vmap(dqn_scan.make_train_and_evaluate(config))).lower(keys).compile()
    started = time.perf_counter()
    returns = jax.block_until_ready(compiled(keys))
    wall = time.perf_counter() - started
    evals = np.asarray(returns).mean(axis=1)
    return {"eval_return_per_seed": [round(float(x), 1) for x in evals], "eval_return_mean": round(float(evals.mean()), 1),
            "run_s": round(wall, 2)}


# ---------------------------------------------------------------------------------------------
# Lesson 00: JAX primitives


@experiment("00", "How much does jit save on a chain of element-wise operations, on a short and on a long array?",
            "fast = jax.jit(chain)")
def jit_on_a_chain():
    import jax
    import jax.numpy as jnp

    def chain(x):  # fifteen element-wise operations
        for _ in range(5):
            x = jnp.sin(x) * 1.01 + 0.1
        return x

    fast = jax.jit(chain)
    rows = []
    for n in (1_000, 1_000_000):
        x = jnp.ones(n)
        op_by_op, jitted = seconds_of(lambda: chain(x), 10), seconds_of(lambda: fast(x), 20)
        rows.append({"elements": n, "op_by_op_ms": round(op_by_op * 1e3, 3), "jit_ms": round(jitted * 1e3, 3),
                     "speed_up": round(op_by_op / jitted, 1)})
    return rows


@answer("jit_on_a_chain")
def _jit_on_a_chain(rows):
    return (f"jit ran the chain {shown(rows[0]['speed_up'])}x as fast as op by op on {rows[0]['elements']:,} elements and "
            f"{shown(rows[1]['speed_up'])}x as fast on {rows[1]['elements']:,}. The jitted chain is one compiled call; "
            "op by op, each of the fifteen operations is dispatched on its own and writes its result out.")


@experiment("00", "What does marking an argument static cost when it takes five values?",
            "jax.jit(power, static_argnums=1) against jax.jit(power)")
def static_arguments_recompile():
    import jax
    import jax.numpy as jnp

    traces = {"static": 0, "traced": 0}

    def power(x, n, kind):
        traces[kind] += 1  # runs once per trace, never in the compiled program
        return x ** n

    static = jax.jit(lambda x, n: power(x, n, "static"), static_argnums=1)
    traced = jax.jit(lambda x, n: power(x, n, "traced"))
    x = jnp.linspace(0.0, 1.0, 1000)
    rows = []
    for kind, fn, as_arg in (("static", static, int), ("traced", traced, jnp.float32)):
        started = time.perf_counter()
        for n in range(1, 6):
            jax.block_until_ready(fn(x, as_arg(n)))
        rows.append({"n is": kind, "traces": traces[kind], "five_calls_ms": round((time.perf_counter() - started) * 1e3, 1)})
    return rows


@answer("static_arguments_recompile")
def _static_arguments_recompile(rows):
    return (f"with n static, five values of n meant {rows[0]['traces']} traces and compiles "
            f"({shown(rows[0]['five_calls_ms'])} ms for the five calls); with n traced, {rows[1]['traces']} "
            f"({shown(rows[1]['five_calls_ms'])} ms). Static is for values that shape the program, not for data.")


# ---------------------------------------------------------------------------------------------
# Lesson 01: a Haiku DQN (the same algorithm as labcore's jitted DQN, run here with three seeds at once)


@experiment("01", "What happens to DQN without its target network?",
            "DQNConfig(target_update_frequency=10)  # = train_frequency: the target is copied at every update")
def dqn_without_target_network():
    rows = [{"target copied every": f"{steps} agent steps", **dqn_runs(target_update_frequency=steps)}
            for steps in (500, 10)]
    return rows


@answer("dqn_without_target_network")
def _dqn_without_target_network(rows):
    with_target, without = rows[0]["eval_return_mean"], rows[1]["eval_return_mean"]
    return (f"after 50,000 steps the final policy scored {shown(with_target)} with the target network and {shown(without)} "
            f"without it (mean of three seeds, ten episodes each; CartPole's maximum is 500): "
            + ("removing it cost return here." if without < with_target else
               "removing it did not lower the return here; the per-seed scores show how much the runs spread."))


@experiment("01", "How small can the replay buffer be?", "DQNConfig(buffer_size=500)")
def dqn_replay_buffer_size():
    rows = [{"buffer_size": size, **dqn_runs(buffer_size=size)} for size in (500, 10_000, 50_000)]
    return rows


@answer("dqn_replay_buffer_size")
def _dqn_replay_buffer_size(rows):
    best = max(rows, key=lambda row: row["eval_return_mean"])
    means = [row["eval_return_mean"] for row in rows]
    spread = max(max(row["eval_return_per_seed"]) - min(row["eval_return_per_seed"]) for row in rows)
    return (", ".join(f"a buffer of {row['buffer_size']:,} transitions scored {shown(row['eval_return_mean'])}"
                      for row in rows)
            + f" (three seeds, 50,000 steps); the highest mean here was with {best['buffer_size']:,}. A buffer of "
            "500 holds only the last 500 transitions. "
            + (f"The seeds of one setting spread over up to {shown(spread)}, more than the means differ "
               f"({shown(max(means) - min(means))}): at three seeds this ranking is not one to rely on."
               if spread > max(means) - min(means) else
               f"The means differ by {shown(max(means) - min(means))}, more than the seeds of any one setting spread "
               f"({shown(spread)})."))


# ---------------------------------------------------------------------------------------------
# Lesson 02: Flax NNX


@experiment("02", "What does nnx.jit cost per call beside jax.jit on the split state, for a small and a large network?",
            "graphdef, state = nnx.split(model); jax.jit(lambda s, x: nnx.merge(graphdef, s)(x))")
def nnx_jit_call_overhead():
    import jax
    import jax.numpy as jnp
    from flax import nnx

    class MLP(nnx.Module):
        def __init__(self, width: int, rngs: nnx.Rngs):
            self.hidden = nnx.Linear(4, width, rngs=rngs)
            self.out = nnx.Linear(width, 2, rngs=rngs)

        def __call__(self, x):
            return self.out(jax.nn.relu(self.hidden(x)))

    rows = []
    x = jnp.ones((32, 4))
    for width in (64, 4096):
        model = MLP(width, nnx.Rngs(0))
        graphdef, state = nnx.split(model)
        functional = jax.jit(lambda s, x: nnx.merge(graphdef, s)(x))
        through_nnx = nnx.jit(lambda m, x: m(x))
        nnx_s, jax_s = seconds_of(lambda: through_nnx(model, x), 200), seconds_of(lambda: functional(state, x), 200)
        rows.append({"width": width, "nnx.jit_us": round(nnx_s * 1e6, 1), "jax.jit_us": round(jax_s * 1e6, 1),
                     "extra_us": round((nnx_s - jax_s) * 1e6, 1)})
    return rows


@answer("nnx_jit_call_overhead")
def _nnx_jit_call_overhead(rows):
    small, large = rows[0]["extra_us"], rows[1]["extra_us"]
    return (f"nnx.jit took {shown(small)} microseconds more a call than jax.jit on the split state at width "
            f"{rows[0]['width']}, and {shown(large)} more at width {rows[1]['width']}"
            + (": about the same at both widths here, so the extra time was per call, not per FLOP."
               if small > 0 and 0.5 <= large / small <= 2 else "."))


@experiment("02", "Adam against plain SGD at the same learning rate, fitting the Q-network to fixed targets",
            "nnx.Optimizer(model, optax.sgd(1e-3), wrt=nnx.Param)")
def nnx_optimizer_choice():
    import jax
    import jax.numpy as jnp
    import optax
    from flax import nnx

    def make(seed):
        return nnx.Sequential(nnx.Linear(4, 120, rngs=nnx.Rngs(seed)), jax.nn.relu,
                              nnx.Linear(120, 84, rngs=nnx.Rngs(seed + 1)), jax.nn.relu, nnx.Linear(84, 2, rngs=nnx.Rngs(seed + 2)))

    teacher = make(10)
    x = jax.random.normal(jax.random.key(0), (512, 4))
    y = teacher(x)  # targets a network of this shape can fit exactly
    rows = []
    for name, tx in (("adam", optax.adam(1e-3)), ("sgd", optax.sgd(1e-3))):
        model = make(0)
        optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)

        @nnx.jit
        def step(model, optimizer):
            loss, grads = nnx.value_and_grad(lambda m: jnp.mean((m(x) - y) ** 2))(model)
            optimizer.update(model, grads)
            return loss

        losses = [float(step(model, optimizer)) for _ in range(500)]
        rows.append({"optimizer": name, "loss_at_start": round(losses[0], 4), "loss_after_500_steps": round(losses[-1], 5)})
    return rows


@answer("nnx_optimizer_choice")
def _nnx_optimizer_choice(rows):
    adam, sgd = rows[0]["loss_after_500_steps"], rows[1]["loss_after_500_steps"]
    return (f"after 500 full-batch steps at learning rate 0.001 Adam's loss was {shown(adam)} and SGD's {shown(sgd)} "
            f"({'Adam lower' if adam < sgd else 'SGD lower'}, {max(adam, sgd) / max(min(adam, sgd), 1e-12):.0f}x). Adam "
            "divides each parameter's step by a running average of its gradient's size {cite:p}`kingma2015adam`; "
            "plain SGD steps by the gradient itself.")


# ---------------------------------------------------------------------------------------------
# Lesson 03: jit, scan and vmap


@experiment("03", "What does each extra seed cost in one vmapped call?",
            "jax.jit(jax.vmap(train))(jax.random.split(key, 32))")
def seeds_in_one_vmap():
    rows = []
    for seeds in (1, 8, 32):
        found = dqn_runs(seeds=seeds, total_steps=20_000, learning_starts=1_000)
        rows.append({"seeds": seeds, "run_s": found["run_s"], "s_per_seed": round(found["run_s"] / seeds, 3)})
    return rows


@answer("seeds_in_one_vmap")
def _seeds_in_one_vmap(rows):
    return (f"one seed took {shown(rows[0]['run_s'])} s, 8 seeds {shown(rows[1]['run_s'])} s and 32 seeds "
            f"{shown(rows[2]['run_s'])} s in one call (20,000 steps each, compile apart): {shown(rows[2]['s_per_seed'])} s "
            f"a seed at 32 against {shown(rows[0]['s_per_seed'])} s alone. In one vmapped call the seeds run as one program: one dispatch and "
            "one loop for all of them.")


@experiment("03", "Ten envs a step instead of one, at the same number of env steps",
            "DQNConfig(num_envs=10)  # train_frequency 10: one update per vector step")
def dqn_envs_per_step():
    rows = [{"num_envs": envs, **dqn_runs(num_envs=envs)} for envs in (1, 10)]
    return rows


@answer("dqn_envs_per_step")
def _dqn_envs_per_step(rows):
    one, ten = rows
    return (f"50,000 env steps took {shown(one['run_s'])} s with one env and {shown(ten['run_s'])} s with ten "
            f"({one['run_s'] / ten['run_s']:.1f}x as fast), scoring {shown(one['eval_return_mean'])} and "
            f"{shown(ten['eval_return_mean'])}: the same updates per env step, a tenth of the sequential steps.")


# ---------------------------------------------------------------------------------------------
# Lesson 04: many devices in one process (8 CPU devices)


def data_parallel_setup(num_devices: int):
    import jax
    import jax.numpy as jnp

    from labcore.agents.dqn import core as dqn
    from labcore.agents.dqn import data_parallel as parallel
    from labcore.nets.q_networks import make_q_network

    config = dqn.DQNConfig()
    network = make_q_network("mlp", 2, config.hidden_sizes)
    optimizer = dqn.make_optimizer(config)
    state = dqn.init_train_state(config, network, optimizer, jnp.zeros(4), jax.random.key(0))
    keys = jax.random.split(jax.random.key(1), 3)
    batch = dqn.Transition(jax.random.normal(keys[0], (128, 4)), jax.random.randint(keys[1], (128,), 0, 2),
                           jnp.ones(128), jax.random.normal(keys[2], (128, 4)), jnp.zeros(128, bool))
    update = jax.pmap(dqn.make_update(config, network, optimizer, axis_name="devices"), axis_name="devices",
                      devices=jax.devices()[:num_devices])
    return (update, parallel.replicate(state, num_devices), parallel.shard_batch(batch, num_devices),
            jax.jit(dqn.make_update(config, network, optimizer)), state, batch)


@experiment("04", "Does one update over 8 devices equal the same update on one?",
            "jax.pmap(make_update(config, network, optimizer, axis_name='devices'), axis_name='devices')")
def data_parallel_equals_one_device():
    import jax
    import numpy as np

    rows = []
    with jax.default_matmul_precision("highest"):
        for devices in (2, 8):
            update, states, batches, single, state, batch = data_parallel_setup(devices)
            (many, _), (one, _) = update(states, batches), single(state, batch)
            gap = max(float(np.max(np.abs(np.asarray(a)[0] - np.asarray(b))))
                      for a, b in zip(jax.tree_util.tree_leaves(many.params), jax.tree_util.tree_leaves(one.params)))
            rows.append({"devices": devices, "max_abs_difference_of_parameters": f"{gap:.1e}"})
    return rows


@answer("data_parallel_equals_one_device")
def _data_parallel_equals_one_device(rows):
    return ("the parameters after one data-parallel update (global batch 128, a gradient mean over the devices) "
            f"differed from the one-device update's by at most {rows[-1]['max_abs_difference_of_parameters']} "
            "over 8 devices, a difference of float32 rounding's size: a mean of per-device means adds the same "
            "numbers in another order than one mean over the batch.")


@experiment("04", "Do 8 CPU devices make the update faster?",
            "the same update on 1, 2, 4 and 8 of the 8 CPU devices")
def cpu_devices_share_the_cores():
    rows = []
    for devices in (1, 2, 4, 8):
        update, states, batches, *_ = data_parallel_setup(devices)
        seconds = seconds_of(lambda: update(states, batches), 100)
        rows.append({"devices": devices, "update_ms": round(seconds * 1e3, 3), "updates_per_s": round(1 / seconds)})
    return rows


@answer("cpu_devices_share_the_cores")
def _cpu_devices_share_the_cores(rows):
    return (f"one update took {shown(rows[0]['update_ms'])} ms on one device and {shown(rows[-1]['update_ms'])} ms on eight. "
            "The 8 CPU devices (`--xla_force_host_platform_device_count=8`) share this machine's cores, so "
            "splitting the batch over them adds no cores; "
            + ("here it made the update slower. " if rows[-1]["update_ms"] > rows[0]["update_ms"] else
               "here it did not make the update slower. ")
            + "Not measured on 8 GPUs or TPU cores.")


# ---------------------------------------------------------------------------------------------
# Lesson 05: actors and a learner on Ray (one Ray on this machine)


def actor_learner_run(**options) -> dict:
    from labcore.agents.dqn import actor_learner
    from labcore.agents.dqn import core as dqn

    config = dqn.DQNConfig(env_id="CartPole-v1", total_steps=30_000, learning_starts=1000, buffer_size=10_000,
                           exploration_fraction=0.3, train_frequency=4)
    summary = actor_learner.train(config, log_every=250, tensorboard=False, timeout_s=600, progress=False, **options).summary
    return {"mean_staleness": round(summary["mean_staleness"], 1),
            "actor_steps_per_s": round(summary["steps_per_second"]),  # all actors together
            "learner_updates_per_s": round(summary["learner_updates_per_second"]),
            "eval_return_mean": round(summary["eval_return_mean"], 1)}


@experiment("05", "How stale is the actors' data when the learner broadcasts every update, or every 50?",
            "dqn_actor_learner.train(config, num_actors=2, broadcast_every=50)")
def broadcast_every():
    rows = [{"broadcast_every": every, **actor_learner_run(num_actors=2, broadcast_every=every)} for every in (1, 50)]
    return rows


@answer("broadcast_every")
def _broadcast_every(rows):
    return (f"broadcasting every update gave a mean staleness of {shown(rows[0]['mean_staleness'])} updates, every 50 "
            f"updates {shown(rows[1]['mean_staleness'])}; the learner made {shown(rows[0]['learner_updates_per_s'])} and "
            f"{shown(rows[1]['learner_updates_per_s'])} updates/s.")


@experiment("05", "One actor or two?", "dqn_actor_learner.train(config, num_actors=1)")
def number_of_actors():
    rows = [{"num_actors": actors, **actor_learner_run(num_actors=actors, broadcast_every=10)} for actors in (1, 2)]
    return rows


@answer("number_of_actors")
def _number_of_actors(rows):
    return (f"one actor stepped {shown(rows[0]['actor_steps_per_s'])} env steps/s, two together "
            f"{shown(rows[1]['actor_steps_per_s'])} (on this machine's cores, which the learner shares).")


# ---------------------------------------------------------------------------------------------
# Lesson 06: the IQN port (jax_fused, the lesson's small learning setting, two worlds)


def iqn_run(**overrides) -> dict:
    import numpy as np

    from labcore.agents.iqn import run as iqn
    from labcore.agents.iqn.run_config import IQNRunConfig

    learn = dict(height=8, width=8, n_agents=3, vision_radius=1, spawn_prob=0.02, max_turns=20, n_frames=2,
                 hidden_size=32, n_quantiles=8, n_tau_act=32, buffer_size=512, batch_size=64, learning_rate=1e-2,
                 gamma=0.5, target_sync_epochs=10, target_update_rate=0.01, epsilon_decay=0.01, epsilon_end=0.1)
    started = time.perf_counter()
    run = iqn.train(IQNRunConfig(mode="jax_fused", num_worlds=2, epochs=300, **{**learn, **overrides}), log_every=1,
                    evaluate=False, progress=False, tensorboard=False)
    gems = np.array([row["gems"] for row in run.metrics])
    return {"gems_first_50_epochs": round(float(gems[:50].mean()), 2), "gems_last_50_epochs": round(float(gems[-50:].mean()), 2),
            "run_s": round(time.perf_counter() - started, 1)}


@experiment("06", "A discount of 0.9 instead of this lesson's 0.5", "IQNRunConfig(..., gamma=0.9)")
def iqn_discount():
    rows = [{"gamma": gamma, **iqn_run(gamma=gamma)} for gamma in (0.5, 0.9)]
    return rows


@answer("iqn_discount")
def _iqn_discount(rows):
    return (f"gems per epoch went from {shown(rows[0]['gems_first_50_epochs'])} to {shown(rows[0]['gems_last_50_epochs'])} "
            f"with gamma 0.5, this lesson's setting for its small world, and from {shown(rows[1]['gems_first_50_epochs'])} "
            f"to {shown(rows[1]['gems_last_50_epochs'])} with 0.9 (300 epochs, two worlds, three agents each). Both are this "
            "lesson's choices: the port's default, as in the original iRainbow code, is 0.99 "
            "({py:class}`~labcore.agents.iqn.config.IQNConfig`).")


@experiment("06", "Fewer or more quantile samples when acting", "IQNRunConfig(..., n_tau_act=8)")
def iqn_acting_taus():
    rows = [{"n_tau_act": taus, **iqn_run(n_tau_act=taus)} for taus in (8, 32, 128)]
    return rows


@answer("iqn_acting_taus")
def _iqn_acting_taus(rows):
    return (", ".join(f"{row['n_tau_act']} samples: {shown(row['gems_last_50_epochs'])} gems an epoch at the end, "
                      f"{shown(row['run_s'])} s" for row in rows)
            + " (times include compiling). The acting samples estimate each action's mean return from sampled "
            "quantiles: more samples, a less noisy estimate, and more network evaluations a turn.")


# ---------------------------------------------------------------------------------------------
# Lesson 07: action-masked PPO


def ppo_runs(config, seeds: int) -> dict:
    import jax
    import numpy as np

    from labcore.agents.ppo import core as ppo

    agent = ppo.make_ppo(config)
    keys = jax.random.split(jax.random.key(0), seeds)
    started = time.perf_counter()
    runners, metrics = jax.block_until_ready(jax.jit(jax.vmap(agent.train))(keys))
    wall = time.perf_counter() - started
    greedy = jax.jit(jax.vmap(lambda p, k: ppo.policy_returns(agent, p, k, 64)))(runners.params, keys)
    final = np.nanmean(np.asarray(metrics["episode_return"])[:, -5:], axis=1)
    return {"training_return_at_end": round(float(final.mean()), 2), "greedy_return": round(float(np.mean(greedy)), 2),
            "run_s": round(wall, 1)}


@experiment("07", "PPO's entropy coefficient 0.01 against 0.1 on Vault", "PPOConfig(ent_coef=0.01)")
def ppo_entropy_on_vault():
    from labcore.agents.ppo import core as ppo

    rows = [{"ent_coef": coef, **ppo_runs(ppo.PPOConfig(num_envs=64, hidden_size=128, total_steps=200_000, ent_coef=coef), 2)}
            for coef in (0.01, 0.1)]
    return rows


@answer("ppo_entropy_on_vault")
def _ppo_entropy_on_vault(rows):
    return (f"at 200,000 steps (two seeds) the greedy policy returned {shown(rows[0]['greedy_return'])} with 0.01 and "
            f"{shown(rows[1]['greedy_return'])} with 0.1; the training return (sampled actions) ended at "
            f"{shown(rows[0]['training_return_at_end'])} and {shown(rows[1]['training_return_at_end'])}.")


@experiment("07", "GAE's lambda: 0 (one-step), 0.95, 1 (Monte Carlo) on CartPole", "PPOConfig.cartpole(gae_lambda=0.0)")
def ppo_gae_lambda():
    from labcore.agents.ppo import core as ppo

    rows = [{"gae_lambda": lam, **ppo_runs(ppo.PPOConfig.cartpole(total_steps=100_000, gae_lambda=lam), 4)}
            for lam in (0.0, 0.95, 1.0)]
    return rows


@answer("ppo_gae_lambda")
def _ppo_gae_lambda(rows):
    best = max(rows, key=lambda row: row["training_return_at_end"])
    return (", ".join(f"lambda {shown(row['gae_lambda'])}: {shown(row['training_return_at_end'])}" for row in rows)
            + f" (training return at 100,000 steps, four seeds); {shown(best['gae_lambda'])} was best here. Lambda "
            "trades the bias of bootstrapping from the critic against the variance of whole returns "
            "{cite:p}`schulman2016high`.")


# ---------------------------------------------------------------------------------------------
# Lesson 08: accelerators (on this machine's device)


@experiment("08", "How exact is a float32 matmul at each precision, and a bfloat16 one?",
            "with jax.default_matmul_precision('highest'): ...")
def matmul_precision():
    import jax
    import jax.numpy as jnp
    import numpy as np

    a = np.random.default_rng(0).standard_normal((512, 512))
    b = np.random.default_rng(1).standard_normal((512, 512))
    exact = a @ b  # float64, NumPy

    def relative_error(product) -> str:
        return f"{np.max(np.abs(np.asarray(product, np.float64) - exact)) / np.max(np.abs(exact)):.1e}"

    a32, b32 = jnp.asarray(a, jnp.float32), jnp.asarray(b, jnp.float32)
    rows = [{"matmul": "float32, default precision", "max_relative_error": relative_error(a32 @ b32)}]
    with jax.default_matmul_precision("highest"):
        rows.append({"matmul": "float32, highest precision", "max_relative_error": relative_error(a32 @ b32)})
    rows.append({"matmul": "bfloat16 inputs", "max_relative_error":
                 relative_error(a32.astype(jnp.bfloat16) @ b32.astype(jnp.bfloat16))})
    return rows


@answer("matmul_precision")
def _matmul_precision(rows):
    return (f"on the machine above the default and highest float32 precisions gave "
            f"{rows[0]['max_relative_error']} and {rows[1]['max_relative_error']}, bfloat16 inputs "
            f"{rows[2]['max_relative_error']}. On a TPU (bfloat16 passes) and on NVIDIA Ampere or newer GPUs (TF32) "
            "the default is not the highest precision; on a CPU and on NVIDIA GPUs before Ampere, Colab's T4 "
            "included, it is full float32 (lesson 08, section 4): run it on a TPU or an Ampere GPU and compare.")


@experiment("08", "PPO on CartPole in bfloat16 compute", "PPOConfig.cartpole(compute_dtype='bfloat16')")
def bfloat16_ppo():
    from labcore.agents.ppo import core as ppo

    rows = [{"compute_dtype": dtype, **ppo_runs(ppo.PPOConfig.cartpole(total_steps=100_000, compute_dtype=dtype), 2)}
            for dtype in ("float32", "bfloat16")]
    return rows


@answer("bfloat16_ppo")
def _bfloat16_ppo(rows):
    return (f"float32 ended at a training return of {shown(rows[0]['training_return_at_end'])} in "
            f"{shown(rows[0]['run_s'])} s, bfloat16 at {shown(rows[1]['training_return_at_end'])} in {shown(rows[1]['run_s'])} s (100,000 steps, two seeds). "
            "These times are this machine's; lesson 08 measures bfloat16's speed on the device it runs on. The "
            "question here is whether PPO still learns.")


# ---------------------------------------------------------------------------------------------
# Lesson 09: GFlowNets (the jitted trainer, trajectory balance, HyperGrid 8x8)


def gflownet_runs(seeds: int = 3, **overrides) -> dict:
    import jax
    import numpy as np

    from labcore.agents.gflownet import core as gflownet
    from labcore.agents.gflownet.core import GFlowNetConfig

    config = GFlowNetConfig(**{**dict(loss="tb", trainer="jax", batch_size=16, iterations=1_000), **overrides})
    _, metrics = jax.block_until_ready(
        jax.jit(jax.vmap(gflownet.make_train(config)))(jax.random.split(jax.random.key(42), seeds)))
    finals = [gflownet.l1_curve(config, np.asarray(t), 100)[-1][1] for t in metrics["terminals"]]
    return {"final_l1_per_seed": [round(float(x), 3) for x in finals], "final_l1_mean": round(float(np.mean(finals)), 3)}


@experiment("09", "A little random exploration while sampling", "GFlowNetConfig(exploration_epsilon=0.1)")
def gflownet_exploration():
    rows = [{"exploration_epsilon": eps, **gflownet_runs(exploration_epsilon=eps)} for eps in (0.0, 0.1)]
    return rows


@answer("gflownet_exploration")
def _gflownet_exploration(rows):
    return (f"after 1,000 iterations the L1 distance to the target distribution was {shown(rows[0]['final_l1_mean'])} "
            f"without exploration and {shown(rows[1]['final_l1_mean'])} with epsilon 0.1 (three seeds; lower is better). "
            "The L1 is measured on the training samples themselves, which with epsilon 0.1 include the random "
            "actions' samples; whether exploration found more of the target's modes was not measured.")


@experiment("09", "A uniform backward policy instead of a learned one", "GFlowNetConfig(uniform_backward=True)")
def gflownet_uniform_backward():
    rows = [{"uniform_backward": uniform, **gflownet_runs(uniform_backward=uniform)} for uniform in (False, True)]
    return rows


@answer("gflownet_uniform_backward")
def _gflownet_uniform_backward(rows):
    return (f"L1 after 1,000 iterations: {shown(rows[0]['final_l1_mean'])} with a learned P_B, {shown(rows[1]['final_l1_mean'])} "
            "with a uniform one (three seeds).")


# ---------------------------------------------------------------------------------------------
# Lesson 10: debugging


def jitted_dqn_update():
    """A jitted DQN update on a fixed batch, as a call that returns the new parameters."""
    *_, single, state, batch = data_parallel_setup(1)
    return lambda: single(state, batch)[0].params


@experiment("10", "What does jax_debug_nans cost?", "jax.config.update('jax_debug_nans', True)")
def debug_nans_cost():
    import jax

    call = jitted_dqn_update()
    rows = []
    for on in (False, True):
        jax.config.update("jax_debug_nans", on)
        rows.append({"jax_debug_nans": on, "update_ms": round(seconds_of(call, 200) * 1e3, 3)})
    jax.config.update("jax_debug_nans", False)
    return rows


@answer("debug_nans_cost")
def _debug_nans_cost(rows):
    return (f"a jitted DQN update took {shown(rows[0]['update_ms'])} ms with the check off and {shown(rows[1]['update_ms'])} ms "
            "with it on. Under jit the flag checks the outputs of each jitted call, and only when one holds a NaN "
            "runs the function again op by op to find the operation that made it "
            "([JAX debugging flags](https://docs.jax.dev/en/latest/debugging/flags.html)).")


@experiment("10", "What does a host callback inside a scan cost?", "jax.debug.callback(record, x) inside the scanned step")
def debug_callback_cost():
    import jax
    import jax.numpy as jnp

    seen = []

    def make(with_callback: bool):
        def step(x, _):
            x = jnp.tanh(x * 1.01 + 0.1)
            if with_callback:
                jax.debug.callback(lambda v: seen.append(float(v)), x[0])
            return x, None

        return jax.jit(lambda x: jax.lax.scan(step, x, None, length=1_000)[0])

    x = jnp.ones(64)
    rows = [{"callback": on, "scan_of_1000_steps_ms": round(seconds_of(lambda: make(on)(x), 5) * 1e3, 2)}
            for on in (False, True)]
    return rows


@answer("debug_callback_cost")
def _debug_callback_cost(rows):
    return (f"a 1,000-step scan took {shown(rows[0]['scan_of_1000_steps_ms'])} ms, and {shown(rows[1]['scan_of_1000_steps_ms'])} "
            "ms with a callback at every step, each a call from the compiled program into Python and back.")


# ---------------------------------------------------------------------------------------------
# Lesson 11: profiling


@experiment("11", "Timing without block_until_ready", "time_call(fn, block=False)")
def timing_without_blocking():
    import jax

    from labcore.tools.benchmarking import time_call

    a = jax.random.normal(jax.random.key(0), (1024, 1024))
    matmul = jax.jit(lambda a: a @ a @ a)
    rows = [{"block_until_ready": block, "median_ms": round(time_call(matmul, a, repeats=20, block=block).median_s * 1e3, 3)}
            for block in (True, False)]
    return rows


@answer("timing_without_blocking")
def _timing_without_blocking(rows):
    return (f"the same jitted call measured {shown(rows[0]['median_ms'])} ms waited for and {shown(rows[1]['median_ms'])} ms not: "
            "JAX returns from a call once the work is queued "
            "([asynchronous dispatch](https://docs.jax.dev/en/latest/async_dispatch.html)), so without the wait "
            "the clock stops there.")


METRICS_STEPS = 200_000  # PPO's env steps in the metrics-callback experiment


@experiment("11", "Metrics sent to the host at every update, or never", "ppo.make_train(config, callback=on_metrics, log_every=1)")
def metrics_callback_cost():
    import jax

    from labcore.agents.ppo import core as ppo

    config = ppo.PPOConfig.cartpole(total_steps=METRICS_STEPS)
    rows = []
    for name, options in (("none", {}), ("every update", dict(callback=lambda metrics: None, log_every=1))):
        train = jax.jit(ppo.make_train(config, **options))
        compiled = train.lower(jax.random.key(0)).compile()
        run_s = seconds_of(lambda: compiled(jax.random.key(0)), 3)
        rows.append({"metrics callback": name, "run_s": round(run_s, 2), "steps_per_s": round(config.total_steps / run_s)})
    return rows


@answer("metrics_callback_cost")
def _metrics_callback_cost(rows):
    from labcore.agents.ppo import core as ppo

    updates = ppo.PPOConfig.cartpole(total_steps=METRICS_STEPS).num_updates
    ratio = rows[1]["steps_per_s"] / rows[0]["steps_per_s"]
    return (f"PPO on CartPole ran {shown(rows[0]['steps_per_s'])} steps/s without the callback and "
            f"{shown(rows[1]['steps_per_s'])} with one at each of its {updates} updates ({ratio:.2f}x). "
            + (f"The callback cost {1 - ratio:.0%} here; " if ratio < 0.95 else
               "That is within 5%, which one timing of each does not tell apart from run-to-run variation; "
               if ratio <= 1.05 else
               "The run with the callback was the faster one here: on a 2-core CPU a change to the compiled "
               "loop can move its speed either way (the [PPO results](ppo.md) record such cases), so the "
               "callback's own cost does not show; ")
            + "on an NVIDIA H200 the [PPO results](ppo.md#on-a-gpu) time the metrics callback alone.")


# ---------------------------------------------------------------------------------------------
# Lesson 12: PQN


def pqn_runs(seeds: int = 3, **overrides) -> dict:
    import jax
    import numpy as np

    from labcore.agents.pqn import core as pqn

    config = pqn.PQNConfig.cartpole(**{"total_steps": 200_000, **overrides})
    agent = pqn.make_pqn(config)
    keys = jax.random.split(jax.random.key(0), seeds)
    started = time.perf_counter()
    runners, metrics = jax.block_until_ready(jax.jit(jax.vmap(agent.train))(keys))
    wall = time.perf_counter() - started
    greedy = np.asarray(jax.jit(jax.vmap(agent.evaluate))(runners.params, jax.random.split(jax.random.key(1), seeds)))
    return {"updates": config.num_updates, "greedy_return": round(float(greedy.mean()), 1), "run_s": round(wall, 1)}


@experiment("12", "PQN with 1, 16 and 128 envs at the same env steps", "PQNConfig.cartpole(num_envs=1)")
def pqn_number_of_envs():
    rows = [{"num_envs": envs, **pqn_runs(num_envs=envs)} for envs in (1, 16, 128)]
    return rows


@answer("pqn_number_of_envs")
def _pqn_number_of_envs(rows):
    return (", ".join(f"{row['num_envs']} env{'s' if row['num_envs'] > 1 else ''}: greedy return "
                      f"{shown(row['greedy_return'])} in {shown(row['run_s'])} s" for row in rows)
            + " (200,000 steps, three seeds, compile included). At equal env steps more envs mean fewer updates ("
            + ", ".join(f"{row['updates']:,}" for row in rows) + " here), each on a batch drawn from more envs.")


@experiment("12", "Q(lambda) with lambda 0, 0.65 and 0.95", "PQNConfig.cartpole(q_lambda=0.0)")
def pqn_lambda():
    rows = [{"q_lambda": lam, **pqn_runs(q_lambda=lam)} for lam in (0.0, 0.65, 0.95)]
    return rows


@answer("pqn_lambda")
def _pqn_lambda(rows):
    return (", ".join(f"lambda {shown(row['q_lambda'])}: {shown(row['greedy_return'])}" for row in rows)
            + " (greedy return after 200,000 steps, three seeds).")


def run_lesson(lesson: str) -> dict:
    found = {}
    for exp in (e for e in EXPERIMENTS if e.lesson == lesson):
        started = time.perf_counter()
        rows = exp.run()
        seconds = time.perf_counter() - started
        written = ANSWERS[exp.name](rows)
        found[exp.name] = {"question": exp.question, "change": exp.change, "rows": rows, "answer": written,
                           "seconds": round(seconds, 1)}
        print(f"[{lesson}] {exp.name} ({seconds:.0f} s): {written}", flush=True)
    return found


def anchor(lesson: str) -> str:
    """The id the site gives a lesson's section of the page (MyST's heading anchors)."""
    import re

    return re.sub(r"\s+", "-", re.sub(r"[^a-z0-9 -]", "", f"lesson {lesson}: {LESSONS[lesson]}".lower()).strip())


def render(records: dict) -> str:
    """The results page from the records: under each experiment, the command, date, machine (with its
    JAX version) and time of the run just above its table, then the answer written from the rows."""
    from labcore.tools.benchmarking import markdown_table

    registered = {exp.name: exp for exp in EXPERIMENTS}
    extra = "; ".join(f"lesson {lesson} also `{flags}`" for lesson, flags in sorted(EXTRA_FLAGS.items()))
    lines = ["# Try it: what happens", "",
             "Each lesson ends with experiments to try. Here is what happened when they were run, measured by "
             "`python benchmarks/try_it.py` (each lesson in a fresh process, whose `XLA_FLAGS` the script sets to "
             f"include `{CPU_FLAGS}` for every lesson; {extra}). Above each table: the command, the "
             "date, the time the experiment took and the machine (its CPU, accelerator, Python and JAX). Your "
             "numbers will differ in their digits, and on another machine in their speeds; the answers say what "
             "held in these runs.", ""]
    for lesson in sorted(records):
        record = records[lesson]
        lines += [f"## Lesson {lesson}: {LESSONS[lesson]}", ""]
        for name, found in record["experiments"].items():
            exp = registered.get(name)
            question, change = (exp.question, exp.change) if exp else (found["question"], found["change"])
            written = ANSWERS[name](found["rows"]) if name in ANSWERS else found["answer"]
            seconds = f"{found['seconds']:.{1 if found['seconds'] < 10 else 0}f}"
            lines += [f"### {question}", "", f"Change: `{change}`", "",
                      f"Measured by `python benchmarks/try_it.py --lessons {lesson}` on {record['date']}, "
                      f"in {seconds} s, on {record['machine']}:", "",
                      markdown_table(found["rows"]), "", f"**What happens:** {written}", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lessons", nargs="*", default=sorted(LESSONS), choices=sorted(LESSONS))
    parser.add_argument("--page", type=Path, help="write the results page (markdown) here, from every record")
    parser.add_argument("--results", type=Path, default=RESULTS, help=f"the records (default {RESULTS.relative_to(REPO_ROOT)})")
    parser.add_argument("--render-only", action="store_true", help="write --page from the records, running nothing")
    parser.add_argument("--in-process", help=argparse.SUPPRESS)  # one lesson, in this process: JSON to this file
    args = parser.parse_args()
    if args.in_process:
        lesson, out = args.in_process.split(":", 1)
        Path(out).write_text(json.dumps({"experiments": run_lesson(lesson), "machine": executed.machine(),
                                         "date": time.strftime("%Y-%m-%d")}))
        return
    records = json.loads(args.results.read_text()) if args.results.exists() else {}
    for lesson in ([] if args.render_only else args.lessons):
        flags = " ".join(filter(None, [os.environ.get("XLA_FLAGS", ""), CPU_FLAGS, EXTRA_FLAGS.get(lesson, "")]))
        with tempfile.TemporaryDirectory() as scratch:
            out = Path(scratch) / "lesson.json"
            subprocess.run([sys.executable, __file__, "--in-process", f"{lesson}:{out}"], check=True, cwd=scratch,
                           env={**os.environ, "XLA_FLAGS": flags})
            records[lesson] = json.loads(out.read_text())
        args.results.parent.mkdir(parents=True, exist_ok=True)
        args.results.write_text(json.dumps(records, indent=1) + "\n")
    if args.page:
        args.page.write_text(render(records))
        print(f"wrote {args.page}")


if __name__ == "__main__":
    main()
