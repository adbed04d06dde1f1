"""offline/wheelhouse.py, the wheelhouse `make wheelhouse` builds for a machine with no network.

Its logic without a network: the platform tags a target installs, the target's markers, reading what
the target has (SKIP, a `pip list --format=freeze` file) and requirements.txt's pins, when the pins
give way to the target's own jax, pip's commands, the walk of the dependency graph with the target's
markers, the messages when pip finds no wheels, and a whole build against a pip that only pretends
(resolution rounds, what is left out, what is downloaded and deleted, the manifest). The build
against PyPI, and an install from its folder with no network, are run by hand (docs/guide/development.md).
"""

from __future__ import annotations

import importlib.util
import json
import pathlib
import shutil
import subprocess
import sys
import zipfile

import pytest

from conftest import REPO_ROOT

_spec = importlib.util.spec_from_file_location("wheelhouse", REPO_ROOT / "offline" / "wheelhouse.py")
wheelhouse = importlib.util.module_from_spec(_spec)
sys.modules["wheelhouse"] = wheelhouse  # dataclasses look their module up there
_spec.loader.exec_module(wheelhouse)


# ---------------------------------------------------------------------------------------- the target


def test_a_manylinux_target_installs_every_older_glibc_and_the_legacy_names():
    tags = wheelhouse.expand_platform("manylinux_2_28_x86_64")
    assert tags[0] == "manylinux_2_28_x86_64"
    # jaxlib 0.10.2's wheels are manylinux_2_27 only, ray 2.60's manylinux2014 only.
    for tag in ("manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux_2_5_x86_64", "manylinux1_x86_64"):
        assert tag in tags
    assert tags.index("manylinux_2_27_x86_64") < tags.index("manylinux_2_17_x86_64")
    assert "manylinux_2_29_x86_64" not in tags and not any("aarch64" in tag for tag in tags)


def test_aarch64_starts_at_manylinux2014_and_legacy_names_expand_too():
    tags = wheelhouse.expand_platform("manylinux_2_28_aarch64")
    assert tags[-2:] == ["manylinux_2_17_aarch64", "manylinux2014_aarch64"]
    assert wheelhouse.expand_platform("manylinux2014_x86_64")[0] == "manylinux_2_17_x86_64"
    assert wheelhouse.expand_platform("musllinux_1_2_x86_64") == ["musllinux_1_2_x86_64", "musllinux_1_1_x86_64", "musllinux_1_0_x86_64"]


def test_macos_and_windows_targets():
    mac = wheelhouse.expand_platform("macosx_14_0_arm64")
    assert mac[0] == "macosx_14_0_arm64" and "macosx_11_0_arm64" in mac and "macosx_14_0_universal2" in mac
    assert wheelhouse.expand_platform("win_amd64") == ["win_amd64"]


def test_an_unknown_platform_is_refused_with_examples():
    with pytest.raises(wheelhouse.WheelhouseError, match="manylinux_2_28_x86_64"):
        wheelhouse.expand_platform("ubuntu-22.04")


@pytest.mark.parametrize(
    "platform, expected",
    [
        ("manylinux_2_28_x86_64", {"sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64"}),
        ("manylinux2014_aarch64", {"sys_platform": "linux", "platform_machine": "aarch64"}),
        ("macosx_14_0_arm64", {"sys_platform": "darwin", "platform_system": "Darwin", "platform_machine": "arm64"}),
        ("win_amd64", {"sys_platform": "win32", "os_name": "nt", "platform_machine": "AMD64"}),
    ],
)
def test_the_target_s_marker_values(platform, expected):
    markers = wheelhouse.marker_environment("3.12", platform)
    assert markers["python_version"] == "3.12" and markers["python_full_version"].startswith("3.12.")
    assert expected.items() <= markers.items()
    assert wheelhouse.marker_environment("3.12.4", platform)["python_full_version"] == "3.12.4"


def test_pip_chooses_wheels_for_the_target_not_for_this_python():
    target = wheelhouse.Target("3.12", "manylinux_2_28_x86_64")
    options = target.pip_options()
    assert "--only-binary=:all:" in options
    assert options[options.index("--python-version") + 1] == "3.12"
    platforms = [options[i + 1] for i, option in enumerate(options) if option == "--platform"]
    assert platforms == wheelhouse.expand_platform("manylinux_2_28_x86_64")


# ------------------------------------------------------------------------------------ what to skip


def test_skip_takes_names_and_pinned_names_separated_by_spaces_or_commas():
    assert wheelhouse.parse_skip("jax==0.11.2 jaxlib==0.11.2, torch Jax_CUDA12.Plugin") == {
        "jax": "0.11.2", "jaxlib": "0.11.2", "torch": None, "jax-cuda12-plugin": None}


def test_skip_from_reads_pip_freeze_output():
    freeze = "\n".join([
        "# packages of the GPU image",
        "jax==0.11.2",
        "torch==2.13.0+cu128",
        "typing_extensions==4.16.0  # comment",
        "mylib @ file:///build/mylib-1.0-py3-none-any.whl",
        "-e git+https://example.org/tools.git@abc#egg=tools",
        "",
    ])
    assert wheelhouse.parse_skip(freeze) == {
        "jax": "0.11.2", "torch": "2.13.0+cu128", "typing-extensions": "4.16.0", "mylib": None, "tools": None}


def test_skip_refuses_what_it_cannot_read():
    with pytest.raises(wheelhouse.WheelhouseError, match="name or name==version"):
        wheelhouse.parse_skip("jax>=0.7")


def test_a_version_pip_cannot_compare_becomes_a_name_only():
    skip, notes = wheelhouse.comparable({"jax": "0.11.2", "weird": "1.0-custom build"})
    assert skip == {"jax": "0.11.2", "weird": None}
    assert len(notes) == 1 and "weird" in notes[0]


def test_the_pins_are_requirements_txt_s_exact_lines(tmp_path):
    pins = tmp_path / "requirements.txt"
    pins.write_text("# comment\nFarama-Notifications==0.0.6\njax==0.10.2  # tested\nfoo>=1\n-e .\n")
    assert wheelhouse.read_pins(pins) == {"farama-notifications": "0.0.6", "jax": "0.10.2"}
    assert wheelhouse.read_pins(REPO_ROOT / "requirements.txt")["jax"]  # the real file parses


def test_the_pins_hold_for_a_target_with_the_pinned_jax_or_none():
    pins = {"jax": "0.10.2", "jaxlib": "0.10.2", "flax": "0.12.8"}
    kept, versions, notes = wheelhouse.choose_pins(pins, {"jaxlib": "0.10.2", "torch": None}, "requirements.txt")
    assert kept == pins and notes == [] and "requirements.txt" in versions
    kept, _, _ = wheelhouse.choose_pins(pins, {}, "requirements.txt")
    assert kept == pins


def test_a_target_with_another_jax_gets_the_newest_versions_that_fit_it():
    # requirements.txt's flax 0.12.8 installs beside jax 0.11.2 and then fails to import there.
    pins = {"jax": "0.10.2", "jaxlib": "0.10.2", "flax": "0.12.8"}
    kept, versions, notes = wheelhouse.choose_pins(pins, {"jax": "0.11.2", "jaxlib": "0.11.2"}, "requirements.txt")
    assert kept == {}
    assert "jax 0.11.2" in versions and "0.10.2" in notes[0]


def test_jax_left_out_without_a_version_is_assumed_to_be_the_pinned_one():
    kept, _, notes = wheelhouse.choose_pins({"jax": "0.10.2"}, {"jax": None}, "requirements.txt")
    assert kept == {"jax": "0.10.2"}
    assert "jax==VERSION" in notes[0]


def test_a_stub_wheel_holds_only_the_name_and_version(tmp_path):
    stub = wheelhouse.stub_wheel(tmp_path, "jax-cuda12-plugin", "0.11.2")
    assert stub.name == "jax_cuda12_plugin-0.11.2-py3-none-any.whl"
    with zipfile.ZipFile(stub) as archive:
        metadata = archive.read("jax_cuda12_plugin-0.11.2.dist-info/METADATA").decode()
        assert "Name: jax-cuda12-plugin\nVersion: 0.11.2\n" in metadata and "Requires-Dist" not in metadata
        assert "jax_cuda12_plugin-0.11.2.dist-info/RECORD" in archive.namelist()


# ---------------------------------------------------------------------------------- pip's commands


def test_the_resolution_is_a_dry_run_with_a_report_and_the_constraints(tmp_path):
    target = wheelhouse.Target("3.12", "manylinux_2_28_x86_64")
    command = wheelhouse.resolve_command(target, ["labcore @ file:///x.whl", "/stubs/jax-0.11.2-py3-none-any.whl"],
                                         tmp_path / "c.txt", tmp_path / "r.json", tmp_path / "t")
    assert command[:4] == [sys.executable, "-m", "pip", "install"]
    assert {"--dry-run", "--ignore-installed", "--only-binary=:all:"} <= set(command)
    assert command[command.index("--report") + 1] == str(tmp_path / "r.json")
    assert command[command.index("--constraint") + 1] == str(tmp_path / "c.txt")
    assert command[-2:] == ["labcore @ file:///x.whl", "/stubs/jax-0.11.2-py3-none-any.whl"]
    assert "--index-url" not in command and "--extra-index-url" not in command


def test_torch_s_cpu_build_is_looked_up_alone_on_pytorch_s_index(tmp_path):
    target = wheelhouse.Target("3.12", "manylinux_2_28_x86_64")
    command = wheelhouse.cpu_torch_command(target, "2.13.0", tmp_path / "none.txt", tmp_path / "r.json", tmp_path / "t")
    assert command[-1] == "torch==2.13.0+cpu" and "--no-deps" in command
    assert command[command.index("--index-url") + 1] == wheelhouse.TORCH_CPU_INDEX
    assert command[command.index("--retries") + 1] == "1"  # an index out of reach costs seconds, not minutes
    assert wheelhouse.cpu_torch_command(target, None, tmp_path / "n", tmp_path / "r", tmp_path / "t")[-1] == "torch"


def test_the_download_takes_exactly_the_chosen_files_without_configured_constraints(tmp_path):
    target = wheelhouse.Target("3.11", "manylinux_2_28_x86_64")
    command = wheelhouse.download_command(target, ["https://host/a-1-py3-none-any.whl#sha256=ab"], tmp_path, tmp_path / "none.txt")
    assert command[3] == "download" and "--no-deps" in command
    assert command[command.index("--constraint") + 1] == str(tmp_path / "none.txt")
    assert command[-1] == "https://host/a-1-py3-none-any.whl#sha256=ab"


# --------------------------------------------------------------------------- the graph, for the target


def chosen(name, version, *requires):
    return wheelhouse.Chosen(name, version, tuple(requires), f"https://files.example/{name}-{version}-py3-none-any.whl", "ab")


GRAPH = {
    "labcore": chosen("labcore", "0.2.0", "alpha>=1", "jax>=0.7.2", "torch>=2.4; extra == 'torch'",
                      "gamma; python_version < '3.11'"),
    "alpha": chosen("alpha", "1.5"),
    "jax": chosen("jax", "0.10.2", "opt-einsum", "alpha>=1"),
    "opt-einsum": chosen("opt_einsum", "3.4.0"),
    "torch": chosen("torch", "2.13.0+cpu", "sympy"),
    "sympy": chosen("sympy", "1.14.0"),
}


def test_the_walk_follows_the_target_s_markers_and_extras():
    py312 = wheelhouse.marker_environment("3.12", "manylinux_2_28_x86_64")
    found = wheelhouse.walk(GRAPH, "labcore", set(), py312, {})
    assert found.needed == {"labcore", "alpha", "jax", "opt-einsum"} and found.missing == [] and found.unmet == []
    with_torch = wheelhouse.walk(GRAPH, "labcore", {"torch"}, py312, {})
    assert {"torch", "sympy"} <= with_torch.needed


def test_the_walk_finds_what_pip_left_out_for_this_python_s_markers():
    py310 = wheelhouse.marker_environment("3.10", "manylinux_2_28_x86_64")
    found = wheelhouse.walk(GRAPH, "labcore", set(), py310, {})
    assert [str(requirement) for requirement in found.missing] == ['gamma; python_version < "3.11"']


def test_the_walk_stops_at_what_the_target_has_and_checks_its_version():
    py312 = wheelhouse.marker_environment("3.12", "manylinux_2_28_x86_64")
    found = wheelhouse.walk(GRAPH, "labcore", {"torch"}, py312, {"jax": "0.11.2", "torch": None})
    assert found.needed == {"labcore", "alpha"}  # opt-einsum came with jax, sympy with torch
    too_old = wheelhouse.walk(GRAPH, "labcore", set(), py312, {"jax": "0.6.0"})
    assert too_old.unmet and "jax 0.6.0" in too_old.unmet[0]


# ----------------------------------------------------------------------------------------- failures

PINNED_NUMPY = """\
The conflict is caused by:
    labcore 0.2.0 depends on numpy>=2.0
    The user requested (constraint) numpy==2.4.6
ERROR: ResolutionImpossible: for help visit https://pip.pypa.io/en/latest/topics/dependency-resolution/
"""
HELD_NUMPY = """\
The conflict is caused by:
    The user requested numpy 1.26.4 (from /tmp/labcore-wheelhouse-x/stubs/numpy-1.26.4-py3-none-any.whl)
    labcore 0.2.0 depends on numpy>=2.0
"""
NO_WHEEL = """\
ERROR: Could not find a version that satisfies the requirement distrax>=0.1.7 (from labcore) (from versions: 0.1.5)
ERROR: No matching distribution found for distrax>=0.1.7 (from labcore)
"""


def test_a_pin_without_a_wheel_for_the_target_is_named_with_the_way_out():
    target = wheelhouse.Target("3.10", "manylinux_2_28_x86_64")
    message = wheelhouse.explain_resolution_failure(PINNED_NUMPY, target, {"numpy": "2.4.6"}, "requirements.txt", {})
    assert "CPython 3.10 on manylinux_2_28_x86_64" in message
    assert "requirements.txt pins numpy==2.4.6" in message and "PINS=" in message


def test_a_target_s_version_that_does_not_fit_is_named_with_the_way_out():
    target = wheelhouse.Target("3.11", "manylinux_2_28_x86_64")
    message = wheelhouse.explain_resolution_failure(HELD_NUMPY, target, {"numpy": "2.4.6"}, "requirements.txt", {"numpy": "1.26.4"})
    assert "The target's numpy==1.26.4" in message and "skip list" in message
    assert "requirements.txt pins" not in message


def test_a_package_without_a_wheel_for_the_target_is_named():
    target = wheelhouse.Target("3.10", "manylinux_2_28_x86_64")
    message = wheelhouse.explain_resolution_failure(NO_WHEEL, target, {}, "", {})
    assert "No wheel of distrax>=0.1.7 fits this target" in message and "PLATFORM" in message


def test_pip_s_progress_lines_are_left_out_of_what_is_shown():
    output = "Collecting jax\n  Downloading jax-0.10.2.whl\nWARNING: Location 'file:///x' is ignored: it is neither\n" + NO_WHEEL
    assert wheelhouse.pip_messages(output) == NO_WHEEL


# --------------------------------------------------------------------------- a build, with pip pretending


class PretendPip:
    """Stands in for pip: answers the resolution with GRAPH (and whatever was asked for beyond it),
    writes downloaded files, and records every command with the constraints it was given."""

    def __init__(self):
        self.commands, self.constraints = [], []

    def __call__(self, command, what, capture=False):
        self.commands.append(command)
        if "download" in command:
            dest = pathlib.Path(command[command.index("--dest") + 1])
            for url in (part for part in command if part.startswith("https://")):
                (dest / url.split("#")[0].rsplit("/", 1)[-1]).write_text("wheel")
        elif "--report" in command:
            self.constraints.append(pathlib.Path(command[command.index("--constraint") + 1]).read_text())
            if "--index-url" in command:  # torch's CPU build
                items = [GRAPH["torch"]]
            else:
                asked = {pathlib.Path(part).name.split("-")[0] for part in command if "/stubs/" in part}
                items = [item for name, item in GRAPH.items() if name not in asked] + (
                    [chosen("gamma", "2.0")] if "gamma" in command else [])
            report = {"install": [{"metadata": {"name": item.name, "version": item.version, "requires_dist": list(item.requires)},
                                   "download_info": {"url": item.url, "archive_info": {"hashes": {"sha256": "ab"}}}}
                                  for item in items]}
            pathlib.Path(command[command.index("--report") + 1]).write_text(json.dumps(report))
        return subprocess.CompletedProcess(command, 0, "", "")


@pytest.fixture
def pretend(tmp_path, monkeypatch):
    root = tmp_path / "checkout"
    root.mkdir()
    (root / "requirements.txt").write_text("alpha==1.5\njax==0.10.2\ntorch==2.13.0\n-e .\n")
    pip = PretendPip()
    monkeypatch.setattr(wheelhouse, "REPO_ROOT", root)
    monkeypatch.setattr(wheelhouse, "run", pip)
    monkeypatch.setattr(wheelhouse, "ensure_recent_pip", lambda scratch: None)
    monkeypatch.setattr(wheelhouse, "build_labcore_wheel",
                        lambda folder: (folder.mkdir(parents=True), wheelhouse.stub_wheel(folder, "labcore", "0.2.0"))[1])
    return pip


def test_a_build_leaves_out_what_the_target_has_and_adds_what_its_markers_need(tmp_path, pretend):
    dest = tmp_path / "wheelhouse"
    target = wheelhouse.Target("3.10", "manylinux_2_28_x86_64")
    wheels = wheelhouse.build(target, dest, {"jax": "0.11.2", "torch": None}, "cpu", "requirements.txt", [])
    assert sorted(wheel.name for wheel in wheels) == [
        "alpha-1.5-py3-none-any.whl", "gamma-2.0-py3-none-any.whl", "labcore-0.2.0-py3-none-any.whl"]
    resolutions = [command for command in pretend.commands if "--report" in command]
    assert len(resolutions) == 2, "a second round for gamma, which pip on this Python left out"
    assert any(part.endswith("jax-0.11.2-py3-none-any.whl") for part in resolutions[0]), "jax 0.11.2 as installed"
    assert not any("--index-url" in command for command in pretend.commands), "the target has torch"
    assert pretend.constraints[0] == "", "the target's jax is not the pinned one: no pins"
    manifest = (dest / wheelhouse.MANIFEST).read_text()
    assert "alpha==1.5\ngamma==2.0\n" in manifest and "jax==0.11.2 torch" in manifest
    assert 'pip install --no-index --find-links wheelhouse "labcore[torch]"' in manifest


def test_a_build_pins_and_takes_torch_s_cpu_build_on_linux(tmp_path, pretend):
    dest = tmp_path / "wheelhouse"
    wheels = wheelhouse.build(wheelhouse.Target("3.11", "manylinux_2_28_x86_64"), dest, {}, "cpu", "requirements.txt", [])
    assert {"torch-2.13.0+cpu-py3-none-any.whl", "sympy-1.14.0-py3-none-any.whl", "jax-0.10.2-py3-none-any.whl"} <= {
        wheel.name for wheel in wheels}
    torch_lookup, resolution = [command for command in pretend.commands if "--report" in command][:2]
    assert torch_lookup[-1] == "torch==2.13.0+cpu"
    assert resolution[-1].startswith("torch @ https://files.example/torch-2.13.0+cpu")
    assert pretend.constraints[1] == "alpha==1.5\njax==0.10.2\n", "torch is a direct requirement, so not a constraint"


def test_a_second_build_deletes_the_wheels_it_no_longer_needs(tmp_path, pretend):
    dest = tmp_path / "wheelhouse"
    target = wheelhouse.Target("3.11", "manylinux_2_28_x86_64")
    wheelhouse.build(target, dest, {}, "none", "requirements.txt", [])
    assert (dest / "jax-0.10.2-py3-none-any.whl").exists()
    wheelhouse.build(target, dest, {"jax": None}, "none", "requirements.txt", [])
    assert not (dest / "jax-0.10.2-py3-none-any.whl").exists() and (dest / "alpha-1.5-py3-none-any.whl").exists()


def test_a_folder_of_someone_else_s_wheels_is_refused(tmp_path, pretend):
    dest = tmp_path / "mine"
    dest.mkdir()
    (dest / "precious-1.0-py3-none-any.whl").write_text("")
    with pytest.raises(wheelhouse.WheelhouseError, match="did not put there"):
        wheelhouse.build(wheelhouse.Target("3.11", "manylinux_2_28_x86_64"), dest, {}, "none", "", [])
    assert pretend.commands == []


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--python", "python3.12"], "a version such as 3.12"),
        (["--platform", "ubuntu"], "unknown platform tag"),
        (["--skip-from", "/nonexistent/freeze.txt"], "no file /nonexistent/freeze.txt"),
        (["--skip", "jax>=0.7"], "name or name==version"),
    ],
)
def test_the_command_line_says_what_is_wrong_before_building(arguments, message, capsys, monkeypatch):
    monkeypatch.setattr(wheelhouse, "build", lambda *args: pytest.fail("built"))
    assert wheelhouse.main(arguments) == 1
    assert message in capsys.readouterr().err


# ------------------------------------------------------------------------------ make wheelhouse


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_wheelhouse_passes_its_variables_to_the_script():
    dry = subprocess.run(["make", "-n", "wheelhouse", "PY=3.12", "PLATFORM=manylinux_2_28_x86_64", "SKIP=jax==0.11.2 torch",
                          "SKIP_FROM=freeze.txt", "PINS=", "TORCH=none", "DEST=/tmp/wh"],
                         cwd=REPO_ROOT, capture_output=True, text=True, check=True).stdout
    line = " ".join(dry.replace("\\\n", " ").split())
    assert "offline/wheelhouse.py --dest '/tmp/wh' --torch 'none' --pins '' --skip 'jax==0.11.2 torch'" in line
    assert "--python '3.12' --platform 'manylinux_2_28_x86_64' --skip-from 'freeze.txt'" in line
    default = subprocess.run(["make", "-n", "wheelhouse"], cwd=REPO_ROOT, capture_output=True, text=True, check=True).stdout
    assert "--dest 'wheelhouse' --torch 'cpu' --pins 'requirements.txt'" in default and "--python" not in default


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_the_default_wheelhouse_folder_is_git_ignored():
    ignored = subprocess.run(["git", "-C", str(REPO_ROOT), "check-ignore", "-q", "wheelhouse/x.whl"])
    assert ignored.returncode == 0
