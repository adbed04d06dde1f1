"""A PyTorch multi-agent IQN learner ("iRainbow"): the reference the JAX port (``labcore.agents.iqn.core``) must match.

What sorrel does. The open-source *sorrel* framework (MIT licence; ``sorrel/models/pytorch/iqn.py``,
``layers.py``, ``buffers.py``, ``examples/treasurehunt_mp/``) trains one independent learner per
agent in a gridworld: an implicit quantile network (IQN) with a dueling head and noisy layers,
double-DQN targets, a target network that is soft-updated after every gradient step and hard-synced
every ``sync_freq`` epochs, and a small frame-stacking replay buffer per agent. Each agent acts
epsilon-greedily on the mean of 256 sampled quantiles of its last ``n_frames`` observations, and
trains once per epoch on a minibatch of stacked frames.

What this file is. labcore's own re-implementation of that behaviour, written from a description of
the original (``shared/reference/iqn_port.md``), not vendored and not copied: the same network, the
same buffer semantics, the same loss and the same update schedule, with hooks that let tests inject
every random draw (taus, noise, sampled indices) so that the JAX port can be compared with it value
for value. The bridge at the end copies parameters to and from the Flax layout of
``labcore.nets.iqn.IQN``.

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

import collections
import math
import random
from collections.abc import Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F

NOISY_LAYERS = ("ff_1", "advantage", "value")
DENSE_LAYERS = ("head1", "cos_embedding")


# ----------------------------------------------------------------------------------------------
# Network


def _float32_tensor(value: torch.Tensor | np.ndarray) -> torch.Tensor:
    """A detached float32 torch copy of a tensor or array-like (numpy, JAX)."""
    if isinstance(value, torch.Tensor):
        return value.detach().to(torch.float32).clone()
    return torch.from_numpy(np.array(value, dtype=np.float32, copy=True))


class NoisyLinear(torch.nn.Module):
    """A linear layer with independent Gaussian weight noise: ``y = x @ (mu_w + sigma_w * eps_w).T + mu_b + sigma_b * eps_b``.

    Parameters: ``weight`` [out, in] and ``bias`` [out] (the means, ~ U(-s, s) with
    s = sqrt(3 / in)), ``sigma_weight`` [out, in] and ``sigma_bias`` [out] (trainable, all
    ``sigma_init``). Training mode draws ``eps ~ N(0, 1)`` of the full weight and bias shapes on
    every forward (weight first, then bias) from ``generator``; eval mode uses the means only.
    """

    def __init__(self, in_features: int, out_features: int, sigma_init: float = 0.017,
                 generator: torch.Generator | None = None):
        super().__init__()
        if in_features < 1 or out_features < 1:
            raise ValueError(f"NoisyLinear needs in_features >= 1 and out_features >= 1, got {in_features}, {out_features}")
        self.in_features, self.out_features = in_features, out_features
        self.generator = generator
        bound = math.sqrt(3.0 / in_features)
        self.weight = torch.nn.Parameter(torch.empty(out_features, in_features).uniform_(-bound, bound, generator=generator))
        self.bias = torch.nn.Parameter(torch.empty(out_features).uniform_(-bound, bound, generator=generator))
        self.sigma_weight = torch.nn.Parameter(torch.full((out_features, in_features), float(sigma_init)))
        self.sigma_bias = torch.nn.Parameter(torch.full((out_features,), float(sigma_init)))
        # Injected draws, first in first out: one per training-mode forward, then fresh draws again.
        self._pending: collections.deque[tuple[torch.Tensor, torch.Tensor]] = collections.deque()
        # The draws of the last training-mode forward (eps_weight [out, in], eps_bias [out]), for tests.
        self.last_noise: tuple[torch.Tensor, torch.Tensor] | None = None

    def set_noise(self, eps_weight: torch.Tensor | np.ndarray, eps_bias: torch.Tensor | np.ndarray) -> None:
        """Queue one noise draw (eps_weight [out, in], eps_bias [out]) for the next training-mode forward.

        Each queued draw is used by exactly one training-mode forward, in the order queued (the
        agent's loss runs the local network twice: queue two draws to fix both); eval-mode forwards
        do not consume it. With the queue empty, forwards draw fresh noise.
        """
        eps_weight, eps_bias = _float32_tensor(eps_weight), _float32_tensor(eps_bias)
        if tuple(eps_weight.shape) != (self.out_features, self.in_features):
            raise ValueError(f"eps_weight must have shape {(self.out_features, self.in_features)}, got {tuple(eps_weight.shape)}")
        if tuple(eps_bias.shape) != (self.out_features,):
            raise ValueError(f"eps_bias must have shape {(self.out_features,)}, got {tuple(eps_bias.shape)}")
        self._pending.append((eps_weight, eps_bias))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [..., in] -> [..., out]; noisy in training mode, the means in eval mode."""
        if x.shape[-1] != self.in_features:
            raise ValueError(f"NoisyLinear expects {self.in_features} input features, got shape {tuple(x.shape)}")
        if not self.training:
            return F.linear(x, self.weight, self.bias)
        if self._pending:
            eps_weight, eps_bias = self._pending.popleft()
        else:
            eps_weight = torch.randn(self.out_features, self.in_features, generator=self.generator)
            eps_bias = torch.randn(self.out_features, generator=self.generator)
        self.last_noise = (eps_weight, eps_bias)
        return F.linear(x, self.weight + self.sigma_weight * eps_weight, self.bias + self.sigma_bias * eps_bias)


def _default_linear(in_features: int, out_features: int, generator: torch.Generator | None) -> torch.nn.Linear:
    """torch.nn.Linear with PyTorch's default initial distribution, U(-1/sqrt(in), 1/sqrt(in)) for
    weight and bias, but drawn from ``generator`` so that no global state is used."""
    layer = torch.nn.Linear(in_features, out_features)
    bound = 1.0 / math.sqrt(in_features)
    with torch.no_grad():
        layer.weight.uniform_(-bound, bound, generator=generator)
        layer.bias.uniform_(-bound, bound, generator=generator)
    return layer


class IQN(torch.nn.Module):
    """The implicit quantile network with a dueling noisy head.

    ``x [B, input_size]`` -> ``h = relu(head1(x))`` [B, L]; taus [B, n_tau, 1] ~ U(0, 1);
    ``cos(taus * pi * [1..n_cos])`` [B, n_tau, n_cos] -> ``relu(cos_embedding(.))`` [B, n_tau, L];
    ``z = (h[:, None, :] * that)`` reshaped to [B * n_tau, L]; ``z = relu(ff_1(z))``;
    ``out = value(z) + advantage(z) - advantage(z).mean(actions)`` reshaped to [B, n_tau, A].
    ``generator`` drives the initialisation, the taus and the noise (None: torch's global one).
    """

    def __init__(self, input_size: int, n_actions: int, layer_size: int = 250, n_cos: int = 64,
                 generator: torch.Generator | None = None):
        super().__init__()
        self.input_size, self.n_actions, self.layer_size, self.n_cos = input_size, n_actions, layer_size, n_cos
        self.generator = generator
        self.head1 = _default_linear(input_size, layer_size, generator)
        self.cos_embedding = _default_linear(n_cos, layer_size, generator)
        self.ff_1 = NoisyLinear(layer_size, layer_size, generator=generator)
        self.advantage = NoisyLinear(layer_size, n_actions, generator=generator)
        self.value = NoisyLinear(layer_size, 1, generator=generator)
        # pi * [1, ..., n_cos]: the index starts at 1, so no constant cos(0) = 1 feature. Computed in
        # float64 and rounded once to float32, as sorrel builds it (np.pi * i, then a float32 tensor).
        pis = (math.pi * torch.arange(1, n_cos + 1, dtype=torch.float64)).to(torch.float32)
        self.register_buffer("pis", pis.view(1, 1, n_cos), persistent=False)

    def set_generator(self, generator: torch.Generator | None) -> None:
        """Draw taus and noise from ``generator`` from now on (the agent's target shares the local's)."""
        self.generator = generator
        for name in NOISY_LAYERS:
            getattr(self, name).generator = generator

    def set_noise(self, draws: Mapping[str, tuple[torch.Tensor | np.ndarray, torch.Tensor | np.ndarray]]) -> None:
        """Queue one draw per noisy layer: ``{'ff_1': (eps_weight [out, in], eps_bias [out]), ...}``."""
        unknown = set(draws) - set(NOISY_LAYERS)
        if unknown:
            raise ValueError(f"unknown noisy layers {sorted(unknown)}; expected a subset of {NOISY_LAYERS}")
        for name, (eps_weight, eps_bias) in draws.items():
            getattr(self, name).set_noise(eps_weight, eps_bias)

    def sample_taus(self, batch_size: int, n_tau: int) -> torch.Tensor:
        """[B, n_tau, 1] float32 draws of U(0, 1) from the network's generator."""
        return torch.rand(batch_size, n_tau, 1, generator=self.generator)

    def forward(self, x: torch.Tensor, n_tau: int, taus: torch.Tensor | np.ndarray | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """x [B, input_size] (or [B, ...] flattening to it), taus [B, n_tau, 1] or None (drawn).

        Returns (quantiles [B, n_tau, A], taus [B, n_tau, 1]).
        """
        batch = x.shape[0]
        x = x.reshape(batch, -1)  # sorrel flattens whatever it gets
        if x.shape[1] != self.input_size:
            raise ValueError(f"IQN expects {self.input_size} input features per sample, got {x.shape[1]}")
        if taus is None:
            taus = self.sample_taus(batch, n_tau)
        else:
            taus = torch.as_tensor(taus, dtype=torch.float32)
            if tuple(taus.shape) != (batch, n_tau, 1):
                raise ValueError(f"taus must have shape {(batch, n_tau, 1)}, got {tuple(taus.shape)}")
        h = torch.relu(self.head1(x))                                   # [B, L]
        cos = torch.cos(taus * self.pis)                                # [B, n_tau, n_cos]
        cos_x = torch.relu(self.cos_embedding(cos))                     # [B, n_tau, L]
        z = (h[:, None, :] * cos_x).reshape(batch * n_tau, self.layer_size)
        z = torch.relu(self.ff_1(z))                                    # [B * n_tau, L]
        advantage = self.advantage(z)                                   # [B * n_tau, A]
        value = self.value(z)                                           # [B * n_tau, 1]
        out = value + advantage - advantage.mean(dim=1, keepdim=True)
        return out.view(batch, n_tau, self.n_actions), taus

    def get_qvalues(self, x: torch.Tensor, n_tau: int, taus: torch.Tensor | np.ndarray | None = None) -> torch.Tensor:
        """Q-values [B, A]: the mean over ``n_tau`` sampled quantiles."""
        quantiles, _ = self.forward(x, n_tau, taus)
        return quantiles.mean(dim=1)


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


# ----------------------------------------------------------------------------------------------
# Bridge: torch IQN <-> Flax parameters of labcore.nets.iqn.IQN


def _numpy32(tensor: torch.Tensor) -> np.ndarray:
    return np.array(tensor.detach().cpu().numpy(), dtype=np.float32, copy=True)


def iqn_params_to_flax(net: IQN) -> dict[str, dict[str, np.ndarray]]:
    """The network's parameters in the Flax layout, as float32 numpy copies.

    ``{'head1': {'kernel' [in, out], 'bias' [out]}, 'cos_embedding': {...},
    'ff_1' / 'advantage' / 'value': {'kernel' [in, out], 'bias' [out], 'sigma_kernel' [in, out],
    'sigma_bias' [out]}}``: Flax Dense kernels are [in, out], PyTorch weights [out, in].
    """
    params: dict[str, dict[str, np.ndarray]] = {}
    for name in DENSE_LAYERS:
        layer = getattr(net, name)
        params[name] = {"kernel": _numpy32(layer.weight.T), "bias": _numpy32(layer.bias)}
    for name in NOISY_LAYERS:
        layer = getattr(net, name)
        params[name] = {"kernel": _numpy32(layer.weight.T), "bias": _numpy32(layer.bias),
                        "sigma_kernel": _numpy32(layer.sigma_weight.T), "sigma_bias": _numpy32(layer.sigma_bias)}
    return params


def _unwrap(params: Mapping) -> Mapping:
    # Accept the variables dict {'params': {...}} as well as the params themselves.
    return params["params"] if set(params) == {"params"} else params


@torch.no_grad()
def iqn_params_from_flax(params: Mapping, net: IQN) -> None:
    """Copy Flax-layout parameters (numpy or JAX arrays, see ``iqn_params_to_flax``) into ``net``, in place."""
    params = _unwrap(params)
    fields = {name: {"kernel": "weight", "bias": "bias"} for name in DENSE_LAYERS}
    fields.update({name: {"kernel": "weight", "bias": "bias", "sigma_kernel": "sigma_weight", "sigma_bias": "sigma_bias"}
                   for name in NOISY_LAYERS})
    missing = set(fields) - set(params)
    if missing:
        raise ValueError(f"Flax params lack the layers {sorted(missing)}")
    for name, mapping in fields.items():
        layer = getattr(net, name)
        for flax_name, torch_name in mapping.items():
            if flax_name not in params[name]:
                raise ValueError(f"Flax params lack {name}/{flax_name}")
            # a copy: np.asarray of a JAX array is read-only, and torch.from_numpy warns on those
            value = np.array(params[name][flax_name], dtype=np.float32, copy=True)
            target = getattr(layer, torch_name)
            flax_shape = tuple(target.shape[::-1])  # kernels are [in, out], weights [out, in]; 1-d unchanged
            if tuple(value.shape) != flax_shape:
                raise ValueError(f"{name}/{flax_name}: expected shape {flax_shape}, got {tuple(value.shape)}")
            value = value.T
            target.copy_(torch.from_numpy(np.ascontiguousarray(value)))


def iqn_noise_from_flax(noise_draws: Mapping, net: IQN) -> None:
    """Queue the noise draws sown by the Flax IQN (collection ``'noise_draws'``) into ``net``.

    ``noise_draws``: ``{'ff_1': {'eps_kernel': [in, out] or a tuple of them (one per forward, in
    order), 'eps_bias': [out] or a tuple}, 'advantage': ..., 'value': ...}``; a wrapping
    ``{'noise_draws': ...}`` is accepted. Each draw is transposed to PyTorch's [out, in] and queued
    with ``NoisyLinear.set_noise``, so the next training-mode forwards reuse JAX's noise exactly.
    """
    if set(noise_draws) == {"noise_draws"}:
        noise_draws = noise_draws["noise_draws"]
    for name in NOISY_LAYERS:
        if name not in noise_draws:
            continue
        kernels, biases = noise_draws[name]["eps_kernel"], noise_draws[name]["eps_bias"]
        kernels = tuple(kernels) if isinstance(kernels, (tuple, list)) else (kernels,)
        biases = tuple(biases) if isinstance(biases, (tuple, list)) else (biases,)
        if len(kernels) != len(biases):
            raise ValueError(f"{name}: {len(kernels)} eps_kernel draws but {len(biases)} eps_bias draws")
        for kernel, bias in zip(kernels, biases, strict=True):
            getattr(net, name).set_noise(np.asarray(kernel, np.float32).T, np.asarray(bias, np.float32))
