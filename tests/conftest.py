"""Shared test set-up: paths and a quick-mode guard."""

from __future__ import annotations

import pathlib

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOKS_DIR = REPO_ROOT / "notebooks"


@pytest.fixture
def repo_root() -> pathlib.Path:
    return REPO_ROOT
