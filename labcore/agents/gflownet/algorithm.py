"""The gflownet record the registry lists (``labcore.agents.contract.Algorithm``): imports no JAX; its driver,
``labcore.agents.gflownet.run``, is imported when the record is used."""

from __future__ import annotations

from labcore.agents.contract import Algorithm
from labcore.agents.gflownet.config import NAME, GFlowNetConfig


def _driver():
    from labcore.agents.gflownet import run

    return run


ALGORITHM = Algorithm(
    NAME, "a GFlowNet on HyperGrid: all PyTorch, PyTorch sampling + JAX gradients, or all JAX "
          "(--trainer jax: checkpoints, resume, seeds)", GFlowNetConfig, _driver,
    eval_fields={"samples": "l1_samples"})
