"""GFlowNet losses on HyperGrid trajectories, as pure JAX functions.

The losses take the network's outputs, not the network, so the same functions serve the
``hybrid`` trainer (a PyTorch policy's batch, a JAX gradient step) and the all-JAX one, and so
they can be checked against the PyTorch reference (``labcore.torch_ref.gflownet``) on identical
inputs.

A batch of B trajectories, padded to T = ``grid.max_actions`` actions:

    states       [B, T + 1, D] int32   s_0 = 0, ..., s_{L-1} = x, then x repeated
    actions      [B, T] int32          a_0 ... a_{L-1}, where a_{L-1} = exit; exit after that
    lengths      [B] int32             L, the number of actions including exit (1 <= L <= T)
    log_rewards  [B] float32           log R(x)

Network outputs, evaluated at every state of the batch:

    forward_logits   [B, T + 1, D + 1]  P_F over "+1 on d" and exit (masked here)
    backward_logits  [B, T + 1, D]      P_B over the parents "-1 on d" (masked here), or None:
                                        P_B uniform over the parents
    log_flows        [B, T + 1]         log F(s) (DB, SubTB) or log F~(s) (forward-looking)

Conventions: the exit transition has log P_B = 0, and the "state after exit" has log F = log R(x),
so that DB's last transition reads log F(x) + log P_F(exit | x) = log R(x). Every loss is a mean
of squared residuals: over trajectories (TB, SubTB), over transitions (DB, FL) or over visited
non-initial states (FM).

``GFlowNetConfig`` is defined in ``labcore.agents.gflownet.config`` (which imports no JAX) and
re-exported here.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from labcore import logged_scan, losses
from labcore.agents.gflownet.config import LOSSES, TRAINERS, GFlowNetConfig  # noqa: F401 (core.GFlowNetConfig, as before)
from labcore.envs import hypergrid
from labcore.envs.hypergrid import HyperGrid, Trajectories, encode
from labcore.envs.hypergrid import l1_curve  # noqa: F401 (kept importable here: the trainers call gflownet.l1_curve)


def step_log_probs(
    grid: HyperGrid, batch: Trajectories, forward_logits: jax.Array, backward_logits: jax.Array | None
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(log P_F(a_t | s_t), log P_B(s_t | s_{t+1}), valid) for every step t: each [B, T].

    valid[t] = t < L. log P_B is 0 at the exit step and at padding; with backward_logits None it
    is log(1 / number of parents of s_{t+1}).
    """
    T = batch.actions.shape[1]
    steps = jnp.arange(T)
    valid = steps[None, :] < batch.lengths[:, None]
    moves = valid & (steps[None, :] < batch.lengths[:, None] - 1)  # non-exit steps
    current, following = batch.states[:, :-1], batch.states[:, 1:]
    log_pf_all = losses.masked_log_probs(forward_logits[:, :-1], hypergrid.forward_mask(grid, current))
    log_pf = jnp.take_along_axis(log_pf_all, batch.actions[..., None], axis=-1)[..., 0]
    parents = hypergrid.backward_mask(grid, following)
    if backward_logits is None:
        log_pb = -jnp.log(jnp.maximum(jnp.sum(parents, axis=-1), 1).astype(jnp.float32))
    else:
        log_pb_all = losses.masked_log_probs(backward_logits[:, 1:], parents)
        move_index = jnp.minimum(batch.actions, grid.ndim - 1)  # exit's index is unused (masked below)
        log_pb = jnp.take_along_axis(log_pb_all, move_index[..., None], axis=-1)[..., 0]
    return jnp.where(valid, log_pf, 0.0), jnp.where(moves, log_pb, 0.0), valid


def trajectory_balance(grid, batch, forward_logits, backward_logits, log_z) -> jax.Array:
    """TB: mean over trajectories of (log Z + sum log P_F - sum log P_B - log R(x))^2."""
    log_pf, log_pb, _ = step_log_probs(grid, batch, forward_logits, backward_logits)
    residual = log_z + log_pf.sum(-1) - log_pb.sum(-1) - batch.log_rewards
    return jnp.mean(residual**2)


def _flows_by_position(batch: Trajectories, log_flows: jax.Array) -> jax.Array:
    """[B, T + 1]: log F(s_t) for t < L, and log R(x) at position L (the state after exit)."""
    positions = jnp.arange(log_flows.shape[1])
    return jnp.where(positions[None, :] == batch.lengths[:, None], batch.log_rewards[:, None], log_flows)


def detailed_balance(grid, batch, forward_logits, backward_logits, log_flows) -> jax.Array:
    """DB: mean over transitions of (log F(s) + log P_F(s'|s) - log F(s') - log P_B(s|s'))^2."""
    log_pf, log_pb, valid = step_log_probs(grid, batch, forward_logits, backward_logits)
    flows = _flows_by_position(batch, log_flows)
    residual = flows[:, :-1] + log_pf - flows[:, 1:] - log_pb
    return jnp.sum(jnp.where(valid, residual**2, 0.0)) / jnp.sum(valid)


def forward_looking(grid, batch, forward_logits, backward_logits, log_flows_tilde) -> jax.Array:
    """FL: DB with log F(s) = log F~(s) + log R(s) (R is defined on every HyperGrid state)."""
    log_flows = log_flows_tilde + hypergrid.log_reward(grid, batch.states)
    return detailed_balance(grid, batch, forward_logits, backward_logits, log_flows)


def subtrajectory_balance(grid, batch, forward_logits, backward_logits, log_flows, lam: float = 0.9) -> jax.Array:
    """SubTB(lambda): for every sub-trajectory s_i -> s_j (0 <= i < j <= L) the residual
    log F(s_i) + sum_{i<=t<j} (log P_F - log P_B) - log F(s_j), squared, weighted by lambda^(j - i)
    and normalised by the weights within each trajectory; mean over trajectories."""
    log_pf, log_pb, _ = step_log_probs(grid, batch, forward_logits, backward_logits)
    flows = _flows_by_position(batch, log_flows)  # [B, T + 1]
    zero = jnp.zeros_like(log_pf[:, :1])
    cumulative = jnp.concatenate([zero, jnp.cumsum(log_pf - log_pb, axis=-1)], axis=-1)  # [B, T + 1]
    residual = flows[:, :, None] + cumulative[:, None, :] - cumulative[:, :, None] - flows[:, None, :]  # [B, i, j]
    positions = jnp.arange(flows.shape[1])
    i, j = positions[:, None], positions[None, :]
    pairs = (i < j)[None] & (j[None] <= batch.lengths[:, None, None])
    weights = jnp.where(pairs, lam ** (j - i).astype(jnp.float32), 0.0)
    per_trajectory = jnp.sum(weights * residual**2, axis=(1, 2)) / jnp.sum(weights, axis=(1, 2))
    return jnp.mean(per_trajectory)


def parent_states(grid: HyperGrid, states: jax.Array) -> jax.Array:
    """[..., D] -> [..., D, D]: the state minus e_d for each d (clipped at 0; use backward_mask)."""
    return jnp.maximum(states[..., None, :] - jnp.eye(grid.ndim, dtype=states.dtype), 0)


def flow_matching(grid, batch, edge_log_flows, parent_edge_log_flows) -> jax.Array:
    """FM: for every visited state s other than s_0, (log sum of inflows - log sum of outflows)^2.

    edge_log_flows [B, T + 1, D + 1]: log F(s -> s + e_d) at each state (the exit entry is unused:
    the exit edge's flow is R(s)); parent_edge_log_flows [B, T + 1, D]: log F(s - e_d -> s), the
    network's output at each parent for the move into s. Mean over the visited states
    s_1 ... s_{L-1}.
    """
    states = batch.states
    inflow = jax.nn.logsumexp(jnp.where(hypergrid.backward_mask(grid, states), parent_edge_log_flows, -jnp.inf), axis=-1)
    moves = hypergrid.forward_mask(grid, states)[..., :-1]
    outgoing = jnp.concatenate([jnp.where(moves, edge_log_flows[..., :-1], -jnp.inf), hypergrid.log_reward(grid, states)[..., None]], -1)
    outflow = jax.nn.logsumexp(outgoing, axis=-1)
    positions = jnp.arange(states.shape[1])
    visited = (positions[None, :] >= 1) & (positions[None, :] < batch.lengths[:, None])
    residual = jnp.where(visited, inflow - outflow, 0.0)
    return jnp.sum(residual**2) / jnp.maximum(jnp.sum(visited), 1)


# ----------------------------------------------------------------------------------------------
# The policy in JAX: the same MLPs as the PyTorch agent (labcore.torch_ref.gflownet), as plain
# pytrees of arrays, so parameters can be copied between the two exactly.
#
# params = {"forward_policy": [{"w": [in, out], "b": [out]}, ...], "backward_policy": [...],
#           "state_flow": [...], "log_z": []}


def mlp_apply(layers: list[dict[str, jax.Array]], x: jax.Array) -> jax.Array:
    """Linear layers with LeakyReLU(0.01) between them (torch.nn.LeakyReLU's default slope)."""
    for layer in layers[:-1]:
        x = jax.nn.leaky_relu(x @ layer["w"] + layer["b"], negative_slope=0.01)
    return x @ layers[-1]["w"] + layers[-1]["b"]


def outputs(grid: HyperGrid, params: dict[str, Any], states: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """states [..., D] -> forward logits [..., D + 1], backward logits [..., D], log flow [...]."""
    x = encode(grid, states)
    return mlp_apply(params["forward_policy"], x), mlp_apply(params["backward_policy"], x), mlp_apply(params["state_flow"], x)[..., 0]


def loss_fn(config: GFlowNetConfig, params: dict[str, Any], batch: Trajectories) -> jax.Array:
    """The configured loss of ``batch`` under ``params`` (what the hybrid and jax trainers differentiate)."""
    grid = config.grid
    forward_logits, backward_logits, log_flows = outputs(grid, params, batch.states)
    backward = None if config.uniform_backward else backward_logits
    if config.loss == "tb":
        return trajectory_balance(grid, batch, forward_logits, backward, params["log_z"])
    if config.loss == "db":
        return detailed_balance(grid, batch, forward_logits, backward, log_flows)
    if config.loss == "fl":
        return forward_looking(grid, batch, forward_logits, backward, log_flows)
    if config.loss == "subtb":
        return subtrajectory_balance(grid, batch, forward_logits, backward, log_flows, config.subtb_lambda)
    parent_logits, _, _ = outputs(grid, params, parent_states(grid, batch.states))  # [B, T + 1, D, D + 1]
    parent_edges = jnp.diagonal(parent_logits[..., : grid.ndim], axis1=-2, axis2=-1)  # move d from parent d
    return flow_matching(grid, batch, forward_logits, parent_edges)


def make_optimizer(config: GFlowNetConfig):
    """Adam for the networks and, with its own learning rate, for log Z (as the PyTorch trainer)."""
    import optax

    labels = lambda params: {name: ("log_z" if name == "log_z" else "networks") for name in params}  # noqa: E731
    return optax.multi_transform(
        {"networks": optax.adam(config.learning_rate), "log_z": optax.adam(config.log_z_learning_rate)}, labels
    )


# ----------------------------------------------------------------------------------------------
# Everything in JAX: the sampler as a lax.scan, the whole iteration jitted, vmap over seeds.


def init_params(config: GFlowNetConfig, key: jax.Array) -> dict[str, Any]:
    """Fresh parameters, initialised as torch.nn.Linear does (uniform within 1 / sqrt(fan_in))."""
    sizes = [config.ndim * config.height] + [config.hidden_size] * config.num_layers

    def network(key: jax.Array, outputs: int) -> list[dict[str, jax.Array]]:
        layers = []
        for fan_in, fan_out in zip(sizes, sizes[1:] + [outputs]):
            key, w_key, b_key = jax.random.split(key, 3)
            bound = 1.0 / math.sqrt(fan_in)
            layers.append({"w": jax.random.uniform(w_key, (fan_in, fan_out), minval=-bound, maxval=bound),
                           "b": jax.random.uniform(b_key, (fan_out,), minval=-bound, maxval=bound)})
        return layers

    forward_key, backward_key, flow_key = jax.random.split(key, 3)
    return {"forward_policy": network(forward_key, config.ndim + 1), "backward_policy": network(backward_key, config.ndim),
            "state_flow": network(flow_key, 1), "log_z": jnp.float32(0.0)}


def sampling_step(config: GFlowNetConfig, params: dict[str, Any], carry: tuple, step_key: jax.Array) -> tuple[tuple, tuple]:
    """One step of every trajectory of the batch (a lax.scan body, or one jitted call of the
    phase-2 Python loop). carry = (state [B, D], done [B], length [B], t []); returns the new carry
    and (state after the step [B, D], action [B]). Finished trajectories take the exit action
    again and stay where they are (the padding)."""
    grid = config.grid
    state, done, length, t = carry
    logits, _, _ = outputs(grid, params, state)
    if config.loss == "fm":  # the policy is the normalised edge flows, and the exit edge's flow is R(s)
        logits = logits.at[..., -1].set(hypergrid.log_reward(grid, state))
    mask = hypergrid.forward_mask(grid, state)
    policy = jax.nn.softmax(losses.masked_logits(logits, mask), axis=-1)
    uniform = mask / jnp.sum(mask, axis=-1, keepdims=True)
    probs = (1.0 - config.exploration_epsilon) * policy + config.exploration_epsilon * uniform
    action = jax.random.categorical(step_key, jnp.where(mask, jnp.log(probs), -jnp.inf))
    action = jnp.where(done, grid.exit_action, action).astype(jnp.int32)
    exiting = (action == grid.exit_action) & ~done
    state = hypergrid.step(grid, state, action)  # exit (and padding) leave the state as it is
    return (state, done | exiting, jnp.where(exiting, t + 1, length), t + 1), (state, action)


def _sampling_start(config: GFlowNetConfig) -> tuple:
    B, D = config.batch_size, config.ndim
    return jnp.zeros((B, D), jnp.int32), jnp.zeros(B, bool), jnp.zeros(B, jnp.int32), jnp.int32(0)


def _as_trajectories(config: GFlowNetConfig, final: jax.Array, lengths: jax.Array, visited: jax.Array,
                     actions: jax.Array) -> Trajectories:
    """visited [T, B, D] (the state after each step), actions [T, B] -> batch-major Trajectories."""
    B, D = config.batch_size, config.ndim
    states = jnp.concatenate([jnp.zeros((1, B, D), jnp.int32), visited], axis=0).transpose(1, 0, 2)
    return Trajectories(states, actions.T, lengths, hypergrid.log_reward(config.grid, final))


def sample_trajectories(config: GFlowNetConfig, params: dict[str, Any], key: jax.Array) -> Trajectories:
    """``config.batch_size`` trajectories from the forward policy (with epsilon-uniform
    exploration over legal actions), as one lax.scan over the T = max_actions steps."""
    step_keys = jax.random.split(key, config.grid.max_actions)
    (final, _, lengths, _), (visited, actions) = jax.lax.scan(
        lambda carry, k: sampling_step(config, params, carry, k), _sampling_start(config), step_keys
    )
    return _as_trajectories(config, final, lengths, visited, actions)


def sample_trajectories_stepwise(config: GFlowNetConfig, params: dict[str, Any], key: jax.Array,
                                 step=None) -> Trajectories:
    """The same trajectories as ``sample_trajectories`` (same key, same result), drawn by a Python
    loop that calls one jitted ``sampling_step`` per step and stops when every trajectory has
    exited: the migration's phase 2 (policy in JAX, sampler still in Python). ``step``: a jitted
    ``sampling_step`` to reuse across calls (one is made otherwise)."""
    step = step or jax.jit(functools.partial(sampling_step, config))
    step_keys = jax.random.split(key, config.grid.max_actions)
    carry, visited, actions = _sampling_start(config), [], []
    for t in range(config.grid.max_actions):
        carry, (state, action) = step(params, carry, step_keys[t])
        visited.append(state)
        actions.append(action)
        if bool(jnp.all(carry[1])):  # a device -> host read each step: part of what phase 3 removes
            break
    # Pad to T steps by repeating the last state and the exit action; stacking T arrays of one shape
    # (rather than concatenating pieces whose sizes depend on when the loop stopped) keeps every
    # array op at one shape, so nothing is compiled again when a batch happens to stop later.
    padding = config.grid.max_actions - len(visited)
    final = carry[0]
    exits = jnp.full((config.batch_size,), config.grid.exit_action, jnp.int32)
    return _as_trajectories(config, final, carry[2], jnp.stack(visited + [final] * padding), jnp.stack(actions + [exits] * padding))


def terminal_indices(grid: HyperGrid, batch: Trajectories) -> jax.Array:
    """[B] ``hypergrid.state_index`` of each trajectory's terminal state x = states[b, L_b - 1]."""
    terminal = batch.states[jnp.arange(batch.states.shape[0]), batch.lengths - 1]
    return hypergrid.state_index(grid, terminal)


def make_gradient_step(config: GFlowNetConfig, optimizer=None):
    """A pure ``(params, opt_state, batch) -> (params, opt_state, loss)``: value_and_grad of
    ``loss_fn`` and one optax step. The hybrid trainer jits it alone; make_train scans it."""
    optimizer = optimizer or make_optimizer(config)

    def gradient_step(params, opt_state, batch: Trajectories):
        loss, grads = jax.value_and_grad(lambda p: loss_fn(config, p, batch))(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return jax.tree_util.tree_map(lambda p, u: p + u, params, updates), opt_state, loss

    return gradient_step


def make_iteration(config: GFlowNetConfig, optimizer=None):
    """A pure ``iteration(params, opt_state, key) -> (params, opt_state, loss, terminals [B])``:
    sample a batch with ``key``, one gradient step; terminals are the samples' ``state_index``."""
    gradient_step = make_gradient_step(config, optimizer or make_optimizer(config))
    grid = config.grid

    def iteration(params, opt_state, key: jax.Array):
        batch = sample_trajectories(config, params, key)  # integer states: no gradient flows through sampling
        params, opt_state, loss = gradient_step(params, opt_state, batch)
        return params, opt_state, loss, terminal_indices(grid, batch)

    return iteration


def start(config: GFlowNetConfig, optimizer, key: jax.Array) -> tuple[dict[str, Any], Any, jax.Array]:
    """A run's start from its key: (fresh parameters, optimiser state, the loop's key), with
    ``init_key, loop_key = split(key)``. Iteration i samples with ``iteration_keys(...)[i]``.
    ``make_train`` and ``labcore.agents.gflownet.run.make_program`` both start here, so that the
    same key gives the same run."""
    init_key, loop_key = jax.random.split(key)
    params = init_params(config, init_key)
    return params, optimizer.init(params), loop_key


def iteration_keys(config: GFlowNetConfig, loop_key: jax.Array) -> jax.Array:
    """[iterations] keys: iteration i samples its batch with the i-th."""
    return jax.random.split(loop_key, config.iterations)


class TrainState(NamedTuple):
    """Everything the all-JAX trainer carries from one iteration to the next (``make_train``'s state and the
    state ``labcore.agents.gflownet.run``'s program checkpoints)."""

    params: dict[str, Any]
    opt_state: Any
    loop_key: jax.Array  # iteration i samples with iteration_keys(config, loop_key)[i]
    iteration: jax.Array  # int32 [], iterations done
    recent: jax.Array  # int32 [l1_samples]: state_index of the last l1_samples terminal states, a ring


def init_state(config: GFlowNetConfig, optimizer, key: jax.Array) -> TrainState:
    """A run's first state from its key (``start``'s parameters, optimiser state and loop key; an empty ring)."""
    params, opt_state, loop_key = start(config, optimizer, key)
    return TrainState(params, opt_state, loop_key, jnp.int32(0), jnp.zeros(config.l1_samples, jnp.int32))


def make_step(config: GFlowNetConfig, optimizer=None):
    """A pure ``step(state, key) -> (state, loss, terminals [B])``: one ``make_iteration`` with ``key``, the
    count of iterations done and the ring of the last ``l1_samples`` terminal indices brought up to date
    (a batch larger than the ring keeps its last samples only)."""
    iteration = make_iteration(config, optimizer or make_optimizer(config))
    batch, ring = config.batch_size, config.l1_samples
    kept = min(batch, ring)

    def step(state: TrainState, key: jax.Array) -> tuple[TrainState, jax.Array, jax.Array]:
        params, opt_state, loss, terminals = iteration(state.params, state.opt_state, key)
        slots = (state.iteration * batch + batch - kept + jnp.arange(kept)) % ring
        recent = state.recent.at[slots].set(terminals[batch - kept:])
        return TrainState(params, opt_state, state.loop_key, state.iteration + 1, recent), loss, terminals

    return step


def make_train(config: GFlowNetConfig, *, callback: Callable[[dict[str, np.ndarray]], None] | None = None,
               log_every: int = 1) -> Callable[[jax.Array], tuple[TrainState, dict[str, jax.Array]]]:
    """A pure ``train(key) -> (state, metrics)``: every iteration (sample, loss, gradient, optax step) inside
    one lax.scan; jit it, vmap it. ``state`` is the final ``TrainState`` (``state.params``); metrics:
    ``loss`` [iterations] and ``terminals`` [iterations, B] (the samples' ``hypergrid.state_index``).
    callback: called on the host with the metrics of every ``log_every``-th iteration while it runs
    (``labcore.logged_scan.scan_updates``; it changes no number)."""
    optimizer = make_optimizer(config)
    step = make_step(config, optimizer)

    def train(key: jax.Array) -> tuple[TrainState, dict[str, jax.Array]]:
        state = init_state(config, optimizer, key)
        keys = iteration_keys(config, state.loop_key)

        def update(state: TrainState) -> tuple[TrainState, dict[str, jax.Array]]:
            state, loss, terminals = step(state, keys[state.iteration])
            return state, {"loss": loss, "terminals": terminals}

        return logged_scan.scan_updates(update, state, config.iterations, updates_done=lambda state: state.iteration,
                                        callback=callback, log_every=log_every,
                                        rows_per_burst=logged_scan.burst_rows(config.batch_size, log_every))

    return train
