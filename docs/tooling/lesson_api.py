"""The API a learner of each lesson needs one click away, for the header of each lesson page.

``LESSON_API[stem]`` lists ``(label, dotted.path, role)`` for the notebook ``notebooks/<stem>.ipynb``:
``role`` is the Python-domain role that links it (``class``, ``func`` or ``mod``), and
``docs/tooling/lessons.py`` writes each entry as ``{py:<role>}`<label> <dotted.path>```. Each
algorithm's lesson lists its config class, its pure trainer (or update), its driver (results
folder, checkpoints, resume), its checkpoint loader where it has one, and its evaluation, then the
modules the lesson teaches with; lessons 00, 08 and 10 list the modules they teach.

A path is the object's home, the module that defines it (where the API reference documents it),
not a module that re-exports it: ``labcore.course.exercises.checking.check``, not
``labcore.course.exercises.check``. ``python docs/tooling/lesson_api.py`` (and ``check()``) imports
every path and fails on one that does not resolve, is not where the path says it is defined, or
is not of its role.
"""

from __future__ import annotations

import inspect
import pathlib
import pkgutil
import sys
from typing import Any

LESSON_API: dict[str, list[tuple[str, str, str]]] = {
    "00_jax_primitives": [
        ("labcore.devices", "labcore.devices", "mod"),
        ("devices.report", "labcore.devices.report", "func"),
        ("labcore.tools.doctor", "labcore.tools.doctor", "mod"),
        ("benchmarking.time_call", "labcore.tools.benchmarking.time_call", "func"),
        ("labcore.compile_cache", "labcore.compile_cache", "mod"),
        ("labcore.course.primitives", "labcore.course.primitives", "mod"),
        ("labcore.budget", "labcore.budget", "func"),
        ("exercises.check", "labcore.course.exercises.checking.check", "func"),
    ],
    "01_haiku_dqn": [
        ("DQNConfig", "labcore.agents.dqn.config.DQNConfig", "class"),
        ("dqn.core.make_update", "labcore.agents.dqn.core.make_update", "func"),
        ("dqn.core.select_action", "labcore.agents.dqn.core.select_action", "func"),
        ("dqn.host_loop.train", "labcore.agents.dqn.host_loop.train", "func"),
        ("dqn.host_loop.load_checkpoint", "labcore.agents.dqn.host_loop.load_checkpoint", "func"),
        ("dqn.host_loop.play", "labcore.agents.dqn.host_loop.play", "func"),
        ("dqn.host_loop.evaluate", "labcore.agents.dqn.host_loop.evaluate", "func"),
        ("make_q_network", "labcore.nets.q_networks.make_q_network", "func"),
        ("labcore.replay", "labcore.replay", "mod"),
        ("dqn.frame_replay", "labcore.agents.dqn.frame_replay", "mod"),
        ("AtariSettings", "labcore.envs.ale_vector.AtariSettings", "class"),
        ("losses.huber_loss", "labcore.losses.huber_loss", "func"),
        ("plot_metrics", "labcore.logging.plot_metrics", "func"),
    ],
    "02_flax_nnx": [
        ("nets.functional.Functional", "labcore.nets.functional.Functional", "class"),
        ("nets.actor_critic", "labcore.nets.actor_critic", "mod"),
        ("NoisyLinear", "labcore.nets.noisy.NoisyLinear", "class"),
        ("nets.q_networks", "labcore.nets.q_networks", "mod"),
    ],
    "03_jit_scan_vmap": [
        ("DQNConfig", "labcore.agents.dqn.config.DQNConfig", "class"),
        ("dqn.scan.make_train", "labcore.agents.dqn.scan.make_train", "func"),
        ("dqn.scan.make_parts", "labcore.agents.dqn.scan.make_parts", "func"),
        ("dqn.host_loop.train", "labcore.agents.dqn.host_loop.train", "func"),
        ("dqn.host_loop.load_checkpoint", "labcore.agents.dqn.host_loop.load_checkpoint", "func"),
        ("dqn.scan.evaluate", "labcore.agents.dqn.scan.evaluate", "func"),
        ("dqn.scan.make_evaluate_run", "labcore.agents.dqn.scan.make_evaluate_run", "func"),
        ("dqn.scan.episode_return_curve", "labcore.agents.dqn.scan.episode_return_curve", "func"),
        ("envs.make_jax_env", "labcore.envs.make_jax_env", "func"),
        ("labcore.replay", "labcore.replay", "mod"),
        ("labcore.tools.introspection", "labcore.tools.introspection", "mod"),
        ("labcore.compile_cache", "labcore.compile_cache", "mod"),
    ],
    "04_many_devices": [
        ("DQNConfig", "labcore.agents.dqn.config.DQNConfig", "class"),
        ("dqn.core.make_update", "labcore.agents.dqn.core.make_update", "func"),
        ("dqn.data_parallel", "labcore.agents.dqn.data_parallel", "mod"),
        ("dqn.data_parallel.make_shard_map_update", "labcore.agents.dqn.data_parallel.make_shard_map_update", "func"),
    ],
    "05_many_processes": [
        ("DQNConfig", "labcore.agents.dqn.config.DQNConfig", "class"),
        ("dqn.multi_process.train", "labcore.agents.dqn.multi_process.train", "func"),
        ("dqn.actor_learner.train", "labcore.agents.dqn.actor_learner.train", "func"),
        ("checkpoint.restore", "labcore.checkpoint.restore", "func"),
        ("dqn.scan.make_evaluate", "labcore.agents.dqn.scan.make_evaluate", "func"),
        ("labcore.distributed", "labcore.distributed", "mod"),
        ("distributed.launch", "labcore.distributed.launch", "func"),
        ("labcore.ray_cluster", "labcore.ray_cluster", "mod"),
    ],
    "06_iqn_port": [
        ("IQNConfig", "labcore.agents.iqn.config.IQNConfig", "class"),
        ("IQNRunConfig", "labcore.agents.iqn.run_config.IQNRunConfig", "class"),
        ("iqn.core.train_step", "labcore.agents.iqn.core.train_step", "func"),
        ("iqn.programs.fused_epoch", "labcore.agents.iqn.programs.fused_epoch", "func"),
        ("iqn.run.train", "labcore.agents.iqn.run.train", "func"),
        ("iqn.run.load_checkpoint", "labcore.agents.iqn.run.load_checkpoint", "func"),
        ("iqn.run.evaluate", "labcore.agents.iqn.run.evaluate", "func"),
        ("iqn.frame_buffer", "labcore.agents.iqn.frame_buffer", "mod"),
        ("iqn.runners", "labcore.agents.iqn.runners", "mod"),
        ("nets.iqn.IQN", "labcore.nets.iqn.IQN", "class"),
        ("NoisyLinear", "labcore.nets.noisy.NoisyLinear", "class"),
        ("nets.functional.Functional", "labcore.nets.functional.Functional", "class"),
        ("envs.treasurehunt", "labcore.envs.treasurehunt", "mod"),
        ("torch_ref.irainbow", "labcore.torch_ref.irainbow", "mod"),
    ],
    "07_masked_ppo": [
        ("PPOConfig", "labcore.agents.ppo.config.PPOConfig", "class"),
        ("ppo.core.make_train", "labcore.agents.ppo.core.make_train", "func"),
        ("ppo.core.make_ppo", "labcore.agents.ppo.core.make_ppo", "func"),
        ("ppo.run.train", "labcore.agents.ppo.run.train", "func"),
        ("ppo.run.load_checkpoint", "labcore.agents.ppo.run.load_checkpoint", "func"),
        ("ppo.run.evaluate", "labcore.agents.ppo.run.evaluate", "func"),
        ("ppo.core.policy_returns", "labcore.agents.ppo.core.policy_returns", "func"),
        ("ppo.core.masked_policy", "labcore.agents.ppo.core.masked_policy", "func"),
        ("labcore.evaluation", "labcore.evaluation", "mod"),
        ("Vault", "labcore.envs.vault.Vault", "class"),
        ("envs.make_masked_env", "labcore.envs.make_masked_env", "func"),
        ("labcore.losses", "labcore.losses", "mod"),
        ("devices.auto_tune", "labcore.devices.auto_tune", "func"),
    ],
    "08_accelerators": [
        ("labcore.devices", "labcore.devices", "mod"),
        ("devices.auto_tune", "labcore.devices.auto_tune", "func"),
        ("devices.default_matmul_precision", "labcore.devices.default_matmul_precision", "func"),
        ("devices.matmul_error", "labcore.devices.matmul_error", "func"),
        ("labcore.tools.benchmarking", "labcore.tools.benchmarking", "mod"),
        ("introspection.compiled_cost", "labcore.tools.introspection.compiled_cost", "func"),
        ("labcore.compile_cache", "labcore.compile_cache", "mod"),
        ("dqn.data_parallel", "labcore.agents.dqn.data_parallel", "mod"),
        ("ActorCritic", "labcore.nets.actor_critic.ActorCritic", "class"),
    ],
    "09_gflownet_hybrid": [
        ("GFlowNetConfig", "labcore.agents.gflownet.config.GFlowNetConfig", "class"),
        ("gflownet.core.make_train", "labcore.agents.gflownet.core.make_train", "func"),
        ("gflownet.core.make_gradient_step", "labcore.agents.gflownet.core.make_gradient_step", "func"),
        ("gflownet.trainers.train", "labcore.agents.gflownet.trainers.train", "func"),
        ("gflownet.run.train", "labcore.agents.gflownet.run.train", "func"),
        ("hypergrid.l1_distance", "labcore.envs.hypergrid.l1_distance", "func"),
        ("hypergrid.l1_curve", "labcore.envs.hypergrid.l1_curve", "func"),
        ("hypergrid.target_distribution", "labcore.envs.hypergrid.target_distribution", "func"),
        ("gflownet.core", "labcore.agents.gflownet.core", "mod"),
        ("envs.hypergrid", "labcore.envs.hypergrid", "mod"),
        ("HyperGridEnv", "labcore.envs.hypergrid_env.HyperGridEnv", "class"),
        ("torch_ref.gflownet", "labcore.torch_ref.gflownet", "mod"),
    ],
    "10_debugging": [
        ("labcore.tools.introspection", "labcore.tools.introspection", "mod"),
        ("CompileCounter", "labcore.tools.introspection.CompileCounter", "class"),
        ("lessons.nb10_debugging.debugging_drills", "labcore.course.lessons.nb10_debugging.debugging_drills", "mod"),
    ],
    "11_profiling": [
        ("labcore.tools.profiling", "labcore.tools.profiling", "mod"),
        ("profiling.trace", "labcore.tools.profiling.trace", "func"),
        ("profiling.read_trace", "labcore.tools.profiling.read_trace", "func"),
        ("profiling.compile_and_run_seconds", "labcore.tools.profiling.compile_and_run_seconds", "func"),
        ("labcore.tools.memory_profile", "labcore.tools.memory_profile", "mod"),
        ("labcore.compile_cache", "labcore.compile_cache", "mod"),
        ("logging.read_metrics", "labcore.logging.read_metrics", "func"),
        ("logging.read_tensorboard_scalars", "labcore.logging.read_tensorboard_scalars", "func"),
        ("time_call", "labcore.tools.benchmarking.time_call", "func"),
    ],
    "12_pqn": [
        ("PQNConfig", "labcore.agents.pqn.config.PQNConfig", "class"),
        ("pqn.core.make_train", "labcore.agents.pqn.core.make_train", "func"),
        ("pqn.core.make_pqn", "labcore.agents.pqn.core.make_pqn", "func"),
        ("pqn.run.train", "labcore.agents.pqn.run.train", "func"),
        ("pqn.run.load_checkpoint", "labcore.agents.pqn.run.load_checkpoint", "func"),
        ("pqn.run.evaluate", "labcore.agents.pqn.run.evaluate", "func"),
        ("losses.q_lambda_targets", "labcore.losses.q_lambda_targets", "func"),
        ("MLPQNetwork", "labcore.nets.q_networks.MLPQNetwork", "class"),
        ("labcore.course.curves", "labcore.course.curves", "mod"),
        ("labcore.course.published", "labcore.course.published", "mod"),
    ],
}

ROLES = ("class", "func", "mod")


def resolve(path: str) -> Any:
    """The object a dotted path names (the longest importable module, then its attributes)."""
    return pkgutil.resolve_name(path)


def problem(path: str, role: str) -> str | None:
    """Why ``path`` cannot be linked with ``role``, or None when it can."""
    if role not in ROLES:
        return f"role {role!r} is not one of {ROLES}"
    if any(part.startswith("_") for part in path.split(".")):
        return "a private name (the API reference documents public names only)"
    try:
        obj = resolve(path)
    except (ImportError, AttributeError, ValueError) as err:
        return f"does not resolve: {err}"
    if role == "mod":
        return None if inspect.ismodule(obj) else f"is a {type(obj).__name__}, not a module"
    if role == "class" and not inspect.isclass(obj):
        return f"is a {type(obj).__name__}, not a class"
    if role == "func" and (inspect.isclass(obj) or inspect.ismodule(obj) or not callable(obj)):
        return f"is a {type(obj).__name__}, not a function"
    home = f"{getattr(obj, '__module__', None)}.{getattr(obj, '__qualname__', None)}"
    if home != path:
        return f"is defined as {home} (link the object where the API reference documents it)"
    return None


def check() -> None:
    """Raise ValueError naming every entry of LESSON_API whose path does not resolve as its role says."""
    notebooks = pathlib.Path(__file__).resolve().parents[2] / "notebooks"
    stems = {path.stem for path in notebooks.glob("*.ipynb")}
    errors = [f"{stem}: no notebooks/{stem}.ipynb" for stem in LESSON_API if stems and stem not in stems]
    errors += [f"{stem}: a lesson without entries" for stem in sorted(stems - set(LESSON_API))]
    for stem, entries in LESSON_API.items():
        for label, path, role in entries:
            reason = problem(path, role)
            if reason:
                errors.append(f"{stem}: {label!r} -> {path} ({role}): {reason}")
    if errors:
        raise ValueError("docs/tooling/lesson_api.py: " + "; ".join(errors))


if __name__ == "__main__":
    check()
    print(f"lesson_api: {sum(map(len, LESSON_API.values()))} links in {len(LESSON_API)} lessons resolve")
    sys.exit(0)
