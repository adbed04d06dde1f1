"""Shared test set-up: paths and a quick-mode guard."""

from __future__ import annotations

import os
import pathlib

import pytest

# Before anything imports jax: 8 simulated CPU devices for the data-parallel tests (a process
# gets its device count once), and the scheduler setting that avoids jax 0.10.2's CPU hang when
# whole training runs are vmapped (see shared platform notes). Kernels that nbval starts inherit
# both, so the notebooks see the same 8 devices.
_FLAGS = ("--xla_force_host_platform_device_count=8", "--xla_cpu_enable_concurrency_optimized_scheduler=false")
os.environ["XLA_FLAGS"] = " ".join(
    [os.environ.get("XLA_FLAGS", "")] + [flag for flag in _FLAGS if flag.split("=")[0] not in os.environ.get("XLA_FLAGS", "")]
).strip()

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOKS_DIR = REPO_ROOT / "notebooks"


@pytest.fixture
def repo_root() -> pathlib.Path:
    return REPO_ROOT
