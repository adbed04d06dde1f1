"""The PyTorch iRainbow network (``NoisyLinear``, ``IQN``) and the bridge of its parameters to Flax.

Part of labcore's PyTorch reference of sorrel's iRainbow learner (``labcore.torch_ref.irainbow``
holds the agent, its buffer and the list of the original's quirks these layers reproduce: numbers
6 and 7, noisy layers with independent Gaussian noise, in training mode inside the loss). Every
random draw can be injected (taus as arguments, noise through ``set_noise``), so that the JAX port
(``labcore.nets.noisy``, ``labcore.nets.iqn``) can be compared with it value for value.

The bridge at the end copies parameters to and from the Flax layout of ``labcore.nets.iqn.IQN``
(plain dicts of numpy arrays: nothing here imports JAX or labcore's JAX code) and queues the
noise the JAX layers drew into these layers.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Mapping

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


@torch.no_grad()
def iqn_params_from_flax(params: Mapping, net: IQN) -> None:
    """Copy Flax-layout parameters (numpy or JAX arrays, see ``iqn_params_to_flax``) into ``net``, in place."""
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
    """Queue the noise draws of the JAX IQN (``labcore.nets.iqn.IQN.noise_draws(key)``) into ``net``.

    ``noise_draws``: ``{'ff_1': {'eps_kernel': [in, out] or a tuple of them (one per forward, in
    order), 'eps_bias': [out] or a tuple}, 'advantage': ..., 'value': ...}``. Each draw is transposed to PyTorch's [out, in] and queued
    with ``NoisyLinear.set_noise``, so the next training-mode forwards reuse JAX's noise exactly.
    """
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
