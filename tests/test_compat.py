"""requirements-oldest.txt is the oldest stack pyproject.toml allows, so `make test-compat` proves the bounds.

Every direct dependency pyproject.toml declares with a lower bound must be pinned there at exactly
that bound (jaxlib at jax's), and nothing else may pin a direct dependency: raising a bound without
raising the pin (or the other way round) fails here instead of leaving a claim nobody tests.
"""

from __future__ import annotations

import re
import tomllib

from packaging.version import Version

from conftest import REPO_ROOT

REQUIREMENT = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*(?P<op>>=|==)\s*(?P<version>[^\s;#,]+)")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


# Optional dependency groups that the oldest stack installs too (requirements-oldest.txt pins them).
PINNED_EXTRAS = ("profile",)


def lower_bounds(pyproject_text: str) -> dict[str, str]:
    """`{name: version}` for every `name>=version` in [project].dependencies and the pinned extras."""
    bounds = {}
    project = tomllib.loads(pyproject_text)["project"]
    extras = [requirement for extra in PINNED_EXTRAS for requirement in project["optional-dependencies"][extra]]
    for requirement in project["dependencies"] + extras:
        match = REQUIREMENT.match(requirement)
        assert match and match["op"] == ">=", f"pyproject.toml: {requirement!r} should be a plain lower bound"
        bounds[canonical(match["name"])] = match["version"]
    return bounds


def pins(requirements_text: str) -> dict[str, str]:
    found = {}
    for line in requirements_text.splitlines():
        match = REQUIREMENT.match(line.strip())
        if match:
            assert match["op"] == "==", f"requirements-oldest.txt pins exact versions: {line!r}"
            found[canonical(match["name"])] = match["version"]
    return found


def mismatches(bounds: dict[str, str], pinned: dict[str, str]) -> list[str]:
    wanted = dict(bounds)
    if "jax" in wanted:
        wanted["jaxlib"] = wanted["jax"]  # jaxlib is released with jax, version for version
    return [f"{name}: pyproject.toml says >={version}, requirements-oldest.txt pins {pinned.get(name)}"
            for name, version in sorted(wanted.items())
            if name not in pinned or Version(pinned[name]) != Version(version)]


def test_oldest_pins_are_pyprojects_lower_bounds():
    bounds = lower_bounds((REPO_ROOT / "pyproject.toml").read_text())
    pinned = pins((REPO_ROOT / "requirements-oldest.txt").read_text())
    assert mismatches(bounds, pinned) == []


def test_a_raised_bound_or_a_stale_pin_is_caught():
    bounds = {"jax": "0.7.2", "flax": "0.10"}
    assert mismatches(bounds, {"jax": "0.7.2", "jaxlib": "0.7.2", "flax": "0.10.0"}) == []
    assert mismatches(bounds, {"jax": "0.7.2", "jaxlib": "0.7.2", "flax": "0.11.2"}) == [
        "flax: pyproject.toml says >=0.10, requirements-oldest.txt pins 0.11.2"]
    assert mismatches(bounds, {"jax": "0.7.2", "flax": "0.10"}) == [
        "jaxlib: pyproject.toml says >=0.7.2, requirements-oldest.txt pins None"]


def test_pins_parse_names_the_way_pip_does():
    assert pins("Dm_Haiku==0.0.14\n# jax==9\nopencv-python-headless==4.10.0.84  # cv2\n") == {
        "dm-haiku": "0.0.14", "opencv-python-headless": "4.10.0.84"}
