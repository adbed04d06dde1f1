"""Atari's ids in gymnasium: registering ALE's environments and telling an ALE id.

labcore plays Atari through ALE's own vector env (``labcore.envs.ale_vector``), which does the Nature
preprocessing in C++ (max of the last two frames of each action repeat, 84x84 grayscale, a stack of
4 frames, no-op starts); these two helpers are what it needs of gymnasium's registry.
"""

from __future__ import annotations

import gymnasium as gym


def register() -> None:
    """Register the ALE environments with gymnasium (idempotent). ale-py ships the ROMs."""
    import ale_py

    gym.register_envs(ale_py)


def is_atari_id(env_id: str) -> bool:
    """Whether ``env_id`` names an ALE environment (``ALE/Breakout-v5`` style)."""
    return env_id.startswith("ALE/")
