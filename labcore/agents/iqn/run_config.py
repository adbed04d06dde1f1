"""IQNRunConfig: one run of the multi-agent IQN experiment = how it runs, the world, the agents.

    config = IQNRunConfig(mode="jax_fused", epochs=200)          # the original experiment's world and agents
    config = IQNRunConfig(world=th.make_params(height=8), agent=IQNConfig(hidden_size=64))
    config = IQNRunConfig(height=8, hidden_size=64)               # the same config, field by field
    config.agent.hidden_size, config.world.height                 # 64, 8
    config.hidden_size, config.height                             # the same values, by their flat names

It is composed, not a copy: the run's own fields (``mode``, ``epochs``, ``seed``, ``num_worlds``,
``epochs_per_call``), the world (``world``: ``labcore.envs.treasurehunt_params.TreasurehuntParams``)
and the settings every agent shares (``agent``: ``labcore.agents.iqn.config.IQNConfig``). Each
default is defined once, in its own class. The world decides two of the agent's fields, the
observation width ``obs_size = (2 vision_radius + 1)^2 * 5`` and ``n_actions = 4``: ``agent`` holds
the world's values whatever was passed in.

Flat names. Every world and agent field can also be given, read and replaced by its own name
(``FLAT_FIELDS``; no two of them share a name): ``IQNRunConfig(height=8)`` replaces the height of
``world`` (the default world, or the one passed in), ``config.height`` reads it, and
``dataclasses.replace(config, hidden_size=64)`` works like a flat field's replace. The command
line (a flag per flat field: ``--height``, ``--hidden-size``), checkpoint overrides and
``labcore.devices.auto_tune`` (``DEVICE_SIZES`` names flat fields) rely on this.

Validation happens on construction: a bad value is a ValueError naming ``IQNRunConfig.<field>`` by
its flat name, which is also the flag that sets it (``--<field>`` with dashes).

Importing this module imports no JAX (nor does building a config): the world's params come from
``labcore.envs.treasurehunt_params``, the agent's config from ``labcore.agents.iqn.config``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from labcore import devices, validation
from labcore.agents.iqn.config import IQNConfig
from labcore.envs import treasurehunt_params as th  # the world's params, without the JAX world

NAME = "iqn"  # the registry's name: the command line's (train NAME) and the one its checkpoints record
MODES = ("pytorch", "jax_sequential", "jax_parallel", "jax_fused")
RUN_FIELDS = ("mode", "epochs", "seed", "num_worlds", "epochs_per_call")
# The agent fields the world decides (the observation width and the four moves).
WORLD_DECIDES = ("obs_size", "n_actions")
WORLD_FIELDS = tuple(field.name for field in dataclasses.fields(th.TreasurehuntParams))
AGENT_FIELDS = tuple(field.name for field in dataclasses.fields(IQNConfig) if field.name not in WORLD_DECIDES)
FLAT_FIELDS = RUN_FIELDS + WORLD_FIELDS + AGENT_FIELDS
assert len(set(FLAT_FIELDS)) == len(FLAT_FIELDS), "a world field and an agent field share a name"


@dataclasses.dataclass(frozen=True, init=False)
class IQNRunConfig:
    """One experiment: the run mode, the world and the agents (see the module docstring).

    Defaults: sorrel's treasurehunt example (10 x 10, 5 agents, 50 turns; ``IQNConfig``'s
    iRainbow settings), 1000 epochs in mode ``jax_fused``. Keyword arguments only.
    """

    mode: str = "jax_fused"
    epochs: int = 1000
    seed: int = 0
    num_worlds: int = 1  # independent worlds, each with its own agents (jax_fused only)
    epochs_per_call: int = 1  # epochs per compiled call of runners.JaxFusedRunner (the mode timings); train: 1
    world: th.TreasurehuntParams = th.TreasurehuntParams()
    agent: IQNConfig = IQNConfig()  # obs_size and n_actions: the world's

    # What devices.auto_tune shrinks this config to: the agents' ceilings of IQNConfig.DEVICE_SIZES,
    # plus the number of worlds run in one vmap (jax_fused). A world is 5 agents, each with its
    # network, target, Adam moments and buffer: estimated at about 75 MB with a train step's
    # activations (not measured on a GPU or TPU). On a CPU more worlds only queue on the same few
    # cores (4 keep two cores busy); 32 worlds (~2.4 GB) fit a GPU of 8 GiB, 64 a T4, 128 a TPU
    # v5e chip's 16 GiB; large GPUs keep the config. The names are flat fields.
    DEVICE_SIZES = devices.DeviceSizes(
        limits={kind: {**IQNConfig.DEVICE_SIZES.limits[kind], **worlds} for kind, worlds in {
            "cpu": {"num_worlds": 4}, "gpu-small": {"num_worlds": 32}, "gpu-t4": {"num_worlds": 64}, "gpu": {},
            "tpu": {"num_worlds": 128}}.items()}
    )

    def __init__(self, **fields: Any) -> None:
        """Every field by keyword: the run's own, ``world`` and ``agent``, and any world or agent
        field by its flat name (applied on top of ``world`` / ``agent``)."""
        unknown = sorted(set(fields) - set(FLAT_FIELDS) - {"world", "agent"})
        if unknown:
            decided = " (the world decides obs_size and n_actions)" if set(unknown) & set(WORLD_DECIDES) else ""
            raise TypeError(f"IQNRunConfig got unknown field(s) {unknown}{decided}; known: {list(FLAT_FIELDS)}")
        for field in dataclasses.fields(self):
            object.__setattr__(self, field.name, fields.get(field.name, field.default))
        self._check_run_fields()
        if not isinstance(self.world, th.TreasurehuntParams):
            validation.fail(self, "world", "a labcore.envs.treasurehunt.TreasurehuntParams")
        if not isinstance(self.agent, IQNConfig):
            validation.fail(self, "agent", "a labcore.agents.iqn.core.IQNConfig")
        # The world's and the agent's classes validate their own fields. Their messages are renamed
        # to this class, so that an error names the flat field (and command-line flag) the user set.
        try:
            world = dataclasses.replace(self.world, **{name: fields[name] for name in WORLD_FIELDS if name in fields})
            agent = dataclasses.replace(self.agent, obs_size=th.obs_size(world), n_actions=len(th.ACTIONS),
                                        **{name: fields[name] for name in AGENT_FIELDS if name in fields})
        except ValueError as error:
            raise ValueError(re.sub(r"^(TreasurehuntParams|IQNConfig)\.", "IQNRunConfig.", str(error))) from None
        object.__setattr__(self, "world", world)
        object.__setattr__(self, "agent", agent)
        if self.agent.fixed and self.mode == "pytorch":
            validation.fail(self, "fixed", "False in mode 'pytorch' (the PyTorch reference implements the faithful "
                                           "variant only)")

    def _check_run_fields(self) -> None:
        validation.require_choice(self, "mode", MODES)
        validation.require_ints(self, "epochs", "num_worlds", "epochs_per_call", minimum=1)
        validation.require_ints(self, "seed", minimum=0)
        # Only the fused mode runs several worlds or several epochs per call; elsewhere the setting
        # would silently do nothing, so it is an error.
        require = validation.requirer(self)
        require(self.num_worlds == 1 or self.mode == "jax_fused", "num_worlds",
                f"1 in mode {self.mode!r} (several worlds run only in mode 'jax_fused')")
        require(self.epochs_per_call == 1 or self.mode == "jax_fused", "epochs_per_call",
                f"1 in mode {self.mode!r} (only mode 'jax_fused' runs several epochs per call)")

    def __getattr__(self, name: str) -> Any:
        # Called only for names that are not attributes of the class: the world's and the agent's
        # fields, read through by their flat names.
        if name in WORLD_FIELDS:
            return getattr(self.world, name)
        if name in AGENT_FIELDS or name in WORLD_DECIDES:
            return getattr(self.agent, name)
        raise AttributeError(f"'IQNRunConfig' object has no attribute {name!r}")

    @staticmethod
    def flat_fields() -> tuple[dataclasses.Field, ...]:
        """The dataclass fields behind ``FLAT_FIELDS``, in that order (name, type, default): the
        run's own, the world's and the agent's (less the two the world decides)."""
        run = [field for field in dataclasses.fields(IQNRunConfig) if field.name in RUN_FIELDS]
        world = list(dataclasses.fields(th.TreasurehuntParams))
        agent = [field for field in dataclasses.fields(IQNConfig) if field.name in AGENT_FIELDS]
        return tuple(run + world + agent)

    def flat_dict(self) -> dict[str, Any]:
        """Every flat field's value: ``IQNRunConfig(**config.flat_dict()) == config``."""
        return {name: getattr(self, name) for name in FLAT_FIELDS}

    def as_dict(self) -> dict[str, Any]:
        """Plain data (config.json, checkpoint metadata): the run's fields, ``world`` and ``agent`` as dicts."""
        return dataclasses.asdict(self)

    @classmethod
    def smallest(cls, **overrides: Any) -> IQNRunConfig:
        """The smallest run that trains and evaluates: the fused mode, 6 epochs of 2 agents on a 6 x 6 world of 5
        turns, 8 hidden units. For tests and a first try of the whole lifecycle (seconds on a CPU), not for learning
        anything."""
        return cls(**{**dict(mode="jax_fused", epochs=6, height=6, width=6, n_agents=2, max_turns=5, hidden_size=8,
                             n_quantiles=2, n_tau_act=4, buffer_size=32, batch_size=4, n_frames=2), **overrides})

    @classmethod
    def from_dict(cls, fields: Mapping[str, Any]) -> IQNRunConfig:
        """The config of ``as_dict()``'s data (``world`` and ``agent`` as dicts, or flat fields)."""
        fields = dict(fields)
        if isinstance(fields.get("world"), Mapping):
            fields["world"] = th.TreasurehuntParams(**fields["world"])
        if isinstance(fields.get("agent"), Mapping):
            fields["agent"] = IQNConfig(**fields["agent"])
        return cls(**fields)
