"""IQNConfig: every setting of the iRainbow agent (the IQN port), validated on construction.

Its own module, importing no JAX, so that the command line can build a flag per field (and a
checkpoint's config be read back) in a fraction of a second; ``labcore.agents.iqn.core``, the agent
that runs on it, re-exports it. The experiment's config, ``labcore.agents.iqn.run_config.IQNRunConfig``,
composes it with the world's settings.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from labcore import devices, validation


@dataclasses.dataclass(frozen=True)
class IQNConfig:
    """Every iRainbow setting, validated on construction (defaults: sorrel's treasurehunt example).

    Frozen, hence hashable: pass it as a static argument to ``jax.jit``.
    ``fixed=True`` selects the flagged "fixed" variant (see ``labcore.agents.iqn.core``).
    """

    obs_size: int = 125  # one frame: (2r+1)^2 * 5 channels
    n_actions: int = 4
    n_frames: int = 5  # frames stacked into one network input
    hidden_size: int = 250  # units of every hidden layer (the original's layer_size)
    n_quantiles: int = 12  # taus per forward in the loss (N)
    n_tau_act: int = 256  # taus per forward when acting
    n_step: int = 3
    gamma: float = 0.99
    learning_rate: float = 2.5e-4  # Adam (the original's lr)
    target_update_rate: float = 1e-3  # soft (Polyak) target update after every train step (the original's tau)
    target_sync_epochs: int = 200  # epochs between hard target syncs (the original's sync_freq)
    buffer_size: int = 1024  # replay buffer capacity in rows (the original's memory)
    batch_size: int = 256
    max_grad_norm: float = 1.0  # global gradient-norm clip (the original's grad_clip)
    epsilon_start: float = 1.0
    epsilon_decay: float = 1e-3  # epsilon *= 1 - epsilon_decay once per epoch
    epsilon_end: float = 0.0  # epsilon's floor (the original's epsilon_min)
    fixed: bool = False  # the flagged "fixed" variant: true n-step returns + stop-gradient targets

    # What devices.auto_tune shrinks this config to, per device class. sorrel's defaults (250
    # units, 256 acting taus, batch 256, 1,024 rows) were made for a CPU: one agent's network is
    # about 0.2M parameters and its buffer 0.5 MB, so memory is never the limit. On a CPU the cost
    # is arithmetic: every turn each agent evaluates n_tau_act taus through hidden_size units, and
    # each train step batch_size x n_quantiles of them; a few cores keep the defaults as ceilings.
    # Accelerators have the arithmetic to spare and keep any size. The ceilings keep batch_size
    # within a full buffer (batch_size <= buffer_size - n_frames - lookahead).
    DEVICE_SIZES = devices.DeviceSizes(
        limits={
            "cpu": {"hidden_size": 250, "n_tau_act": 256, "batch_size": 256, "buffer_size": 1024},
            "gpu-small": {},
            "gpu-t4": {},
            "gpu": {},
            "tpu": {},
        }
    )

    def __post_init__(self) -> None:
        require = validation.requirer(self)
        validation.require_ints(self, "obs_size", "n_actions", "n_frames", "hidden_size", "n_quantiles", "n_tau_act",
                                "n_step", "target_sync_epochs", "buffer_size", "batch_size")
        validation.require_unit_interval(self, "gamma", "target_update_rate", "epsilon_start", "epsilon_decay",
                                         "epsilon_end")
        validation.require_positive(self, "learning_rate", "max_grad_norm")
        require(self.epsilon_end <= self.epsilon_start, "epsilon_end", f"<= epsilon_start ({self.epsilon_start})")
        require(isinstance(self.fixed, bool), "fixed", "a bool")
        # Sampling draws batch_size distinct starts from range(buffer_size - n_frames - lookahead)
        # at most: a larger batch could never train.
        most = self.buffer_size - self.n_frames - self.lookahead
        require(self.batch_size <= most, "batch_size",
                f"<= buffer_size - n_frames - {self.lookahead} = {most} "
                "(the most distinct samples a full buffer holds)")

    @property
    def in_features(self) -> int:
        """The network's input width F = n_frames * obs_size."""
        return self.n_frames * self.obs_size

    @property
    def lookahead(self) -> int:
        """Rows between a state's last frame and its next state's: 1 (faithful) or n_step (fixed)."""
        return self.n_step if self.fixed else 1

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

