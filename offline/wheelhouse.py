"""A wheelhouse: labcore and its dependencies as wheels, for a machine with no network.

Built on a machine with internet for the target's Python and platform, copied to the target (a
cluster's compute nodes, an air-gapped GPU server), and installed there with

    python -m pip install --no-index --find-links wheelhouse labcore            # or "labcore[torch]"

Usage (from the repository root; `make wheelhouse` runs it):

    python offline/wheelhouse.py [--python 3.12] [--platform manylinux_2_28_x86_64] [--dest wheelhouse]
                                 [--skip "jax==0.11.2 jaxlib==0.11.2 torch"] [--skip-from FILE]
                                 [--torch cpu|pypi|none] [--pins requirements.txt | --pins ""] [--extras profile]

What goes in: labcore's dependencies from pyproject.toml (what `pip install labcore` installs), plus
torch for `labcore[torch]` and any other extras asked for, resolved by pip for the target. Where
requirements.txt pins a package, the pin is used (the versions `make test` tested, on Python 3.11);
`--pins ""` takes the newest versions pyproject.toml allows instead, and so does a target whose own
jax is not the pinned one (the pins are a set around one jax; see choose_pins). Wheels only: the
target cannot build anything. labcore's own wheel is built from this checkout's files as they are.

torch: `--torch cpu` (the default) takes the CPU build from PyTorch's own index on Linux (PyPI's Linux
torch is a CUDA build that brings several GB of nvidia-* wheels); `pypi` takes PyPI's build; `none`
leaves torch out. On macOS and Windows PyPI's torch is the CPU build, and both take it.

Leaving out what the target has: `--skip` takes names or name==version, `--skip-from` a file of them,
one a line (the output of `pip list --format=freeze` on the target). A skipped package with a version
is resolved as if installed at that version with nothing else needed, so everything chosen fits it;
one without a version is assumed to fit whatever version the resolution takes. Packages only skipped
packages need are left out too.

pip evaluates dependency markers for the Python it runs on, not the target's; the dependency graph is
walked again with the target's markers, and whatever pip's resolution missed is resolved in another
round. The folder gets `wheelhouse.txt`, which says what the wheels are for and lists them; a later
build into the same folder keeps the wheels it needs (checked against their hashes, not downloaded
again) and deletes the others. A failed build leaves the folder as it was.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import pathlib
import platform as host_platform
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.parse
import zipfile

try:
    from packaging import tags
    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version
except ImportError:  # a bare interpreter: pip carries its own copy
    from pip._vendor.packaging import tags
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.specifiers import SpecifierSet
    from pip._vendor.packaging.version import InvalidVersion, Version

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
MANIFEST = "wheelhouse.txt"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
# pip 23.3 is the first whose `install --dry-run --python-version` checks Requires-Python against the
# target's Python (older ones check the running one's, and refuse jax 0.11, which needs 3.12, for a 3.12
# target from 3.11). An older pip here gets a newer one in a temporary folder, for this build only.
MIN_PIP = (23, 3)
PIP_PATH: list[str] = []  # where that newer pip is, for PYTHONPATH


class WheelhouseError(Exception):
    """A problem the user can act on; main() prints it without a traceback."""


def normalize(name: str) -> str:
    """A distribution name as indexes compare them (PEP 503): `Jax_CUDA12.Plugin` -> `jax-cuda12-plugin`."""
    return re.sub(r"[-_.]+", "-", name).lower()


# ---------------------------------------------------------------------------------------- the target


def expand_platform(tag: str) -> list[str]:
    """Every platform tag a target of platform `tag` installs, best first, as pip's --platform list.

    `manylinux_2_28_x86_64` (glibc 2.28) also installs wheels for older glibc, 2_27 down to 2_17 (2_5
    on x86), and the legacy names manylinux2014/2010/1 of 2_17/2_12/2_5; musllinux likewise; a
    `macosx_14_0_arm64` target installs every older macOS and universal2 wheel."""
    manylinux = re.fullmatch(r"(manylinux|musllinux)_(\d+)_(\d+)_(\w+)", tag)
    if manylinux:
        kind, major, minor, arch = manylinux.group(1), int(manylinux.group(2)), int(manylinux.group(3)), manylinux.group(4)
        lowest = 0 if kind == "musllinux" else (5 if arch in ("x86_64", "i686") else 17)
        legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"} if kind == "manylinux" else {}
        found = []
        for glibc in range(minor, lowest - 1, -1):
            found.append(f"{kind}_{major}_{glibc}_{arch}")
            if glibc in legacy and (glibc != 5 or arch in ("x86_64", "i686")):
                found.append(f"{legacy[glibc]}_{arch}")
        return found
    legacy_name = re.fullmatch(r"manylinux(2014|2010|1)_(\w+)", tag)
    if legacy_name:
        minor = {"2014": 17, "2010": 12, "1": 5}[legacy_name.group(1)]
        return expand_platform(f"manylinux_2_{minor}_{legacy_name.group(2)}")
    mac = re.fullmatch(r"macosx_(\d+)_(\d+)_(\w+)", tag)
    if mac:
        return list(tags.mac_platforms((int(mac.group(1)), int(mac.group(2))), mac.group(3)))
    if not re.fullmatch(r"(linux|win)_\w+|win32", tag):
        raise WheelhouseError(f"unknown platform tag {tag!r}: give one such as manylinux_2_28_x86_64, "
                              "manylinux_2_28_aarch64, macosx_14_0_arm64 or win_amd64")
    return [tag]


def this_platform() -> str:
    """This machine's own best platform tag, e.g. manylinux_2_36_x86_64."""
    return next(iter(tags.sys_tags())).platform


def marker_environment(python: str, platform_tag: str) -> dict[str, str]:
    """The PEP 508 marker values of a CPython `python` (3.12 or 3.12.4) on `platform_tag`."""
    if platform_tag.startswith(("manylinux", "musllinux", "linux")):
        system, sys_platform, os_name = "Linux", "linux", "posix"
        machine = re.sub(r"^(manylinux|musllinux)_\d+_\d+_|^manylinux(2014|2010|1)_|^linux_", "", platform_tag)
    elif platform_tag.startswith("macosx"):
        system, sys_platform, os_name = "Darwin", "darwin", "posix"
        machine = platform_tag.rsplit("_", 1)[-1].replace("universal2", "arm64")
    else:
        system, sys_platform, os_name = "Windows", "win32", "nt"
        machine = {"win_amd64": "AMD64", "win_arm64": "ARM64", "win32": "x86"}.get(platform_tag, "AMD64")
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    short = ".".join(python.split(".")[:2])
    full = python if python.count(".") == 2 else (host_platform.python_version() if short == here else f"{short}.0")
    same_system = system == host_platform.system()
    return {
        "python_version": short, "python_full_version": full, "implementation_name": "cpython",
        "implementation_version": full, "platform_python_implementation": "CPython",
        "sys_platform": sys_platform, "platform_system": system, "os_name": os_name, "platform_machine": machine,
        "platform_release": host_platform.release() if same_system else "",
        "platform_version": host_platform.version() if same_system else "",
    }


@dataclasses.dataclass(frozen=True)
class Target:
    python: str  # "3.12" (or "3.12.4")
    platform: str  # the target's best tag, e.g. manylinux_2_28_x86_64

    @property
    def platforms(self) -> list[str]:
        return expand_platform(self.platform)

    @property
    def is_linux(self) -> bool:
        return self.platform.startswith(("manylinux", "musllinux", "linux"))

    @property
    def markers(self) -> dict[str, str]:
        return marker_environment(self.python, self.platform)

    def pip_options(self) -> list[str]:
        """pip's options for choosing wheels for this target instead of for the running Python."""
        options = ["--only-binary=:all:", "--python-version", self.python, "--implementation", "cp"]
        for tag in self.platforms:
            options += ["--platform", tag]
        return options

    def __str__(self) -> str:
        return f"CPython {self.python} on {self.platform}"


# ------------------------------------------------------------------------------------ what to skip


def parse_skip(text: str) -> dict[str, str | None]:
    """Names the target has, each with its version when known, from SKIP's words or a file's lines.

    Takes `name`, `name==version` (pip freeze's lines), `name @ url` and `-e ...#egg=name`; commas
    and whitespace separate entries, `#` starts a comment."""
    found: dict[str, str | None] = {}
    for line in text.splitlines():
        line = line.split(" #", 1)[0].strip() if not line.lstrip().startswith("-e") else line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("-"):  # pip options, or an editable install: its name, if it gives one
            egg = re.search(r"[#&]egg=([\w.-]+)", line)
            if egg:
                found[normalize(egg.group(1))] = None
            continue
        direct = re.fullmatch(r"([\w.-]+)(\[[^\]]*\])?\s+@\s+\S+", line)
        if direct:
            found[normalize(direct.group(1))] = None
            continue
        for word in re.split(r"[\s,]+", line):
            entry = re.fullmatch(r"([A-Za-z0-9][\w.-]*)(?:\[[^\]]*\])?(?:===?([^\s=]+))?", word)
            if not entry:
                raise WheelhouseError(f"cannot read {word!r} as a package the target has: give a name or name==version")
            found[normalize(entry.group(1))] = entry.group(2)
    return found


def read_pins(path: pathlib.Path) -> dict[str, str]:
    """requirements.txt's exact pins (name==version lines), by normalized name; other lines ignored."""
    pins = {}
    for line in path.read_text().splitlines():
        pin = re.fullmatch(r"\s*([A-Za-z0-9][\w.-]*)\s*==\s*([^\s;#]+)\s*(#.*)?", line)
        if pin:
            pins[normalize(pin.group(1))] = pin.group(2)
    return pins


def stub_wheel(folder: pathlib.Path, name: str, version: str) -> pathlib.Path:
    """A wheel holding only the metadata of `name` at `version`, with no dependencies: how a package
    already installed on the target looks to pip's resolution."""
    distribution = f"{re.sub(r'[-_.]+', '_', name)}-{version}"
    path = folder / f"{distribution}-py3-none-any.whl"
    info = f"{distribution}.dist-info"
    files = {
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: labcore offline/wheelhouse.py\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    with zipfile.ZipFile(path, "w") as archive:
        for member, text in files.items():
            archive.writestr(member, text)
        archive.writestr(f"{info}/RECORD", "".join(f"{member},,\n" for member in files) + f"{info}/RECORD,,\n")
    return path


# ---------------------------------------------------------------------------------- pip's commands


def resolve_command(target: Target, requirements: list[str], constraints: pathlib.Path, report: pathlib.Path,
                    scratch: pathlib.Path) -> list[str]:
    """pip's dry run that resolves `requirements` for `target` and writes the chosen wheels to `report`
    (their metadata only: nothing is downloaded but what an index gives no separate metadata for)."""
    return [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--progress-bar", "off",
            "--disable-pip-version-check", "--report", str(report), "--target", str(scratch),
            *target.pip_options(), "--constraint", str(constraints), *requirements]


def cpu_torch_command(target: Target, version: str | None, no_constraints: pathlib.Path, report: pathlib.Path,
                      scratch: pathlib.Path) -> list[str]:
    """pip's dry run that finds torch's CPU build for `target` on PyTorch's CPU index (torch alone, so an
    index that cannot be reached costs one look-up, not one per package): `version`'s (requirements.txt
    pins 2.13.0, whose CPU build is 2.13.0+cpu), or the newest there."""
    wanted = "torch" if version is None else f"torch=={version if '+' in version else version + '+cpu'}"
    return [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-deps", "--quiet",
            "--disable-pip-version-check", "--retries", "1", "--timeout", "30", "--report", str(report),
            "--target", str(scratch), *target.pip_options(), "--constraint", str(no_constraints),
            "--index-url", TORCH_CPU_INDEX, wanted]


def download_command(target: Target, urls: list[str], dest: pathlib.Path, no_constraints: pathlib.Path) -> list[str]:
    """pip's download of exactly these wheels (URLs with their sha256) into `dest`. An empty
    constraints file replaces any configured one, which pip refuses beside URL requirements."""
    return [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "--progress-bar", "off",
            "--dest", str(dest), *target.pip_options(), "--constraint", str(no_constraints), *urls]


def pip_version() -> tuple[int, ...]:
    result = run([sys.executable, "-m", "pip", "--version"], "pip --version", capture=True)
    if result.returncode != 0:
        raise WheelhouseError(f"{sys.executable} has no pip: install it (python -m ensurepip), or run with another Python")
    return tuple(int(part) for part in re.findall(r"\d+", result.stdout.split()[1])[:2])


def ensure_recent_pip(scratch: pathlib.Path) -> None:
    """Use this Python's pip if it is 23.3 or newer, else a newer pip put into `scratch` for this build."""
    if pip_version() >= MIN_PIP:
        return
    found = pip_version()
    say(f"note: pip {'.'.join(map(str, found))} here is older than {'.'.join(map(str, MIN_PIP))}; "
        "this build uses a newer pip from a temporary folder")
    run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--target", str(scratch / "pip"),
         f"pip>={'.'.join(map(str, MIN_PIP))}"], "installing a newer pip")
    PIP_PATH.append(str(scratch / "pip"))


# --------------------------------------------------------------------------- the graph, for the target


@dataclasses.dataclass(frozen=True)
class Chosen:
    """One wheel pip's resolution chose."""

    name: str
    version: str
    requires: tuple[str, ...]
    url: str
    sha256: str | None

    @property
    def filename(self) -> str:
        return urllib.parse.unquote(urllib.parse.urlsplit(self.url).path.rsplit("/", 1)[-1])


def read_report(report: dict) -> dict[str, Chosen]:
    chosen = {}
    for item in report["install"]:
        metadata, download = item["metadata"], item["download_info"]
        hashes = download.get("archive_info", {}).get("hashes", {})
        chosen[normalize(metadata["name"])] = Chosen(metadata["name"], metadata["version"],
                                                     tuple(metadata.get("requires_dist", ())), download["url"],
                                                     hashes.get("sha256"))
    return chosen


@dataclasses.dataclass
class Walk:
    needed: set[str]  # chosen packages the target needs from the wheelhouse
    missing: list[Requirement]  # requirements the target needs that pip's resolution did not choose
    unmet: list[str]  # requirements a chosen or skipped version does not satisfy


def walk(chosen: dict[str, Chosen], root: str, extras: set[str], markers: dict[str, str],
         skip: dict[str, str | None]) -> Walk:
    """From `root[extras]`, every package the target needs, following each wheel's dependencies with
    the target's markers and stopping at the packages the target has (`skip`)."""
    result = Walk(set(), [], [])
    queue, seen = [(normalize(root), frozenset(extras))], set()
    while queue:
        name, asked = queue.pop()
        if (name, asked) in seen:
            continue
        seen.add((name, asked))
        result.needed.add(name)
        for text in chosen[name].requires:
            requirement = Requirement(text)
            if requirement.marker and not any(requirement.marker.evaluate({**markers, "extra": extra})
                                              for extra in {"", *asked}):
                continue
            dependency = normalize(requirement.name)
            if dependency in skip:
                version = skip[dependency]
                if version is not None and not requirement.specifier.contains(version, prereleases=True):
                    result.unmet.append(f"{chosen[name].name} {chosen[name].version} needs {requirement}, "
                                        f"and the target has {dependency} {version}")
                continue
            if dependency not in chosen:
                result.missing.append(requirement)
                continue
            if not requirement.specifier.contains(chosen[dependency].version, prereleases=True):
                result.unmet.append(f"{chosen[name].name} {chosen[name].version} needs {requirement}, "
                                    f"and pip chose {chosen[dependency].version}")
            queue.append((dependency, frozenset(requirement.extras)))
    return result


# ----------------------------------------------------------------------------------------- failures


def explain_resolution_failure(pip_output: str, target: Target, pins: dict[str, str], pins_file: str,
                               skip: dict[str, str | None]) -> str:
    """What the user can do when pip found no set of wheels for the target: which of requirements.txt's
    pins, or of the target's own versions, pip's messages name, and the options."""
    named = {normalize(name) for name in re.findall(
        r"(?:the requirement|requested \(constraint\)|requested|depends on|distribution found for)\s+([A-Za-z0-9][\w.-]*)",
        pip_output)}
    no_wheel = sorted(dict.fromkeys(re.findall(r"No matching distribution found for ([^\s(]+)", pip_output)))
    lines = [f"pip found no set of wheels for {target} (its messages are above)."]
    pinned = sorted(name for name in named if name in pins and name not in skip)
    held = sorted(name for name in named if skip.get(name))
    if pinned:
        lines.append(f"{pins_file} pins " + ", ".join(f"{name}=={pins[name]}" for name in pinned)
                     + " (tested on Python 3.11): that version may have no wheel for this target, or not fit what else is needed.")
        lines.append('Run again with PINS= (--pins "") to take the newest versions pyproject.toml allows for this target.')
    if held:
        lines.append("The target's " + ", ".join(f"{name}=={skip[name]}" for name in held)
                     + " (from the skip list) may not fit what labcore needs: upgrade it there, or drop it from the"
                       " skip list so that the wheelhouse brings a version that fits (pip then replaces it on the target).")
    if not pinned and not held:
        lines.append((f"No wheel of {', '.join(no_wheel)} fits this target" if no_wheel else "Some package has no wheel for this target")
                     + ", and the target cannot build from source: check PY and PLATFORM.")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------- the building


def checkout_files(root: pathlib.Path) -> list[pathlib.Path]:
    """The files a wheel of labcore is built from: the checkout's tracked and untracked files, less the
    git-ignored ones (so no stale build/ folder or .venv goes in)."""
    listed = subprocess.run(["git", "-C", str(root), "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
                            capture_output=True, text=True)
    if listed.returncode != 0:
        raise WheelhouseError(f"{root} is not a git checkout: git ls-files failed ({listed.stderr.strip()})")
    return [pathlib.Path(name) for name in listed.stdout.split("\0") if name and (root / name).is_file()]


def build_labcore_wheel(dest: pathlib.Path) -> pathlib.Path:
    with tempfile.TemporaryDirectory(prefix="labcore-source-") as source:
        for relative in checkout_files(REPO_ROOT):
            (pathlib.Path(source) / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO_ROOT / relative, pathlib.Path(source) / relative)
        built = run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--disable-pip-version-check",
                     "--wheel-dir", str(dest), source], "building labcore's wheel", capture=True)
        if built.returncode != 0:  # its setuptools warnings are shown only then
            sys.stderr.write(pip_messages(built.stdout + built.stderr))
            raise WheelhouseError("building labcore's wheel failed (pip's messages are above)")
    (wheel,) = dest.glob("labcore-*.whl")
    return wheel


NOISE = re.compile(r"^(Collecting |  Using cached |  Downloading |  Obtaining |Processing |Looking in |Requirement already "
                   r"|WARNING: Location .* is ignored)")


def pip_messages(output: str, lines: int = 40) -> str:
    """pip's output less its progress lines (Collecting ..., Downloading ...): its last `lines` lines."""
    kept = [line for line in output.splitlines() if line.strip() and not NOISE.match(line)]
    return "\n".join(kept[-lines:]) + "\n"


def run(command: list[str], what: str, capture: bool = False) -> subprocess.CompletedProcess:
    environment = dict(os.environ, PIP_ROOT_USER_ACTION="ignore")  # nothing is installed into a system Python
    if PIP_PATH:
        environment["PYTHONPATH"] = os.pathsep.join([*PIP_PATH, environment.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    result = subprocess.run(command, capture_output=capture, text=True, env=environment)
    if result.returncode != 0 and not capture:
        raise WheelhouseError(f"{what} failed (pip's messages are above)")
    return result


def wheel_metadata(wheel: pathlib.Path) -> str:
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [member for member in archive.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", member)]
        return archive.read(name).decode()


def check_python(target: Target, labcore_wheel: pathlib.Path) -> None:
    requires = re.search(r"^Requires-Python: (.+)$", wheel_metadata(labcore_wheel), re.MULTILINE)
    if requires and not SpecifierSet(requires.group(1).strip()).contains(target.python):
        raise WheelhouseError(f"labcore needs Python {requires.group(1).strip()}; the target's is {target.python}")


def write_manifest(dest: pathlib.Path, target: Target, kept: list[Chosen], labcore: pathlib.Path,
                   skip: dict[str, str | None], torch: str, versions: str, extras: list[str]) -> None:
    commit = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    changed = subprocess.run(["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--", "labcore", "pyproject.toml"],
                             capture_output=True, text=True).stdout.strip()
    install = "labcore" + (f"[{','.join(extras)}]" if extras else "")
    lines = [
        f"# {labcore.name}, built from commit {commit or '?'}{' with uncommitted changes' if changed else ''}, and its",
        f"# dependencies as wheels for {target}; made {datetime.date.today()} by offline/wheelhouse.py.",
        *textwrap.wrap(f"Versions: {versions}; torch: {torch}.", 100, initial_indent="# ", subsequent_indent="#   "),
        "# Install on the target (no network needed), from the folder above this one:",
        f'#   python -m pip install --no-index --find-links {dest.name} "{install}"',
    ]
    if skip:
        left_out = " ".join(f"{n}=={v}" if v else n for n, v in sorted(skip.items()))
        lines += textwrap.wrap(left_out, 100, initial_indent="# Left out, the target has them: ", subsequent_indent="#   ",
                               break_on_hyphens=False)
    lines += sorted(f"{item.name}=={item.version}" for item in kept)
    (dest / MANIFEST).write_text("\n".join(lines) + "\n")


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def find_cpu_torch(target: Target, version: str | None, scratch: pathlib.Path) -> str:
    """`torch @ URL` of torch's CPU build for `target`, for the resolution to take as a direct requirement."""
    empty = scratch / "no-constraints.txt"
    empty.write_text("")
    report = scratch / "torch.json"
    result = run(cpu_torch_command(target, version, empty, report, scratch / "target"), "finding torch", capture=True)
    chosen = read_report(json.loads(report.read_text())).get("torch") if result.returncode == 0 else None
    if chosen is None or (target.is_linux and "+cpu" not in chosen.version):
        sys.stderr.write(pip_messages(result.stdout + result.stderr))
        asked = f"torch {version}" if version else "torch"
        raise WheelhouseError(
            f"no CPU build of {asked} for {target} from {TORCH_CPU_INDEX} (or pip's configured indexes and find-links): "
            "that index may be out of reach from here. TORCH=none leaves torch out, TORCH=pypi takes PyPI's "
            "build (CUDA on Linux, several GB), and SKIP=torch suits a target that has torch already.")
    return f"torch @ {chosen.url}" + (f"#sha256={chosen.sha256}" if chosen.sha256 else "")


def comparable(skip: dict[str, str | None]) -> tuple[dict[str, str | None], list[str]]:
    """`skip` with each version pip cannot compare (not PEP 440) dropped to a name only, and notes."""
    kept, notes = {}, []
    for name, version in skip.items():
        try:
            kept[name] = version if version is None or Version(version) else None
        except InvalidVersion:
            notes.append(f"{name}=={version} is not a version pip can compare; it is left out as a name only")
            kept[name] = None
    return kept, notes


def choose_pins(pins: dict[str, str], skip: dict[str, str | None], pins_file: str) -> tuple[dict[str, str], str, list[str]]:
    """The pins to resolve with, a phrase saying where the versions come from, and notes.

    requirements.txt's pins are one set tested together, around one jax: the JAX libraries (flax,
    orbax, chex, optax, ...) follow jax's releases, and a pinned flax may not even import with another
    jax. A target whose own jax (given with its version) is not the pinned one gets the newest
    versions that fit it instead, as `pip install labcore` there would choose."""
    if not pins:
        return {}, "the newest that pyproject.toml allows and the target's packages fit", []
    for name in ("jax", "jaxlib"):
        theirs, ours = skip.get(name), pins.get(name)
        if theirs and ours and Version(theirs).public != Version(ours).public:
            return {}, f"the newest that fit the target's {name} {theirs} ({pins_file} pins {name} {ours})", [
                f"the target has {name} {theirs} and {pins_file} was tested with {ours}; its pins belong together, "
                f"so the versions are the newest that fit the target's instead"]
    notes = [f"{name} is left out without a version: the wheelhouse fits {pins_file}'s {name} {pins[name]}; give "
             f"{name}==VERSION if the target's differs" for name in ("jax",) if name in skip and skip[name] is None and name in pins]
    return pins, f"{pins_file}'s pins where it has one", notes


def build(target: Target, dest: pathlib.Path, skip: dict[str, str | None], torch: str, pins_file: str,
          extras: list[str]) -> list[pathlib.Path]:
    """Fill `dest` with the wheels `target` needs to install labcore[extras] offline; returns them."""
    dest.mkdir(parents=True, exist_ok=True)
    if any(dest.glob("*.whl")) and not (dest / MANIFEST).exists():
        raise WheelhouseError(f"{dest} holds wheels that offline/wheelhouse.py did not put there: give an empty or new folder")
    skip, notes = comparable(skip)
    if skip.pop("labcore", "absent") != "absent":
        notes.append("labcore is never left out (the wheelhouse is for installing it)")
    pins, versions, more = choose_pins(read_pins(REPO_ROOT / pins_file) if pins_file else {}, skip, pins_file)
    notes += more
    if pins and target.python.split(".")[:2] != ["3", "11"]:
        notes.append(f"{pins_file}'s pins were tested on Python 3.11; the target's is {target.python}")
    for note in notes:
        say(f"note: {note}")
    if torch != "none":
        extras = sorted({*extras, "torch"})
    clock = time.monotonic()

    with tempfile.TemporaryDirectory(prefix="labcore-wheelhouse-") as scratch_name:
        scratch = pathlib.Path(scratch_name)
        ensure_recent_pip(scratch)
        labcore = build_labcore_wheel(scratch / "labcore")  # into dest only once all went well
        check_python(target, labcore)
        say(f"built {labcore.name} ({time.monotonic() - clock:.0f} s)")
        (scratch / "stubs").mkdir()
        stubs = [str(stub_wheel(scratch / "stubs", name, version)) for name, version in sorted(skip.items()) if version]
        requirements = [f"labcore[{','.join(extras)}] @ {labcore.resolve().as_uri()}" if extras
                        else f"labcore @ {labcore.resolve().as_uri()}", *stubs]
        unpinned = set(skip)
        if torch == "cpu" and target.is_linux and "torch" in extras and "torch" not in skip:
            clock = time.monotonic()
            requirements.append(find_cpu_torch(target, pins.get("torch"), scratch))
            unpinned.add("torch")  # a direct requirement: pip refuses a constraint beside it
            wheel = urllib.parse.unquote(requirements[-1].rsplit("/", 1)[-1].split("#")[0])
            say(f"found torch's CPU build: {wheel} ({time.monotonic() - clock:.0f} s)")
        constraints = scratch / "constraints.txt"
        constraints.write_text("".join(f"{name}=={version}\n" for name, version in sorted(pins.items()) if name not in unpinned))

        clock = time.monotonic()
        for attempt in range(4):
            report = scratch / f"report{attempt}.json"
            result = run(resolve_command(target, requirements, constraints, report, scratch / "target"), "resolving", capture=True)
            if result.returncode != 0:
                sys.stderr.write(pip_messages(result.stdout + result.stderr))
                raise WheelhouseError(explain_resolution_failure(result.stdout + result.stderr, target, pins, pins_file, skip))
            chosen = read_report(json.loads(report.read_text()))
            found = walk(chosen, "labcore", set(extras), target.markers, skip)
            if found.unmet:
                raise WheelhouseError("the chosen versions do not fit together for the target:\n  " + "\n  ".join(found.unmet))
            if not found.missing:
                break
            say("note: pip resolved with this Python's markers; adding what the target's need: "
                + ", ".join(sorted({str(r) for r in found.missing})))
            requirements += [f"{r.name}{'[' + ','.join(sorted(r.extras)) + ']' if r.extras else ''}{r.specifier}"
                             for r in found.missing]
        else:
            raise WheelhouseError("the dependencies for the target's markers did not settle: "
                                  + ", ".join(str(r) for r in found.missing))
        kept = [chosen[name] for name in sorted(found.needed) if name != "labcore"]
        say(f"resolved: {len(kept)} dependencies for the target ({time.monotonic() - clock:.0f} s)")
        if torch == "pypi" and target.is_linux and "torch" in found.needed:
            say("note: PyPI's torch for Linux is the CUDA build; with its nvidia-* wheels it takes several GB")

        clock = time.monotonic()
        there = sum((dest / item.filename).exists() for item in kept)
        urls = [item.url + (f"#sha256={item.sha256}" if item.sha256 else "") for item in kept]
        if urls:  # a wheel already there is checked against its hash, not fetched again
            empty = scratch / "no-constraints.txt"
            empty.write_text("")
            run(download_command(target, urls, dest, empty), "downloading")
        say(f"downloaded {len(kept) - there} wheels, {there} already there ({time.monotonic() - clock:.0f} s)")
        for stale in dest.glob("*.whl"):
            if stale.name not in {item.filename for item in kept}:
                stale.unlink()
        shutil.copy2(labcore, dest / labcore.name)
    wanted = {item.filename for item in kept} | {labcore.name}
    write_manifest(dest, target, kept, labcore, skip, torch, versions, extras)
    return sorted(dest / name for name in wanted)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    parser.add_argument("--python", default=here, help=f"the target's Python, e.g. 3.12 (default: this one's, {here})")
    parser.add_argument("--platform", default="", help="the target's platform tag, e.g. manylinux_2_28_x86_64 (default: this machine's)")
    parser.add_argument("--dest", default="wheelhouse", help="the folder to fill (default: wheelhouse)")
    parser.add_argument("--skip", default="", help='what the target has: names or name==version, e.g. "jax==0.11.2 jaxlib==0.11.2 torch"')
    parser.add_argument("--skip-from", default="", help="a file of them, one a line (pip list --format=freeze on the target)")
    parser.add_argument("--torch", choices=("cpu", "pypi", "none"), default="cpu",
                        help="torch for labcore[torch]: the CPU build (default), PyPI's (CUDA on Linux), or none")
    parser.add_argument("--pins", default="requirements.txt",
                        help="pin versions to this file's (default requirements.txt); empty: the newest pyproject.toml allows")
    parser.add_argument("--extras", default="", help="labcore's extras beyond torch, e.g. profile")
    args = parser.parse_args(argv)
    try:
        if not re.fullmatch(r"3\.\d+(\.\d+)?", args.python):
            raise WheelhouseError(f"--python takes a version such as 3.12, not {args.python!r}")
        target = Target(args.python, args.platform or this_platform())
        expand_platform(target.platform)
        skip = parse_skip(args.skip)
        if args.skip_from:
            path = pathlib.Path(args.skip_from)
            if not path.is_file():
                raise WheelhouseError(f"no file {path} (SKIP_FROM names a file of packages the target has)")
            skip |= parse_skip(path.read_text())
        if args.pins and not (REPO_ROOT / args.pins).is_file():
            raise WheelhouseError(f"no file {args.pins} in {REPO_ROOT}")
        extras = [e for e in re.split(r"[\s,]+", args.extras) if e]
        start = time.monotonic()
        print(f"wheelhouse for {target} in {args.dest}/", file=sys.stderr)
        wheels = build(target, pathlib.Path(args.dest), skip, args.torch, args.pins, extras)
    except WheelhouseError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    finally:
        PIP_PATH.clear()
    size = sum(wheel.stat().st_size for wheel in wheels)
    print(f"{len(wheels)} wheels, {size / 1e6:.0f} MB, in {args.dest}/ ({time.monotonic() - start:.0f} s); "
          f"on the target: python -m pip install --no-index --find-links {args.dest} labcore"
          + (' (or "labcore[torch]")' if args.torch != "none" else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
