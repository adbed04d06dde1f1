"""HyperGrid, the standard GFlowNet benchmark, as pure JAX functions (vmap- and scan-able); the
gymnax environment built on them is ``labcore.envs.hypergrid_env.HyperGridEnv``.

States are integer points of {0, ..., H-1}^D; every trajectory starts at the origin. There are
D + 1 actions: "+1 on dimension d" for d < D, masked when coordinate d is already H - 1, and
"exit" (action D), always legal, which ends the trajectory and makes the current point the
terminal object x. The reward, with a_d = |x_d / (H - 1) - 0.5|, is

    R(x) = R0 + R1 * prod_d 1(0.25 < a_d) + R2 * prod_d 1(0.3 < a_d < 0.4)

with (R0, R1, R2) = (0.1, 0.5, 2.0): a low floor everywhere, a plateau near the corners, and
peaks in a band inside each corner. A GFlowNet is trained to sample x with probability
R(x) / sum R: ``target_distribution`` gives that exactly (H^D terminal states), and
``l1_distance`` / ``jensen_shannon`` compare it with the empirical distribution of samples.

A trajectory that makes n moves has n + 1 actions (the last is exit); the longest has
D (H - 1) moves, so every trajectory fits in ``max_actions = D (H - 1) + 1`` steps.

``hypergrid_env.HyperGridEnv`` plays one trajectory as one episode, gymnax style, with ``HyperGrid`` as its
params: ``reset`` puts the state at the origin; ``step`` moves (reward 0) or exits (reward R(x),
terminated); ``action_mask`` is ``forward_mask``. Trainers batch trajectories as ``Trajectories``
and report their learning curve with ``l1_curve``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

EPSILON = 1e-6  # guards the strict float comparisons of the reward bands


@struct.dataclass
class HyperGrid:
    """The grid's static description, and ``HyperGridEnv``'s params. Every field is static
    (pytree_node=False), so a grid is hashable (a jit static argument) and also a leaf-less
    pytree (an ordinary argument of a jitted function, without retracing for equal grids)."""

    ndim: int = struct.field(pytree_node=False, default=2)
    height: int = struct.field(pytree_node=False, default=8)
    r0: float = struct.field(pytree_node=False, default=0.1)
    r1: float = struct.field(pytree_node=False, default=0.5)
    r2: float = struct.field(pytree_node=False, default=2.0)

    def __post_init__(self) -> None:
        if not (isinstance(self.ndim, int) and self.ndim >= 1):
            raise ValueError(f"HyperGrid.ndim must be an integer >= 1, got {self.ndim!r}")
        if not (isinstance(self.height, int) and self.height >= 2):
            raise ValueError(f"HyperGrid.height must be an integer >= 2, got {self.height!r}")
        if self.height**self.ndim > 5_000_000:
            raise ValueError(f"HyperGrid.height ** ndim = {self.height ** self.ndim} terminal states is too many to enumerate")
        if self.r0 <= 0:
            raise ValueError(f"HyperGrid.r0 must be > 0 (log R must be finite everywhere), got {self.r0}")

    @property
    def num_actions(self) -> int:
        return self.ndim + 1

    @property
    def exit_action(self) -> int:
        return self.ndim

    @property
    def max_actions(self) -> int:
        return self.ndim * (self.height - 1) + 1

    @property
    def num_states(self) -> int:
        return self.height**self.ndim

    @property
    def max_steps_in_episode(self) -> int:
        """gymnax's name for the episode length: ``max_actions``."""
        return self.max_actions


def reward(grid: HyperGrid, x: jax.Array) -> jax.Array:
    """R(x). x: [..., D] int -> [...] float32."""
    a = jnp.abs(x.astype(jnp.float32) / (grid.height - 1) - 0.5)
    plateau = jnp.all(a > 0.25 + EPSILON, axis=-1)
    peak = jnp.all((a > 0.3 + EPSILON) & (a < 0.4 - EPSILON), axis=-1)
    return grid.r0 + grid.r1 * plateau + grid.r2 * peak


def log_reward(grid: HyperGrid, x: jax.Array) -> jax.Array:
    """log R(x). x: [..., D] int -> [...]."""
    return jnp.log(reward(grid, x))


def forward_mask(grid: HyperGrid, state: jax.Array) -> jax.Array:
    """Legal actions at ``state``: [..., D] -> [..., D + 1] bool (exit always legal)."""
    moves = state < grid.height - 1
    return jnp.concatenate([moves, jnp.ones(moves.shape[:-1] + (1,), bool)], axis=-1)


def backward_mask(grid: HyperGrid, state: jax.Array) -> jax.Array:
    """Which "+1 on d" moves could have led to ``state``: [..., D] -> [..., D] bool (d with x_d > 0)."""
    return state > 0


def step(grid: HyperGrid, state: jax.Array, action: jax.Array) -> jax.Array:
    """The next state: +1 on dimension ``action``, unchanged for exit. state [..., D], action [...] int."""
    move = jax.nn.one_hot(action, grid.ndim, dtype=state.dtype)  # exit (= D) one-hots to all zeros
    return state + move


def encode(grid: HyperGrid, states: jax.Array) -> jax.Array:
    """One-hot per coordinate: [..., D] int -> [..., D * H] float32 (the networks' input, and
    ``HyperGridEnv``'s observation)."""
    return jax.nn.one_hot(states, grid.height, dtype=jnp.float32).reshape(*states.shape[:-1], grid.ndim * grid.height)


def all_states(grid: HyperGrid) -> np.ndarray:
    """[H^D, D] int32, every terminal state, in ``state_index`` order."""
    axes = np.meshgrid(*[np.arange(grid.height)] * grid.ndim, indexing="ij")
    return np.stack([axis.ravel() for axis in axes], axis=-1).astype(np.int32)


def state_index(grid: HyperGrid, x: jax.Array) -> jax.Array:
    """Row-major index of x in ``all_states``: [..., D] -> [...] int32."""
    weights = grid.height ** jnp.arange(grid.ndim - 1, -1, -1)
    return jnp.sum(x * weights, axis=-1).astype(jnp.int32)


def target_distribution(grid: HyperGrid) -> np.ndarray:
    """[H^D] float64: R(x) / sum R, the distribution a trained GFlowNet samples from."""
    rewards = np.asarray(reward(grid, jnp.asarray(all_states(grid))), np.float64)
    return rewards / rewards.sum()


def empirical_distribution(grid: HyperGrid, terminal_states: np.ndarray) -> np.ndarray:
    """[H^D] float64 frequencies of the sampled terminal states [N, D]."""
    return index_distribution(grid, np.asarray(state_index(grid, jnp.asarray(terminal_states))))


def index_distribution(grid: HyperGrid, indices: np.ndarray) -> np.ndarray:
    """[H^D] float64 frequencies of terminal states given by their ``state_index`` [N]."""
    counts = np.bincount(np.asarray(indices).ravel(), minlength=grid.num_states).astype(np.float64)
    return counts / max(1.0, counts.sum())


def l1_distance(p: np.ndarray, q: np.ndarray) -> float:
    """sum_x |p(x) - q(x)|: the SUM form (twice the total variation, in [0, 2]); some libraries
    report the mean instead, which is this divided by H^D."""
    return float(np.abs(np.asarray(p, np.float64) - np.asarray(q, np.float64)).sum())


def jensen_shannon(p: np.ndarray, q: np.ndarray) -> float:
    """Jensen-Shannon divergence in nats, in [0, log 2]."""
    p, q = np.asarray(p, np.float64), np.asarray(q, np.float64)
    m = 0.5 * (p + q)

    def kl(a: np.ndarray, b: np.ndarray) -> float:
        support = a > 0
        return float(np.sum(a[support] * np.log(a[support] / b[support])))

    return 0.5 * kl(p, m) + 0.5 * kl(q, m)


def l1_curve(config: Any, terminal_indices: np.ndarray, log_every: int) -> list[tuple[int, float]]:
    """(iteration, L1 of the last l1_samples terminal states up to it) every log_every iterations
    and at the end. config: anything with ``grid``, ``iterations`` and ``l1_samples`` (a
    ``GFlowNetConfig``); terminal_indices: [iterations, B] ``state_index`` of each sample, in
    sampling order; every trainer reports its L1 through this."""
    target = target_distribution(config.grid)
    flat = np.asarray(terminal_indices)
    points = sorted({*range(log_every, config.iterations + 1, log_every), config.iterations})
    recent = lambda iteration: flat[:iteration].ravel()[-config.l1_samples :]  # noqa: E731
    return [(i, l1_distance(index_distribution(config.grid, recent(i)), target)) for i in points]


class Trajectories(NamedTuple):
    """A batch of B trajectories padded to T = ``max_actions`` actions (the GFlowNet losses' input,
    ``labcore.agents.gflownet.core``): states s_0 = 0, ..., s_{L-1} = x, then x repeated; actions
    a_0 ... a_{L-1} = exit, then exit; L counts the actions including exit (1 <= L <= T)."""

    states: jax.Array  # [B, T + 1, D] int32
    actions: jax.Array  # [B, T] int32
    lengths: jax.Array  # [B] int32
    log_rewards: jax.Array  # [B] float32
