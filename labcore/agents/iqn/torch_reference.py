"""The PyTorch reference agent built from an ``IQNConfig``: the one place that maps the port's names to the original's.

``labcore.torch_ref.irainbow.IRainbowAgent`` mirrors the original code, so it keeps the original's
argument names; ``IQNConfig`` uses labcore's config vocabulary (the same names as DQNConfig and
PPOConfig). ``REFERENCE_NAMES`` lists the fields whose names differ:

    IQNConfig            IRainbowAgent
    hidden_size          layer_size
    learning_rate        lr
    target_update_rate   tau           (the Polyak rate; the port's tau is the quantile fraction)
    target_sync_epochs   sync_freq
    buffer_size          memory
    max_grad_norm        grad_clip
    epsilon_start        epsilon
    epsilon_end          epsilon_min

Importing this module needs no torch; calling ``reference_agent`` does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from labcore.agents.iqn.core import IQNConfig

if TYPE_CHECKING:
    from labcore.torch_ref.irainbow import IRainbowAgent

REFERENCE_NAMES = {"hidden_size": "layer_size", "learning_rate": "lr", "target_update_rate": "tau",
                   "target_sync_epochs": "sync_freq", "buffer_size": "memory", "max_grad_norm": "grad_clip",
                   "epsilon_start": "epsilon", "epsilon_end": "epsilon_min"}
# Fields with the same name on both sides; obs_size and n_actions are positional there.
_SAME_NAMES = ("n_frames", "n_quantiles", "n_tau_act", "n_step", "gamma", "batch_size", "epsilon_decay")


def reference_agent(config: IQNConfig, seed: int = 0) -> IRainbowAgent:
    """A PyTorch ``IRainbowAgent`` with ``config``'s settings and its own generators seeded with ``seed``.

    The reference implements the faithful variant only: ``config.fixed`` must be False.
    """
    from labcore.torch_ref.irainbow import IRainbowAgent

    if config.fixed:
        raise ValueError("the PyTorch reference implements the faithful variant only; got an IQNConfig with fixed=True")
    settings = {name: getattr(config, name) for name in _SAME_NAMES}
    settings.update({theirs: getattr(config, ours) for ours, theirs in REFERENCE_NAMES.items()})
    return IRainbowAgent(config.obs_size, config.n_actions, **settings, seed=seed)
