"""The Treasurehunt world's description: ``TreasurehuntParams``, its sizes and its vocabulary.

The pure JAX world is ``labcore.envs.treasurehunt``, which re-exports every name here; this module
imports no JAX, so that the IQN experiment's config (``labcore.agents.iqn.run_config``), which
holds a world's params, can be built (the command line's flags, a checkpoint's config read back)
without importing JAX. ``labcore.envs.treasurehunt`` registers ``TreasurehuntParams`` with JAX as a
pytree without leaves (every field static, ``pytree_node=False`` in its metadata), so params are a
jit static argument or an ordinary argument that never retraces for equal params.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any

# Entity kinds; the same numbers index the observation channels.
EMPTY, WALL, SAND, GEM, AGENT = 0, 1, 2, 3, 4
N_KINDS = 5
ACTIONS = ("up", "down", "left", "right")


def _static(default: Any) -> Any:
    """A field that is part of a pytree's structure, not a leaf (flax.struct's ``pytree_node=False``)."""
    return dataclasses.field(default=default, metadata={"pytree_node": False})


@dataclasses.dataclass(frozen=True)
class TreasurehuntParams:
    """The world's description. Every field is static (pytree_node=False): shapes depend on the
    sizes, and keeping the values static too makes the params hashable, so they can be a jit
    static argument or be passed as a leaf-less pytree without retracing.

    Validated on construction (``make_params`` or the constructor): ValueError naming the field.
    """

    height: int = _static(10)
    width: int = _static(10)
    n_agents: int = _static(5)
    gem_value: float = _static(10.0)
    wall_value: float = _static(-1.0)
    spawn_prob: float = _static(0.02)
    vision_radius: int = _static(2)
    max_turns: int = _static(50)

    def __post_init__(self) -> None:
        # Normalise numpy scalars to Python numbers so equal params hash equal (jit cache keys).
        for name in ("height", "width", "n_agents", "vision_radius", "max_turns"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise ValueError(f"TreasurehuntParams.{name} must be an integer, got {value!r}")
            object.__setattr__(self, name, int(value))
        for name in ("gem_value", "wall_value", "spawn_prob"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
                raise ValueError(f"TreasurehuntParams.{name} must be a finite real number, got {value!r}")
            object.__setattr__(self, name, float(value))
        if self.height < 3:
            raise ValueError(f"TreasurehuntParams.height must be >= 3 (a wall border around an interior), got {self.height}")
        if self.width < 3:
            raise ValueError(f"TreasurehuntParams.width must be >= 3 (a wall border around an interior), got {self.width}")
        interior = (self.height - 2) * (self.width - 2)
        if not 1 <= self.n_agents <= interior:
            raise ValueError(
                f"TreasurehuntParams.n_agents must be in [1, {interior}] (one agent per interior cell), got {self.n_agents}"
            )
        if not 0.0 <= self.spawn_prob <= 1.0:
            raise ValueError(f"TreasurehuntParams.spawn_prob must be in [0, 1], got {self.spawn_prob}")
        if self.vision_radius < 0:
            raise ValueError(f"TreasurehuntParams.vision_radius must be >= 0, got {self.vision_radius}")
        if self.max_turns < 1:
            raise ValueError(f"TreasurehuntParams.max_turns must be >= 1, got {self.max_turns}")

    @property
    def max_steps_in_episode(self) -> int:
        """gymnax's name for the episode length: ``max_turns``."""
        return self.max_turns

    def replace(self, **updates: int | float) -> TreasurehuntParams:
        """These params with ``updates`` (``dataclasses.replace``, validated again)."""
        return dataclasses.replace(self, **updates)


def make_params(**overrides: int | float) -> TreasurehuntParams:
    """TreasurehuntParams with ``overrides``; ValueError naming the field on an unknown name or a bad value."""
    known = {field.name for field in dataclasses.fields(TreasurehuntParams)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(f"unknown TreasurehuntParams field(s) {unknown}; known: {sorted(known)}")
    return TreasurehuntParams(**overrides)


def obs_size(params: TreasurehuntParams) -> int:
    """Floats per agent observation: (2r+1)**2 * 5 (125 for r = 2)."""
    side = 2 * params.vision_radius + 1
    return side * side * N_KINDS
