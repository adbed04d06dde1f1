"""A run's config as plain data and back, and where a run folder keeps its checkpoints.

    fields = config_dict(config)                    # what config.json and every checkpoint's metadata hold
    config = config_from_dict(PPOConfig, fields)    # and back, tuples as tuples
    checkpoint_dir("runs/ppo")                      # runs/ppo/checkpoints (or the path, if it is that folder)

Its own module, importing neither JAX nor orbax, because both sides of a run read it: the results folder
(``labcore.runs``, which the command line opens without starting JAX) and the checkpoints
(``labcore.checkpoint``: ``save_run`` writes the config this way, ``open_run`` reads it back).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

CHECKPOINTS_NAME = "checkpoints"


def config_dict(config: Any) -> dict[str, Any]:
    """A config as plain JSON-able data: a dataclass's fields, or a mapping as it is."""
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        return dataclasses.asdict(config)
    return dict(config)


def config_from_dict(config_class: type, fields: Mapping[str, Any]) -> Any:
    """The inverse of ``config_dict``: a config dataclass from its JSON fields, lists made tuples where the
    field's default is one (a class with a ``from_dict`` of its own, e.g. a composed config, reads them itself)."""
    if hasattr(config_class, "from_dict"):
        return config_class.from_dict(fields)
    defaults = {f.name: f.default for f in dataclasses.fields(config_class)}
    return config_class(**{name: tuple(value) if isinstance(defaults.get(name), tuple) and isinstance(value, list)
                            else value for name, value in fields.items()})


def checkpoint_dir(path: str | os.PathLike) -> Path:
    """The checkpoints of a run folder, or ``path`` itself when it is a checkpoints folder."""
    path = Path(path)
    return path / CHECKPOINTS_NAME if (path / CHECKPOINTS_NAME).is_dir() else path
