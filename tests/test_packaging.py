"""The package as released: the metadata a wheel built from this checkout carries, the licence, the
test extra, and the workflows that test and publish it."""

import email
import pathlib
import re
import subprocess
import sys
import tomllib
import zipfile

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

import labcore

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]


@pytest.fixture(scope="module")
def wheel_metadata(tmp_path_factory) -> email.message.Message:
    """METADATA of a wheel built from this checkout (pip wheel, this environment's setuptools)."""
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--wheel-dir", str(out), str(REPO_ROOT)], check=True, timeout=300, capture_output=True)
    (wheel,) = out.glob("labcore-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        licence_files = [n for n in archive.namelist() if n.endswith("/LICENSE")]
        metadata = email.message_from_bytes(archive.read(name))
    metadata["X-Licence-Files"] = ",".join(licence_files)
    return metadata


def test_the_wheel_refuses_python_3_10_as_its_oldest_jax_does(wheel_metadata):
    requires = SpecifierSet(wheel_metadata["Requires-Python"])
    assert "3.10.13" not in requires and "3.11.0" in requires and "3.13.0" in requires
    # The oldest stack's jax (requirements-oldest.txt) is what sets the floor: it requires Python 3.11.
    oldest = (REPO_ROOT / "requirements-oldest.txt").read_text()
    assert re.search(r"^jax==0\.7\.2$", oldest, re.M)
    makefile = (REPO_ROOT / "Makefile").read_text()
    assert "v >= (3, 11)" in makefile and "labcore needs Python >= 3.11" in makefile


def test_the_licence_is_named_by_spdx_and_shipped(wheel_metadata):
    assert wheel_metadata["License-Expression"] == "Apache-2.0"
    text = (REPO_ROOT / "LICENSE").read_text()
    assert text.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert wheel_metadata["X-Licence-Files"].endswith(".dist-info/licenses/LICENSE")


def test_the_wheel_links_the_site_the_repository_and_the_changelog(wheel_metadata):
    urls = dict(value.split(", ", 1) for value in wheel_metadata.get_all("Project-URL"))
    assert set(urls) >= {"Homepage", "Documentation", "Repository", "Issues", "Changelog"}
    assert all(url.startswith("https://") for url in urls.values())
    assert wheel_metadata["Version"] == labcore.__version__


def test_the_test_extra_holds_every_tool_make_test_runs():
    extra = {Requirement(line).name for line in PYPROJECT["optional-dependencies"]["test"]}
    makefile = (REPO_ROOT / "Makefile").read_text()
    used = {"pytest"} | ({"pytest-xdist"} if re.search(r"^XDIST_\w+ \S*= .*-n ", makefile, re.M) else set()) \
        | ({"nbval"} if "--nbval-lax" in makefile else set())
    assert used == {"pytest", "pytest-xdist", "nbval"}  # what the Makefile's pytest runs use today
    assert used <= extra


def test_the_site_workflow_checks_its_tag_with_the_version_labcore_reports():
    workflow = (REPO_ROOT / ".github" / "workflows" / "site.yml").read_text()
    (command,) = re.findall(r"version=\$\((sed .*labcore/__init__\.py)\)", workflow)
    found = subprocess.run(["bash", "-c", command], cwd=REPO_ROOT, capture_output=True, text=True, check=True).stdout.strip()
    assert found == labcore.__version__  # the workflow compares the tag with "v" + this
    assert 'test "$GITHUB_REF_NAME" = "v$version"' in workflow
    assert "Deployment branches and tags" in workflow  # how to let github-pages accept a tag


def test_the_tests_workflow_runs_what_ci_runs():
    workflow = (REPO_ROOT / ".github" / "workflows" / "tests.yml").read_text()
    assert re.search(r"^  push:\n    branches: \[\"main\"\]\n  pull_request:", workflow, re.M)
    assert "bash .ci/run" in workflow and (REPO_ROOT / ".ci" / "run").exists()
    assert 'python-version: "3.11"' in workflow
