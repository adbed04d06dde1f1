"""The Colab setup cell: pinned to a release, in step everywhere, and installing a working labcore.

colab/cell.py owns the cell (see its docstring). These tests hold it to its promises: the cell pins a
release tag or a commit (never a branch), every notebook, badge and copy agrees with it, and running
the cell as Colab does installs labcore non-editable from git into a fresh environment, importable
from outside the repository.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import shutil
import subprocess
import sys
import sysconfig

import pytest

from conftest import REPO_ROOT

import labcore

_spec = importlib.util.spec_from_file_location("colab_cell", REPO_ROOT / "colab" / "cell.py")
cell = importlib.util.module_from_spec(_spec)
sys.modules["colab_cell"] = cell  # dataclasses look their module up there
_spec.loader.exec_module(cell)

GOOD = 'LABCORE = "labcore @ git+https://github.com/someone/labcore.git@{ref}"\n'


def test_the_cell_pins_this_release():
    source = cell.parse_source(cell.cell_text())
    assert source.ref == f"v{labcore.__version__}", (
        "colab/setup_cell.py must install the release these notebooks belong to: "
        f"ref {source.ref!r}, labcore {labcore.__version__}; edit the cell, then `make colab-sync`")


@pytest.mark.parametrize("ref", ["v0.2.0", "v10.3.12", "0123456789abcdef0123456789abcdef01234567"])
def test_release_tags_and_commits_are_pins(ref):
    assert cell.parse_source(GOOD.format(ref=ref)).ref == ref


@pytest.mark.parametrize("ref", ["main", "master", "dev", "v0.2", "0123abc", "refs/heads/main"])
def test_branches_and_short_refs_are_refused(ref):
    with pytest.raises(ValueError, match="branch"):
        cell.parse_source(GOOD.format(ref=ref))


@pytest.mark.parametrize("text", [
    'LABCORE = "labcore @ git+https://github.com/someone/labcore.git"\n',  # no ref at all: a floating branch
    'LABCORE = "git+https://github.com/someone/labcore.git@v0.2.0"\n',
    'SOURCE = "labcore @ git+https://github.com/someone/labcore.git@v0.2.0"\n',
])
def test_malformed_cells_are_refused(text):
    with pytest.raises(ValueError, match="LABCORE"):
        cell.parse_source(text)


def test_notebooks_badges_and_copy_agree_with_the_cell():
    assert cell.out_of_step() == [], "run `make colab-sync` (python colab/cell.py sync)"


def test_the_gpu_runtime_requests_name_notebooks_that_exist():
    stems = {path.stem for path in (REPO_ROOT / "notebooks").glob("*.ipynb")}
    assert set(cell.GPU_NOTEBOOKS) <= stems, set(cell.GPU_NOTEBOOKS) - stems
    assert len(cell.GPU_NOTEBOOKS) < len(stems), "every notebook asks for a GPU"


def _copy_what_sync_writes(root):
    """The notebooks, colab/ and the README, copied under ``root`` for sync to rewrite."""
    for name in ("colab", "notebooks"):
        shutil.copytree(REPO_ROOT / name, root / name, ignore=shutil.ignore_patterns("runs"))
    shutil.copy(REPO_ROOT / "README.md", root / "README.md")


def test_a_notebook_that_lost_its_gpu_request_is_out_of_step_and_sync_restores_it(tmp_path):
    import nbformat

    _copy_what_sync_writes(tmp_path)
    path = tmp_path / "notebooks" / f"{cell.GPU_NOTEBOOKS[0]}.ipynb"
    notebook = nbformat.read(path, as_version=4)
    del notebook.metadata["accelerator"]
    nbformat.write(notebook, path)
    assert cell.out_of_step(tmp_path) == [f"notebooks/{path.name}: Colab runtime request"]
    cell.out_of_step(tmp_path, write=True)
    assert nbformat.read(path, as_version=4).metadata["accelerator"] == "GPU"
    assert cell.out_of_step(tmp_path) == []


def test_sync_rewrites_a_fork_everywhere(tmp_path):
    """A fork edits one line of setup_cell.py; sync carries it to every notebook, badge and copy."""
    _copy_what_sync_writes(tmp_path)
    setup = tmp_path / "colab" / "setup_cell.py"
    setup.write_text(setup.read_text().replace(
        f"github.com/{cell.parse_source(cell.cell_text()).owner}/", "github.com/a-fork/"))
    assert len(cell.out_of_step(tmp_path)) == len(list((tmp_path / "notebooks").glob("*.ipynb"))) + 2

    cell.out_of_step(tmp_path, write=True)

    assert cell.out_of_step(tmp_path) == []
    readme = (tmp_path / "README.md").read_text()
    assert "colab.research.google.com/github/a-fork/" in readme
    assert "colab.research.google.com/github/labcore-rl/" not in readme
    assert "github.com/a-fork/labcore.git@" in (tmp_path / "colab" / "README.md").read_text()
    assert "github.com/a-fork/" in (tmp_path / "notebooks" / "00_jax_primitives.ipynb").read_text()


def _fresh_environment_seeing(site_packages: str, folder: pathlib.Path) -> pathlib.Path:
    """A new venv whose path also holds `site_packages`, as a Colab runtime holds its preinstalled stack."""
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
    python = folder / "bin" / "python"
    # A new venv's own pip (23.2 with Python 3.11) rejects the `labcore @ git+file://...` form;
    # Colab's is current, and so is this one after the upgrade.
    subprocess.run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--upgrade", "pip"],
                   check=True, timeout=300)
    target = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                            check=True, capture_output=True, text=True).stdout.strip()
    # A plain path line, after the venv's own packages: the preinstalled stack becomes importable,
    # but .pth files there, such as this checkout's editable install of labcore, are not processed.
    pathlib.Path(target, "preinstalled.pth").write_text(site_packages + "\n")
    return python


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
@pytest.mark.skipif(os.environ.get("LABCORE_EXPECT_INSTALLED") == "1",
                    reason="under make test-compat the environment running this test was itself made by the Colab "
                           "cell's install, and the fresh one would see that labcore through it")
@pytest.mark.end_to_end
def test_the_colab_cell_installs_labcore_from_git_into_a_fresh_environment(tmp_path):
    commit = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"],
                            check=True, capture_output=True, text=True).stdout.strip()
    python = _fresh_environment_seeing(sysconfig.get_paths()["purelib"], tmp_path / "env")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    probe = ("import labcore, labcore.envs.vault, labcore.agents.ppo.core; "
             "print(labcore.__file__); print(labcore.__version__)")
    before = subprocess.run([python, "-c", probe], cwd=outside, capture_output=True, text=True)
    assert before.returncode != 0, "labcore must not be importable before the cell runs"

    cell.install_as_colab(str(python), f"git+file://{REPO_ROOT}@{commit}")

    after = subprocess.run([python, "-c", probe], cwd=outside, capture_output=True, text=True, check=True)
    location, version = after.stdout.split()
    assert pathlib.Path(location).is_relative_to(tmp_path / "env"), f"labcore imported from {location}"
    assert version == labcore.__version__
    direct_url = subprocess.run(
        [python, "-c", "import importlib.metadata as m; print(m.distribution('labcore').read_text('direct_url.json'))"],
        cwd=outside, capture_output=True, text=True, check=True).stdout
    assert '"vcs": "git"' in direct_url and commit in direct_url, "a non-editable install from git at the commit"
    assert '"editable": true' not in direct_url
