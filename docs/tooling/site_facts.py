"""Where labcore lives, read from the one source the Colab badges and the setup cell use.

``colab/setup_cell.py`` names the repository and the pinned ref Colab installs labcore from;
``colab/cell.py`` writes that into every notebook and badge. The site takes its repository link,
its address on GitHub Pages and each lesson's Colab launch link from the same line, so a fork or
a new release changes them all at once.
"""

from __future__ import annotations

import importlib.util
import pathlib
import sys

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]


def _cell_module():
    spec = importlib.util.spec_from_file_location("labcore_colab_cell", REPO_ROOT / "colab" / "cell.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def cell_source(root: pathlib.Path = REPO_ROOT):
    """The setup cell's (owner, repo, ref) as colab/cell.py parses it, in the repository at ``root``."""
    cell = _cell_module()
    return cell.parse_source(cell.cell_text(root))


def repository_url() -> str:
    source = cell_source()
    return f"https://github.com/{source.owner}/{source.repo}"


def site_url() -> str:
    """Where the release workflow publishes the site (GitHub Pages of the same repository)."""
    source = cell_source()
    return f"https://{source.owner}.github.io/{source.repo}/"


def colab_url(notebook_name: str) -> str:
    """The Colab launch link of one notebook: the badges' own prefix, so they always agree."""
    return cell_source().badge_prefix() + notebook_name
