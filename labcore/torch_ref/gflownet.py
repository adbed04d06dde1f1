"""A PyTorch GFlowNet on HyperGrid: the reference the JAX port (``labcore.agents.gflownet.core``) must match.

Written the way a PyTorch user would: a numpy environment with masks, and losses computed
trajectory by trajectory with Python loops (clear rather than fast), so that agreement with the
vectorised JAX losses is evidence, not a tautology. The batch layout and the loss conventions
are those of ``labcore.agents.gflownet.core`` (read its module docstring).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

EPSILON = 1e-6


@dataclass(frozen=True)
class HyperGridEnv:
    """HyperGrid in numpy: the same rules and reward as ``labcore.envs.hypergrid``."""

    ndim: int = 2
    height: int = 8
    r0: float = 0.1
    r1: float = 0.5
    r2: float = 2.0

    @property
    def max_actions(self) -> int:
        return self.ndim * (self.height - 1) + 1

    def reward(self, x: np.ndarray) -> np.ndarray:
        a = np.abs(np.asarray(x, np.float64) / (self.height - 1) - 0.5)
        plateau = np.all(a > 0.25 + EPSILON, axis=-1)
        peak = np.all((a > 0.3 + EPSILON) & (a < 0.4 - EPSILON), axis=-1)
        return self.r0 + self.r1 * plateau + self.r2 * peak

    def forward_mask(self, state: np.ndarray) -> np.ndarray:
        """[..., D] -> [..., D + 1] bool; exit always legal."""
        state = np.asarray(state)
        return np.concatenate([state < self.height - 1, np.ones(state.shape[:-1] + (1,), bool)], axis=-1)

    def backward_mask(self, state: np.ndarray) -> np.ndarray:
        return np.asarray(state) > 0


def _masked_log_softmax(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(logits.masked_fill(~mask, -1e9), dim=-1)


def trajectory_terms(env: HyperGridEnv, states, actions, length: int, forward_logits, backward_logits):
    """For ONE trajectory: lists of log P_F and log P_B per step (log P_B = 0 at exit)."""
    log_pf, log_pb = [], []
    for t in range(length):
        s, a = states[t], int(actions[t])
        mask = torch.as_tensor(env.forward_mask(s.numpy()))
        log_pf.append(_masked_log_softmax(forward_logits[t], mask)[a])
        if t == length - 1:  # exit
            log_pb.append(torch.zeros((), dtype=forward_logits.dtype))
            continue
        following = states[t + 1]
        parents = torch.as_tensor(env.backward_mask(following.numpy()))
        if backward_logits is None:
            log_pb.append(-torch.log(parents.sum().to(forward_logits.dtype)))
        else:
            log_pb.append(_masked_log_softmax(backward_logits[t + 1], parents)[a])
    return log_pf, log_pb


def tb_loss(env, batch, forward_logits, backward_logits, log_z):
    residuals = []
    for b in range(len(batch["lengths"])):
        length = int(batch["lengths"][b])
        log_pf, log_pb = trajectory_terms(env, batch["states"][b], batch["actions"][b], length, forward_logits[b],
                                          None if backward_logits is None else backward_logits[b])
        residuals.append(log_z + torch.stack(log_pf).sum() - torch.stack(log_pb).sum() - batch["log_rewards"][b])
    return torch.stack(residuals).pow(2).mean()


def db_loss(env, batch, forward_logits, backward_logits, log_flows):
    squares = []
    for b in range(len(batch["lengths"])):
        length = int(batch["lengths"][b])
        log_pf, log_pb = trajectory_terms(env, batch["states"][b], batch["actions"][b], length, forward_logits[b],
                                          None if backward_logits is None else backward_logits[b])
        for t in range(length):
            after = batch["log_rewards"][b] if t == length - 1 else log_flows[b, t + 1]
            squares.append((log_flows[b, t] + log_pf[t] - after - log_pb[t]) ** 2)
    return torch.stack(squares).mean()


def fl_loss(env, batch, forward_logits, backward_logits, log_flows_tilde):
    log_r = torch.as_tensor(np.log(env.reward(batch["states"].numpy())), dtype=log_flows_tilde.dtype)
    return db_loss(env, batch, forward_logits, backward_logits, log_flows_tilde + log_r)


def subtb_loss(env, batch, forward_logits, backward_logits, log_flows, lam: float = 0.9):
    per_trajectory = []
    for b in range(len(batch["lengths"])):
        length = int(batch["lengths"][b])
        log_pf, log_pb = trajectory_terms(env, batch["states"][b], batch["actions"][b], length, forward_logits[b],
                                          None if backward_logits is None else backward_logits[b])
        flows = [log_flows[b, t] for t in range(length)] + [batch["log_rewards"][b]]
        total, weights = 0.0, 0.0
        for i in range(length + 1):
            for j in range(i + 1, length + 1):
                inner = sum(log_pf[t] - log_pb[t] for t in range(i, j))
                weight = lam ** (j - i)
                total = total + weight * (flows[i] + inner - flows[j]) ** 2
                weights += weight
        per_trajectory.append(total / weights)
    return torch.stack(per_trajectory).mean()


def fm_loss(env, batch, edge_log_flows, parent_edge_log_flows):
    squares = []
    for b in range(len(batch["lengths"])):
        length = int(batch["lengths"][b])
        for t in range(1, length):
            s = batch["states"][b, t].numpy()
            parents = env.backward_mask(s)
            inflow = torch.logsumexp(parent_edge_log_flows[b, t][torch.as_tensor(parents)], dim=0)
            moves = env.forward_mask(s)[:-1]
            exit_flow = torch.as_tensor(np.log(env.reward(s)), dtype=edge_log_flows.dtype)
            outgoing = torch.cat([edge_log_flows[b, t, :-1][torch.as_tensor(moves)], exit_flow[None]])
            squares.append((inflow - torch.logsumexp(outgoing, dim=0)) ** 2)
    return torch.stack(squares).mean()


# ----------------------------------------------------------------------------------------------
# The same losses batched, as a PyTorch user would write them for speed: what the trainer uses.
# tests/test_gflownet.py checks them against the loops above.


def batched_step_log_probs(env: HyperGridEnv, batch: dict, forward_logits, backward_logits):
    """(log P_F, log P_B, valid), each [B, T], with the conventions of the loops above."""
    states, actions, lengths = batch["states"], batch["actions"].long(), batch["lengths"].long()
    T = actions.shape[1]
    steps = torch.arange(T)
    valid = steps[None, :] < lengths[:, None]
    moves = steps[None, :] < lengths[:, None] - 1
    forward_mask = torch.as_tensor(env.forward_mask(states[:, :-1].numpy()))
    log_pf = _masked_log_softmax(forward_logits[:, :-1], forward_mask).gather(-1, actions[..., None])[..., 0]
    parents = torch.as_tensor(env.backward_mask(states[:, 1:].numpy()))
    if backward_logits is None:
        log_pb = -torch.log(parents.sum(-1).clamp(min=1).to(forward_logits.dtype))
    else:
        index = actions.clamp(max=env.ndim - 1)[..., None]
        log_pb = _masked_log_softmax(backward_logits[:, 1:], parents).gather(-1, index)[..., 0]
    zero = torch.zeros((), dtype=forward_logits.dtype)
    return torch.where(valid, log_pf, zero), torch.where(moves, log_pb, zero), valid


def _flows_by_position(batch: dict, log_flows):
    positions = torch.arange(log_flows.shape[1])
    at_end = positions[None, :] == batch["lengths"].long()[:, None]
    return torch.where(at_end, batch["log_rewards"][:, None].to(log_flows.dtype), log_flows)


def batched_tb_loss(env, batch, forward_logits, backward_logits, log_z):
    log_pf, log_pb, _ = batched_step_log_probs(env, batch, forward_logits, backward_logits)
    return (log_z + log_pf.sum(-1) - log_pb.sum(-1) - batch["log_rewards"]).pow(2).mean()


def batched_db_loss(env, batch, forward_logits, backward_logits, log_flows):
    log_pf, log_pb, valid = batched_step_log_probs(env, batch, forward_logits, backward_logits)
    flows = _flows_by_position(batch, log_flows)
    residual = flows[:, :-1] + log_pf - flows[:, 1:] - log_pb
    return (residual.pow(2) * valid).sum() / valid.sum()


def batched_fl_loss(env, batch, forward_logits, backward_logits, log_flows_tilde):
    log_r = torch.as_tensor(np.log(env.reward(batch["states"].numpy())), dtype=log_flows_tilde.dtype)
    return batched_db_loss(env, batch, forward_logits, backward_logits, log_flows_tilde + log_r)


def batched_subtb_loss(env, batch, forward_logits, backward_logits, log_flows, lam: float = 0.9):
    log_pf, log_pb, _ = batched_step_log_probs(env, batch, forward_logits, backward_logits)
    flows = _flows_by_position(batch, log_flows)
    cumulative = torch.cat([torch.zeros_like(log_pf[:, :1]), torch.cumsum(log_pf - log_pb, -1)], -1)
    residual = flows[:, :, None] + cumulative[:, None, :] - cumulative[:, :, None] - flows[:, None, :]
    positions = torch.arange(flows.shape[1])
    i, j = positions[:, None], positions[None, :]
    pairs = (i < j)[None] & (j[None] <= batch["lengths"].long()[:, None, None])
    weights = torch.where(pairs, torch.tensor(lam, dtype=log_pf.dtype) ** (j - i).to(log_pf.dtype), torch.zeros((), dtype=log_pf.dtype))
    return ((weights * residual.pow(2)).sum((1, 2)) / weights.sum((1, 2))).mean()


def batched_fm_loss(env, batch, edge_log_flows, parent_edge_log_flows):
    states = batch["states"]
    parents = torch.as_tensor(env.backward_mask(states.numpy()))
    inflow = torch.logsumexp(parent_edge_log_flows.masked_fill(~parents, -torch.inf), -1)
    moves = torch.as_tensor(env.forward_mask(states.numpy()))[..., :-1]
    exit_flow = torch.as_tensor(np.log(env.reward(states.numpy())), dtype=edge_log_flows.dtype)
    outflow = torch.logsumexp(torch.cat([edge_log_flows[..., :-1].masked_fill(~moves, -torch.inf), exit_flow[..., None]], -1), -1)
    positions = torch.arange(states.shape[1])
    visited = (positions[None, :] >= 1) & (positions[None, :] < batch["lengths"].long()[:, None])
    residual = torch.where(visited, inflow - outflow, torch.zeros((), dtype=inflow.dtype))
    return residual.pow(2).sum() / visited.sum().clamp(min=1)


# ----------------------------------------------------------------------------------------------
# The agent and its all-PyTorch trainer.


def encode(states: torch.Tensor, height: int) -> torch.Tensor:
    """One-hot per coordinate: [..., D] int -> [..., D * H] float32."""
    return torch.nn.functional.one_hot(states.long(), height).flatten(-2).float()


def mlp(inputs: int, hidden: int, layers: int, outputs: int) -> torch.nn.Sequential:
    modules, width = [], inputs
    for _ in range(layers):
        modules += [torch.nn.Linear(width, hidden), torch.nn.LeakyReLU()]
        width = hidden
    modules.append(torch.nn.Linear(width, outputs))
    return torch.nn.Sequential(*modules)


class GFlowNetAgent(torch.nn.Module):
    """Forward policy (D + 1 logits), backward policy (D logits), state flow (1), and log Z."""

    def __init__(self, ndim: int, height: int, hidden_size: int = 256, num_layers: int = 2):
        super().__init__()
        self.ndim, self.height = ndim, height
        self.forward_policy = mlp(ndim * height, hidden_size, num_layers, ndim + 1)
        self.backward_policy = mlp(ndim * height, hidden_size, num_layers, ndim)
        self.state_flow = mlp(ndim * height, hidden_size, num_layers, 1)
        self.log_z = torch.nn.Parameter(torch.zeros(()))

    def outputs(self, states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """states [..., D] -> forward logits [..., D + 1], backward logits [..., D], log flow [...]."""
        x = encode(states, self.height)
        return self.forward_policy(x), self.backward_policy(x), self.state_flow(x)[..., 0]


@torch.no_grad()
def sample(agent: GFlowNetAgent, env: HyperGridEnv, batch_size: int, epsilon: float, generator: torch.Generator,
           exit_from_reward: bool = False) -> dict:
    """Trajectories from the forward policy (epsilon: share of uniformly random legal actions),
    padded to env.max_actions as labcore.agents.gflownet.core expects. exit_from_reward: the exit logit
    is log R(s) (flow matching, where the policy is the normalised edge flows)."""
    T, D = env.max_actions, env.ndim
    states = torch.zeros(batch_size, T + 1, D, dtype=torch.int32)
    actions = torch.full((batch_size, T), D, dtype=torch.int32)
    lengths = torch.zeros(batch_size, dtype=torch.int32)
    current = torch.zeros(batch_size, D, dtype=torch.int32)
    done = torch.zeros(batch_size, dtype=torch.bool)
    for t in range(T):
        mask = torch.as_tensor(env.forward_mask(current.numpy()))
        logits, _, _ = agent.outputs(current)
        if exit_from_reward:
            logits = torch.cat([logits[:, :-1], torch.as_tensor(np.log(env.reward(current.numpy())), dtype=logits.dtype)[:, None]], -1)
        probs = torch.softmax(logits.masked_fill(~mask, -1e9), dim=-1)
        uniform = mask.float() / mask.float().sum(-1, keepdim=True)
        probs = (1 - epsilon) * probs + epsilon * uniform
        action = torch.multinomial(probs, 1, generator=generator)[:, 0].to(torch.int32)
        action = torch.where(done, torch.full_like(action, D), action)
        actions[:, t] = action
        exiting = (action == D) & ~done
        lengths[exiting] = t + 1
        moving = (action < D) & ~done
        current = current.clone()
        current[moving, action[moving].long()] += 1
        states[:, t + 1] = current
        done = done | exiting
        if bool(done.all()):
            states[:, t + 2 :] = current[:, None]
            break
    terminal = states[torch.arange(batch_size), lengths.long() - 1]
    log_rewards = torch.as_tensor(np.log(env.reward(terminal.numpy())), dtype=torch.float32)
    return {"states": states, "actions": actions, "lengths": lengths, "log_rewards": log_rewards}


def terminal_indices(env: HyperGridEnv, batch: dict) -> np.ndarray:
    """[B] row-major index of each trajectory's terminal state x (labcore.envs.hypergrid.state_index order)."""
    x = batch["states"][torch.arange(len(batch["lengths"])), batch["lengths"].long() - 1].numpy()
    return np.ravel_multi_index(tuple(x.T), (env.height,) * env.ndim)


def loss_of(agent: GFlowNetAgent, env: HyperGridEnv, batch: dict, loss: str, uniform_backward: bool, lam: float = 0.9):
    """The configured loss of ``batch`` under ``agent`` (batched implementations)."""
    forward_logits, backward_logits, log_flows = agent.outputs(batch["states"])
    backward = None if uniform_backward else backward_logits
    if loss == "tb":
        return batched_tb_loss(env, batch, forward_logits, backward, agent.log_z)
    if loss == "db":
        return batched_db_loss(env, batch, forward_logits, backward, log_flows)
    if loss == "fl":
        return batched_fl_loss(env, batch, forward_logits, backward, log_flows)
    if loss == "subtb":
        return batched_subtb_loss(env, batch, forward_logits, backward, log_flows, lam)
    if loss == "fm":  # the forward head's move logits are the log edge flows
        parents = torch.clamp(batch["states"][..., None, :] - torch.eye(env.ndim, dtype=torch.int32), min=0)
        parent_logits, _, _ = agent.outputs(parents)  # [B, T + 1, D (parent d), D + 1]
        parent_edges = torch.diagonal(parent_logits[..., : env.ndim], dim1=-2, dim2=-1)  # move d from parent d
        return batched_fm_loss(env, batch, forward_logits, parent_edges)
    raise ValueError(f"unknown loss {loss!r}")


def make_optimizer(agent: GFlowNetAgent, learning_rate: float, log_z_learning_rate: float) -> torch.optim.Adam:
    networks = [p for name, p in agent.named_parameters() if name != "log_z"]
    return torch.optim.Adam([{"params": networks, "lr": learning_rate}, {"params": [agent.log_z], "lr": log_z_learning_rate}])


def train(config, log_every: int = 100) -> dict:
    """The all-PyTorch trainer for a ``labcore.agents.gflownet.core.GFlowNetConfig``.

    Returns {"losses": [iterations], "l1": [(iteration, L1 of the last l1_samples terminal states)],
    "agent": the trained agent, "seconds": time per phase}.
    """
    from labcore.envs.hypergrid import l1_curve

    torch.manual_seed(config.seed)
    generator = torch.Generator().manual_seed(config.seed)
    env = HyperGridEnv(config.ndim, config.height)
    agent = GFlowNetAgent(config.ndim, config.height, config.hidden_size, config.num_layers)
    optimizer = make_optimizer(agent, config.learning_rate, config.log_z_learning_rate)
    terminals: list[np.ndarray] = []
    losses = []
    seconds = {"sampling": 0.0, "conversion": 0.0, "gradient": 0.0, "sync": 0.0}  # as the hybrid trainer's
    for iteration in range(1, config.iterations + 1):
        started = time.perf_counter()
        batch = sample(agent, env, config.batch_size, config.exploration_epsilon, generator, config.loss == "fm")
        sampled = time.perf_counter()
        loss = loss_of(agent, env, batch, config.loss, config.uniform_backward, config.subtb_lambda)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        seconds["sampling"] += sampled - started
        seconds["gradient"] += time.perf_counter() - sampled
        terminals.append(terminal_indices(env, batch))
    l1 = l1_curve(config, np.stack(terminals), log_every)
    return {"losses": losses, "l1": l1, "agent": agent, "seconds": seconds}


# ----------------------------------------------------------------------------------------------
# The bridge: PyTorch agent <-> JAX parameter pytree (labcore.agents.gflownet.core), batches to JAX.


def _layers(module: torch.nn.Sequential) -> list[torch.nn.Linear]:
    return [m for m in module if isinstance(m, torch.nn.Linear)]


def to_jax_params(agent: GFlowNetAgent) -> dict:
    """The agent's parameters as a JAX pytree (Linear weights transposed to [in, out]); exact copies."""
    import jax.numpy as jnp

    def convert(module):
        return [{"w": jnp.asarray(layer.weight.detach().numpy().T), "b": jnp.asarray(layer.bias.detach().numpy())}
                for layer in _layers(module)]

    return {"forward_policy": convert(agent.forward_policy), "backward_policy": convert(agent.backward_policy),
            "state_flow": convert(agent.state_flow), "log_z": jnp.asarray(agent.log_z.detach().numpy())}


@torch.no_grad()
def load_jax_params(agent: GFlowNetAgent, params: dict) -> None:
    """Copy a JAX parameter pytree into the agent, in place (the sync after a JAX gradient step)."""
    for name in ("forward_policy", "backward_policy", "state_flow"):
        for layer, values in zip(_layers(getattr(agent, name)), params[name], strict=True):
            layer.weight.copy_(torch.from_numpy(np.asarray(values["w"]).T.copy()))
            layer.bias.copy_(torch.from_numpy(np.asarray(values["b"]).copy()))
    agent.log_z.copy_(torch.from_numpy(np.asarray(params["log_z"]).copy()))


def batch_to_jax(batch: dict):
    """A sampled PyTorch batch as ``labcore.envs.hypergrid.Trajectories`` (the JAX losses' input)."""
    import jax.numpy as jnp

    from labcore.envs.hypergrid import Trajectories

    return Trajectories(*(jnp.asarray(batch[name].numpy()) for name in ("states", "actions", "lengths", "log_rewards")))
