"""A PyTorch multi-agent IQN learner ("iRainbow"): the reference the JAX port (``labcore.agents.iqn.core``) must match.

What sorrel does. The open-source *sorrel* framework (MIT licence; ``sorrel/models/pytorch/iqn.py``,
``layers.py``, ``buffers.py``, ``examples/treasurehunt_mp/``) trains one independent learner per
agent in a gridworld: an implicit quantile network (IQN) with a dueling head and noisy layers,
double-DQN targets, a target network that is soft-updated after every gradient step and hard-synced
every ``sync_freq`` epochs, and a small frame-stacking replay buffer per agent. Each agent acts
epsilon-greedily on the mean of 256 sampled quantiles of its last ``n_frames`` observations, and
trains once per epoch on a minibatch of stacked frames.

What this module is. labcore's own re-implementation of that behaviour, not vendored and not copied
from sorrel: the same network
(``labcore.torch_ref.irainbow_network``: ``NoisyLinear``, ``IQN`` and the bridge that copies
parameters to and from the Flax layout of ``labcore.nets.iqn.IQN``), the same buffer semantics
(``FrameBuffer`` here), the same loss and the same update schedule (``IRainbowAgent`` here), with
hooks that let tests inject every random draw (taus, noise, sampled indices) so that the JAX port
can be compared with it value for value. It keeps the original's argument names (``layer_size``,
``lr``, ``tau``, ``sync_freq``, ``memory``, ``grad_clip``, ``epsilon``, ``epsilon_min``);
``labcore.agents.iqn.torch_reference`` builds an agent from the port's ``IQNConfig``.

Quirks of the original reproduced on purpose (the JAX port's faithful mode matches them; its
``fixed`` variant is where they are corrected):

1. Rewards are stored one step at a time, yet the bootstrap is discounted by ``gamma ** n_step``
   (0.99 ** 3): no n-step return is ever accumulated.
2. The target quantiles are not detached. The target network's parameters are not optimised and
   the double-DQN action is an argmax, so the gradient with respect to the local network is the
   same as with a stop-gradient; the only trace is a ``.grad`` on the target parameters, which we
   clear after the step (sorrel lets it accumulate unused).
3. The loss is the quantile Huber loss (kappa = 1) times a ``valid`` mask, averaged over all
   ``B * N * N`` elements (``mean``, not a sum over target quantiles).
4. The gradient's global norm is clipped to 1.0 before Adam.
5. The target is soft-updated, ``target <- tau * local + (1 - tau) * target``, after EVERY train
   step, and also hard-synced (copied) at the start of every epoch with ``epoch % sync_freq == 0``,
   epoch 0 included.
6. Both networks run in training mode (noisy) inside the loss: sorrel sets the local network to eval
   only while acting and back to train afterwards, and never sets the target network to eval.
   Acting uses eval mode (mean weights, no noise) with 256 taus. Taus are fresh U(0, 1) draws on
   every forward, also in eval mode.
7. Noisy layers use independent Gaussian noise (not factorised): a fresh ``N(0, 1)`` draw for every
   weight and bias on every training-mode forward; ``sigma`` starts at 0.017 and the means at
   ``U(-sqrt(3 / in), sqrt(3 / in))``.
8. The buffer's ``add_empty`` (called at each epoch start) moves the write position on by
   ``n_frames - 1`` rows without clearing them and without changing ``size``, so the first stacked
   states of an epoch read whatever those rows held before.
9. Sampling draws start positions from ``range(max(1, size - n_frames - 1))`` without replacement,
   as absolute row numbers: once the buffer has wrapped, a stack can straddle the write position.
   ``valid = 1 - any(dones of the first n_frames - 1 frames)``; action, reward and done come from
   the last frame of the stack.
10. Epsilon decays once per epoch, ``epsilon *= 1 - epsilon_decay``, floored at ``epsilon_min``.

Randomness. sorrel seeds torch's global generator and uses numpy's and Python's global generators.
Here every agent owns three generators seeded from its ``seed`` and touches no global state: a
``torch.Generator`` (weight initialisation, taus, noise; local and target share it, as they share
the global one in sorrel), a ``numpy.random.Generator`` (minibatch indices) and a
``random.Random`` (the epsilon coin and random actions). Two agents built with the same seed and
fed the same calls therefore produce the same numbers, whatever else runs in the process.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

import numpy as np
import torch

from labcore.torch_ref.irainbow_network import IQN


# ----------------------------------------------------------------------------------------------
# Replay


class FrameBuffer:
    """A ring buffer of single frames that returns stacks of ``n_frames`` consecutive rows.

    Arrays: ``states`` float32 [capacity, obs_size], ``actions`` int64 [capacity], ``rewards``
    float32 [capacity], ``dones`` float32 [capacity]; ``idx`` is the next row written, ``size``
    the number of rows written so far (at most ``capacity``).
    """

    def __init__(self, capacity: int, obs_size: int, n_frames: int):
        if n_frames < 1:
            raise ValueError(f"FrameBuffer.n_frames must be >= 1, got {n_frames}")
        if capacity < n_frames + 1:
            raise ValueError(f"FrameBuffer.capacity must be >= n_frames + 1 = {n_frames + 1}, got {capacity}")
        if obs_size < 1:
            raise ValueError(f"FrameBuffer.obs_size must be >= 1, got {obs_size}")
        self.capacity, self.obs_size, self.n_frames = capacity, obs_size, n_frames
        self.states = np.zeros((capacity, obs_size), np.float32)
        self.actions = np.zeros(capacity, np.int64)
        self.rewards = np.zeros(capacity, np.float32)
        self.dones = np.zeros(capacity, np.float32)
        self.idx = 0
        self.size = 0

    def _frame(self, obs: np.ndarray) -> np.ndarray:
        obs = np.asarray(obs, np.float32)
        if obs.size != self.obs_size:
            raise ValueError(f"an observation must hold {self.obs_size} values, got shape {obs.shape}")
        return obs.reshape(self.obs_size)

    def add(self, obs: np.ndarray, action: int, reward: float, done: float | bool) -> None:
        """Write one transition (obs [obs_size] or any shape with that many values) at ``idx``."""
        self.states[self.idx] = self._frame(obs)
        self.actions[self.idx] = action
        self.rewards[self.idx] = reward
        self.dones[self.idx] = done
        self.idx = (self.idx + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)

    def add_empty(self) -> None:
        """Skip ``n_frames - 1`` rows (an episode boundary); the rows are NOT cleared and ``size`` is unchanged."""
        self.idx = (self.idx + self.n_frames - 1) % self.capacity

    def current_state(self) -> np.ndarray:
        """The ``n_frames - 1`` rows before ``idx``, oldest first, wrapping around: float32 [n_frames - 1, obs_size]."""
        rows = (self.idx - (self.n_frames - 1) + np.arange(self.n_frames - 1)) % self.capacity
        return self.states[rows].copy()

    def sample_indices(self, batch_size: int, rng: np.random.Generator) -> np.ndarray:
        """int64 [B] start rows, uniform without replacement from ``range(max(1, size - n_frames - 1))``.

        Raises ValueError (from numpy) when that range holds fewer than ``batch_size`` rows: check
        ``IRainbowAgent.can_train`` first.
        """
        return np.asarray(rng.choice(max(1, self.size - self.n_frames - 1), batch_size, replace=False), np.int64)

    def gather(self, indices: np.ndarray | Sequence[int]) -> dict[str, np.ndarray]:
        """The minibatch whose stacks start at ``indices`` (int [B]).

        Returns numpy arrays: ``states`` float32 [B, n_frames * obs_size] (rows i .. i + n_frames - 1),
        ``next_states`` the same one row later, ``actions`` int64 [B, 1], ``rewards`` float32 [B, 1]
        and ``dones`` float32 [B, 1] of the stack's last row, and ``valid`` float32 [B, 1]:
        0 where any of the first ``n_frames - 1`` rows is done.
        """
        indices = np.asarray(indices, np.int64).reshape(-1)
        highest = self.capacity - self.n_frames - 1  # the next-state stack must stay inside the array
        if indices.size and (indices.min() < 0 or indices.max() > highest):
            raise ValueError(f"start indices must lie in [0, {highest}], got min {indices.min()} max {indices.max()}")
        batch = indices.shape[0]
        rows = indices[:, None] + np.arange(self.n_frames)              # [B, n_frames]
        last = rows[:, -1]
        return {
            "states": self.states[rows].reshape(batch, -1),
            "actions": self.actions[last].reshape(batch, 1),
            "rewards": self.rewards[last].reshape(batch, 1),
            "next_states": self.states[rows + 1].reshape(batch, -1),
            "dones": self.dones[last].reshape(batch, 1),
            "valid": (1.0 - np.any(self.dones[rows[:, :-1]] != 0, axis=-1)).astype(np.float32).reshape(batch, 1),
        }

    def sample(self, batch_size: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """``gather(sample_indices(batch_size, rng))``."""
        return self.gather(self.sample_indices(batch_size, rng))

    def __len__(self) -> int:
        return self.size


# ----------------------------------------------------------------------------------------------
# Agent


def quantile_huber_terms(td: torch.Tensor, taus: torch.Tensor, valid: torch.Tensor, kappa: float = 1.0) -> torch.Tensor:
    """Elementwise quantile Huber loss: td [B, N, N], taus [B, N, 1], valid [B, 1] -> [B, N, N].

    ``|tau - 1{td < 0}| * huber_kappa(td) * valid``, huber = 0.5 td^2 where |td| <= kappa, else
    kappa (|td| - kappa / 2); with kappa = 1 there is no further division by kappa.
    """
    abs_td = td.abs()
    huber = torch.where(abs_td <= kappa, 0.5 * td.pow(2), kappa * (abs_td - 0.5 * kappa))
    huber = huber * valid[:, :, None]
    return (taus - (td.detach() < 0).float()).abs() * huber / kappa


class IRainbowAgent:
    """One independent iRainbow learner: local and target IQN, Adam, and its own FrameBuffer.

    Both networks stay in training mode except while acting (quirk 6 of the module docstring).
    ``seed`` seeds the agent's own torch, numpy and Python generators (see the module docstring).
    """

    def __init__(self, obs_size: int, n_actions: int, *, n_frames: int = 5, layer_size: int = 250,
                 n_quantiles: int = 12, n_tau_act: int = 256, n_step: int = 3, gamma: float = 0.99,
                 lr: float = 2.5e-4, tau: float = 1e-3, sync_freq: int = 200, memory: int = 1024,
                 batch_size: int = 256, epsilon: float = 1.0, epsilon_decay: float = 1e-3,
                 epsilon_min: float = 0.0, grad_clip: float = 1.0, seed: int = 0):
        # (value, allowed) per field, so that the error names the field and its value.
        checks = {
            "obs_size": (obs_size, obs_size >= 1), "n_actions": (n_actions, n_actions >= 1),
            "n_frames": (n_frames, n_frames >= 1), "layer_size": (layer_size, layer_size >= 1),
            "n_quantiles": (n_quantiles, n_quantiles >= 1), "n_tau_act": (n_tau_act, n_tau_act >= 1),
            "n_step": (n_step, n_step >= 1), "gamma": (gamma, 0.0 <= gamma <= 1.0), "lr": (lr, lr > 0),
            "tau": (tau, 0.0 <= tau <= 1.0), "sync_freq": (sync_freq, sync_freq >= 1),
            "memory": (memory, memory >= n_frames + 1), "batch_size": (batch_size, batch_size >= 1),
            "epsilon": (epsilon, 0.0 <= epsilon <= 1.0), "epsilon_decay": (epsilon_decay, 0.0 <= epsilon_decay <= 1.0),
            "epsilon_min": (epsilon_min, 0.0 <= epsilon_min <= 1.0), "grad_clip": (grad_clip, grad_clip > 0),
        }
        for name, (value, allowed) in checks.items():
            if not allowed:
                raise ValueError(f"IRainbowAgent.{name} is out of range: {value!r}")
        self.obs_size, self.n_actions, self.n_frames = obs_size, n_actions, n_frames
        self.n_quantiles, self.n_tau_act, self.n_step, self.gamma = n_quantiles, n_tau_act, n_step, gamma
        self.tau, self.sync_freq, self.batch_size, self.grad_clip = tau, sync_freq, batch_size, grad_clip
        self.epsilon, self.epsilon_decay, self.epsilon_min = float(epsilon), epsilon_decay, epsilon_min
        self.seed = seed
        self.torch_generator = torch.Generator().manual_seed(seed)
        self.np_rng = np.random.default_rng(seed)
        self.py_random = random.Random(seed)
        self.local = IQN(n_frames * obs_size, n_actions, layer_size, generator=self.torch_generator)
        # sorrel builds both networks right after seeding with the same seed, so they start equal;
        # a second generator with the same seed does the same without touching the agent's stream.
        self.target = IQN(n_frames * obs_size, n_actions, layer_size, generator=torch.Generator().manual_seed(seed))
        self.target.set_generator(self.torch_generator)
        self.optimizer = torch.optim.Adam(self.local.parameters(), lr=lr)
        self.buffer = FrameBuffer(memory, obs_size, n_frames)

    # -- acting ------------------------------------------------------------------------------

    def stacked_state(self, obs: np.ndarray) -> np.ndarray:
        """The buffer's last ``n_frames - 1`` frames plus ``obs``, flattened: float32 [n_frames * obs_size]."""
        obs = np.asarray(obs, np.float32).reshape(1, -1)
        if obs.shape[1] != self.obs_size:
            raise ValueError(f"an observation must hold {self.obs_size} values, got {obs.shape[1]}")
        return np.concatenate([self.buffer.current_state(), obs], axis=0).reshape(-1)

    def take_action(self, obs: np.ndarray) -> int:
        """Epsilon-greedy: if ``random() > epsilon`` the argmax of the local network's Q-values
        (eval mode, ``n_tau_act`` taus) on the stacked state, else a uniform random action."""
        if self.py_random.random() > self.epsilon:
            state = torch.from_numpy(self.stacked_state(obs))[None]
            self.local.eval()
            try:
                with torch.no_grad():
                    q_values = self.local.get_qvalues(state, self.n_tau_act)
            finally:
                self.local.train()
            return int(torch.argmax(q_values, dim=1)[0])
        return self.py_random.randrange(self.n_actions)

    # -- learning ----------------------------------------------------------------------------

    def can_train(self) -> bool:
        """Whether the buffer's sampling range holds at least ``batch_size`` start rows."""
        return max(1, len(self.buffer) - self.n_frames - 1) >= self.batch_size

    def loss(self, batch: Mapping[str, np.ndarray | torch.Tensor], taus_next: torch.Tensor | np.ndarray | None = None,
             taus_target: torch.Tensor | np.ndarray | None = None, taus_expected: torch.Tensor | np.ndarray | None = None) -> torch.Tensor:
        """The scalar iRainbow loss of ``batch`` (``FrameBuffer.gather``'s layout), with a graph to the local net.

        taus_* [B, N, 1] (N = n_quantiles) fix the draws of the three forwards, in the order they
        run: local on next_states, target on next_states, local on states. The networks are used in
        whatever mode they are in (training mode in the agent, as in sorrel).
        """
        states = torch.as_tensor(batch["states"], dtype=torch.float32)
        next_states = torch.as_tensor(batch["next_states"], dtype=torch.float32)
        actions = torch.as_tensor(batch["actions"]).long().reshape(-1, 1)          # [B, 1]
        rewards = torch.as_tensor(batch["rewards"], dtype=torch.float32).reshape(-1, 1)
        dones = torch.as_tensor(batch["dones"], dtype=torch.float32).reshape(-1, 1)
        valid = torch.as_tensor(batch["valid"], dtype=torch.float32).reshape(-1, 1)
        b, n = states.shape[0], self.n_quantiles
        # Double DQN: the local network picks the next action from its mean quantile.
        next_local, _ = self.local(next_states, n, taus_next)                       # [B, N, A]
        best = next_local.mean(dim=1).argmax(dim=1, keepdim=True)                   # [B, 1]
        # The target network evaluates it; no detach (quirk 2).
        next_target, _ = self.target(next_states, n, taus_target)                   # [B, N, A]
        q_next = next_target.gather(2, best[:, None, :].expand(b, n, 1)).transpose(1, 2)   # [B, 1, N]
        # One-step rewards with an n-step discount (quirk 1).
        q_targets = rewards[:, :, None] + self.gamma ** self.n_step * q_next * (1.0 - dones[:, :, None])
        q_all, taus = self.local(states, n, taus_expected)                          # [B, N, A], [B, N, 1]
        q_expected = q_all.gather(2, actions[:, None, :].expand(b, n, 1))           # [B, N, 1]
        td = q_targets - q_expected                                                 # [B, N, N]: [b, i, j] = target j - expected i
        return quantile_huber_terms(td, taus, valid).mean()                         # over B * N * N (quirk 3)

    def train_step(self, batch: Mapping[str, np.ndarray | torch.Tensor] | None = None,
                   taus_next: torch.Tensor | np.ndarray | None = None, taus_target: torch.Tensor | np.ndarray | None = None,
                   taus_expected: torch.Tensor | np.ndarray | None = None) -> float | None:
        """One gradient step: sample (if ``batch`` is None; returns None when ``can_train()`` is
        false), loss, clip the global norm to ``grad_clip``, Adam, soft update. Returns the loss."""
        if batch is None:
            if not self.can_train():
                return None
            batch = self.buffer.sample(self.batch_size, self.np_rng)
        self.optimizer.zero_grad()
        loss = self.loss(batch, taus_next, taus_target, taus_expected)
        loss.backward()
        # torch scales by grad_clip / (norm + 1e-6) when norm > grad_clip; optax.clip_by_global_norm
        # divides by the norm itself, a relative difference of 1e-6 / norm that parity tests tolerate.
        torch.nn.utils.clip_grad_norm_(self.local.parameters(), self.grad_clip)
        self.optimizer.step()
        # The undetached targets left gradients on the target net; nothing reads them (quirk 2).
        self.target.zero_grad(set_to_none=True)
        self.soft_update()
        return float(loss.detach())

    @torch.no_grad()
    def soft_update(self) -> None:
        """target <- tau * local + (1 - tau) * target, every parameter (sigmas included)."""
        for target_param, local_param in zip(self.target.parameters(), self.local.parameters(), strict=True):
            target_param.copy_(self.tau * local_param + (1.0 - self.tau) * target_param)

    def hard_update(self) -> None:
        """target <- local (an exact copy)."""
        self.target.load_state_dict(self.local.state_dict())

    def start_epoch(self, epoch: int) -> None:
        """Mark the episode boundary in the buffer; hard-sync the target when ``epoch % sync_freq == 0`` (epoch 0 too)."""
        self.buffer.add_empty()
        if epoch % self.sync_freq == 0:
            self.hard_update()

    def end_epoch(self) -> None:
        """epsilon <- max(epsilon * (1 - epsilon_decay), epsilon_min), once per epoch."""
        self.epsilon = max(self.epsilon * (1.0 - self.epsilon_decay), self.epsilon_min)
