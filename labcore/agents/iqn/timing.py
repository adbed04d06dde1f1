"""Timing the IQN run modes: the reference configuration at steady state and its matmul floor.

``benchmarks/iqn_modes.py`` measures the modes with these functions:

    config = timing_config("jax_fused")                       # the original experiment, epsilon 0
    runner = make_runner(config)                              # labcore.agents.iqn.runners
    for _ in range(warmup_epochs(config)):                    # until every agent trains every epoch
        runner.run_epochs(1)
    seconds = timed_block(runner, epochs=10, per_call=10) / 10
    floor = epoch_flops(config)["total"] / (matmul_rate(...) * 1e9)   # labcore.tools.benchmarking.matmul_rate
"""

from __future__ import annotations

import time

from labcore.agents.iqn.run_config import IQNRunConfig
from labcore.agents.iqn.runners import JaxFusedRunner, Runner

N_COS = 64  # the IQN's cosine features (labcore.nets.iqn.IQN.n_cos)


def timing_config(mode: str, num_worlds: int = 1, epochs_per_call: int = 1) -> IQNRunConfig:
    """The reference configuration with epsilon 0, so that every act runs the ``n_tau_act``-tau forward
    in every mode (PyTorch would skip it for a random action; JAX computes it either way)."""
    return IQNRunConfig(mode=mode, num_worlds=num_worlds, epochs_per_call=epochs_per_call, epsilon_start=0.0,
                        epsilon_end=0.0)


def warmup_epochs(config: IQNRunConfig) -> int:
    """Epochs after which every buffer allows a train step: size - n_frames - 1 >= batch_size."""
    a = config.agent
    return -(-(a.batch_size + a.n_frames + 1) // config.world.max_turns)  # ceiling division


def forward_flops(rows: int, n_tau: int, config: IQNRunConfig) -> dict[str, int]:
    """Multiply-add FLOPs (2 per MAC) of one IQN forward on ``rows`` states with ``n_tau`` taus each, per layer."""
    a = config.agent
    L, F, A = a.hidden_size, a.in_features, a.n_actions
    return {"head1": 2 * rows * F * L, "cos_embedding": 2 * rows * n_tau * N_COS * L, "ff_1": 2 * rows * n_tau * L * L,
            "advantage": 2 * rows * n_tau * L * A, "value": 2 * rows * n_tau * L}


def epoch_flops(config: IQNRunConfig) -> dict[str, float]:
    """The matmul FLOPs of one epoch (elementwise work, the noise draws and the world are left out).

    Acting: agents x turns greedy forwards of one state with n_tau_act taus. Training, per agent: three
    forwards of batch x n_quantiles rows (local and target on the next states, local on the states)
    and the backward of the last: every layer's weight gradient (as much as its forward) plus the
    input gradient of ff_1, advantage and value (head1's and cos_embedding's inputs are data).
    """
    a, w = config.agent, config.world
    act = sum(forward_flops(1, a.n_tau_act, config).values()) * w.n_agents * w.max_turns
    fwd = forward_flops(a.batch_size, a.n_quantiles, config)
    backward = sum(fwd.values()) + fwd["ff_1"] + fwd["advantage"] + fwd["value"]
    train = (3 * sum(fwd.values()) + backward) * w.n_agents
    return {"acting": float(act), "training": float(train), "total": float(act + train)}


def timed_block(runner: Runner, epochs: int, per_call: int) -> float:
    """Seconds for ``epochs`` more epochs, ``per_call`` per runner call (compiles excluded: the
    fused runner compiles a new chunk size before its clock starts, see ``JaxFusedRunner``)."""
    if isinstance(runner, JaxFusedRunner):
        runner.compile(per_call)
    started = time.perf_counter()
    done = 0
    while done < epochs:
        k = min(per_call, epochs - done)
        runner.run_epochs(k)
        done += k
    return time.perf_counter() - started
