"""A PyTorch GFlowNet on HyperGrid: the reference the JAX port (``labcore.agents.gflownet``) must match.

Written the way a PyTorch user would: a numpy environment with masks, and losses computed
trajectory by trajectory with Python loops (clear rather than fast), so that agreement with the
vectorised JAX losses is evidence, not a tautology. The batch layout and the loss conventions
are those of ``labcore.agents.gflownet`` (read its module docstring).
"""

from __future__ import annotations

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
