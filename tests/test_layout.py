"""The package's structure: layers, module size, one vocabulary, documentation that matches the tree.

These checks read the source (ast, text); they import nothing from labcore and run in a second.
"""

from __future__ import annotations

import ast
import dataclasses
import fnmatch
import importlib
import re

import pytest

from conftest import NOTEBOOKS_DIR, REPO_ROOT
from labcore.agents import registry

PACKAGE = REPO_ROOT / "labcore"
MODULES = sorted(path for path in PACKAGE.rglob("*.py") if "__pycache__" not in path.parts)
MAX_MODULE_LINES = 500


def module_name(path) -> str:
    parts = list(path.relative_to(REPO_ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def is_package(path) -> bool:
    return path.name == "__init__.py"


def labcore_imports(path) -> set[str]:
    """Every labcore module ``path`` imports, at the top or inside a function (absolute names;
    ``from labcore.x import y`` counts as labcore.x.y when y is a module, else labcore.x)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    own = module_name(path)
    package = own if is_package(path) else own.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.split(".")[0] == "labcore")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "labcore":
                continue
            for alias in node.names:
                candidate = f"{target}.{alias.name}"
                is_module = (REPO_ROOT / (candidate.replace(".", "/") + ".py")).exists() or (
                    REPO_ROOT / candidate.replace(".", "/") / "__init__.py"
                ).exists()
                found.add(candidate if is_module else target)
    return found


def within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


# The layers, bottom up: the library (everything not named below), the tools (labcore.tools: doctor,
# profiling, benchmarking, ...), the course material (labcore.course: exercises, source listings,
# experiments) and the command line (labcore.__main__). A module may import from its own layer and
# the layers below it, never above. Inside the library, the shared building blocks know nothing of
# the algorithms, and the algorithms know nothing of each other; the tools know no algorithm either.
LAYERS = ("labcore.tools", "labcore.course", "labcore.__main__")  # above the library, in order
LOWER_THAN_AGENTS = (
    "labcore.envs", "labcore.nets", "labcore.replay", "labcore.losses", "labcore.torch_ref", "labcore.validation",
    "labcore.evaluation", "labcore.runs", "labcore.run_restore", "labcore.run_layout", "labcore.checkpoint", "labcore.logging", "labcore.devices",
    "labcore.distributed", "labcore.ray_cluster", "labcore.compile_cache", "labcore.loop", "labcore.training_run",
    "labcore.tools",
)
# the algorithms' folders, as the registry lists them (several of its algorithms may share one: DQN's drivers)
ALGORITHMS = tuple(sorted({algorithm.config_class.__module__.split(".")[2] for algorithm in registry.ALGORITHMS}))
EXERCISES = ("labcore.course.exercises", "labcore.course.lessons")  # the checking framework and the lessons' folders
# what every algorithm's folder may import from labcore.agents: the package and the contract its record is written in
SHARED_BY_AGENTS = ("labcore.agents", "labcore.agents.contract")


def layer(name: str) -> int:
    """0 for the library, then 1, 2, 3 for the tools, the course and the command line."""
    return next((index + 1 for index, top in enumerate(LAYERS) if within(name, top)), 0)


def layering_violations(imports_of: dict[str, set[str]]) -> list[str]:
    """The imports that break the layering, as 'importer -> imported' lines."""
    problems = []
    names = ("the library", "the tools", "the course", "the command line")
    for importer, imported in imports_of.items():
        for name in sorted(imported):
            if layer(name) > layer(importer):
                problems.append(f"{importer} -> {name} ({names[layer(importer)]} imports {names[layer(name)]})")
            if any(within(name, top) for top in EXERCISES) and not (
                    any(within(importer, top) for top in EXERCISES) or importer == "labcore.__main__"):
                problems.append(f"{importer} -> {name} (only the command line imports the exercises)")
            if any(within(importer, low) for low in LOWER_THAN_AGENTS) and within(name, "labcore.agents"):
                problems.append(f"{importer} -> {name} (a shared building block imports an algorithm)")
            if within(importer, "labcore.envs") and any(
                within(name, f"labcore.{upper}") for upper in ("nets", "replay", "runs", "torch_ref")
            ):
                problems.append(f"{importer} -> {name} (envs are the bottom layer)")
            for algorithm in ALGORITHMS:
                own = f"labcore.agents.{algorithm}"
                if within(importer, own) and within(name, "labcore.agents") and not within(name, own) and name not in SHARED_BY_AGENTS:
                    problems.append(f"{importer} -> {name} (one algorithm imports another)")
    return problems


def test_no_lower_module_imports_a_higher_one():
    imports_of = {module_name(path): labcore_imports(path) for path in MODULES}
    assert layering_violations(imports_of) == []


@pytest.mark.parametrize(
    "importer, imported",
    [
        ("labcore.torch_ref.gflownet", "labcore.agents.gflownet.core"),
        ("labcore.envs.hypergrid", "labcore.agents.gflownet"),
        ("labcore.replay", "labcore.agents.dqn.core"),
        ("labcore.devices", "labcore.agents.ppo.core"),
        ("labcore.losses", "labcore.course.exercises"),
        ("labcore.agents.iqn.core", "labcore.agents.dqn.core"),
        ("labcore.envs.vault", "labcore.nets.actor_critic"),
        ("labcore.agents.ppo.core", "labcore.__main__"),
        ("labcore.runs", "labcore.tools.introspection"),
        ("labcore.agents.dqn.scan", "labcore.course.curves"),
        ("labcore.tools.doctor", "labcore.course.source"),
        ("labcore.course.curves", "labcore.course.exercises"),
        ("labcore.course.source", "labcore.course.lessons.nb01_haiku_dqn.exercises"),
        ("labcore.tools.benchmarking", "labcore.agents.dqn.core"),
    ],
)
def test_the_layering_check_catches_each_kind_of_inversion(importer, imported):
    assert layering_violations({importer: {imported}}) != []


def test_the_import_reader_resolves_relative_and_function_level_imports(tmp_path, monkeypatch):
    import test_layout

    fake_root = tmp_path
    (fake_root / "labcore" / "envs").mkdir(parents=True)
    (fake_root / "labcore" / "agents" / "dqn").mkdir(parents=True)
    for init in ("labcore", "labcore/envs", "labcore/agents", "labcore/agents/dqn"):
        (fake_root / init / "__init__.py").write_text("")
    (fake_root / "labcore" / "agents" / "dqn" / "core.py").write_text("")
    module = fake_root / "labcore" / "envs" / "grid.py"
    module.write_text("def f():\n    from ..agents.dqn import core\n    import labcore.agents\n")
    monkeypatch.setattr(test_layout, "REPO_ROOT", fake_root)
    assert labcore_imports(module) == {"labcore.agents.dqn.core", "labcore.agents"}


def test_no_module_is_longer_than_500_lines():
    long = {str(path.relative_to(REPO_ROOT)): n for path in MODULES if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES}
    assert long == {}


# Phrases that point at documents outside the repository. A reader has only the repository.
OUTSIDE_REFERENCES = re.compile(
    r"\bthe seed['’]s\b(?! (value|key))|\bseed's (settings|config|sketch)|\bthe review\b|\breview's\b|\bOption [AB]\b"
    r"|\bthe issue\b|shared/(reference|seeds)|(shared|the) platform notes|\bplanning doc",
    re.IGNORECASE,
)


def documented_files():
    yield REPO_ROOT / "README.md"
    yield REPO_ROOT / "CHANGELOG.md"
    docs = REPO_ROOT / "docs"
    yield from sorted(path for path in docs.rglob("*.md") if "_build" not in path.relative_to(docs).parts)
    yield from MODULES
    yield from sorted(NOTEBOOKS_DIR.glob("*.ipynb"))
    yield from sorted((REPO_ROOT / "benchmarks").glob("*.py"))
    yield REPO_ROOT / "benchmarks" / "README.md"
    yield from sorted((REPO_ROOT / "colab").glob("*"))


def test_nothing_refers_to_documents_outside_the_repository():
    hits = []
    for path in documented_files():
        if not path.is_file():
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if OUTSIDE_REFERENCES.search(line):
                hits.append(f"{path.relative_to(REPO_ROOT)}:{number}: {line.strip()[:120]}")
    assert hits == []


@pytest.mark.parametrize(
    "line, flagged",
    [
        ("Defaults: the seed's masked-game settings.", True),
        ("the review's 18 points", True),
        ("Option B: data-parallel", True),
        ("see shared/reference/iqn_port.md", True),
        ("as the issue asks", True),
        ("same seed, same numbers; the seeds differ per device", False),
        ("each seed's curve is drawn in grey", False),
    ],
)
def test_the_outside_reference_pattern(line, flagged):
    assert bool(OUTSIDE_REFERENCES.search(line)) is flagged


# One name per concept across every algorithm's config. Left: names that must not appear as a
# config field; right: the field every config uses for that concept.
SYNONYMS = {
    "lr": "learning_rate",
    "memory": "buffer_size",
    "capacity": "buffer_size",
    "grad_clip": "max_grad_norm",
    "total_timesteps": "total_steps",
    "tau": "target_update_rate",
    "epsilon_min": "epsilon_end",
    "epsilon_final": "epsilon_end",
    "layer_size": "hidden_size",
    "discount": "gamma",
    "n_envs": "num_envs",
}
CONFIGS = (
    ("labcore.agents.dqn.core", "DQNConfig"),
    ("labcore.agents.ppo.core", "PPOConfig"),
    ("labcore.agents.pqn.core", "PQNConfig"),
    ("labcore.agents.iqn.core", "IQNConfig"),
    ("labcore.agents.gflownet.core", "GFlowNetConfig"),
)


def config_classes():
    return [getattr(importlib.import_module(module), name) for module, name in CONFIGS]


def test_every_config_uses_the_one_vocabulary():
    offenders = {
        f"{cls.__name__}.{field.name}": SYNONYMS[field.name]
        for cls in config_classes()
        for field in dataclasses.fields(cls)
        if field.name in SYNONYMS
    }
    assert offenders == {}, f"rename to the shared name: {offenders}"


# The documentation pages that describe the tree and the configs (MyST Markdown, rendered by the site).
ARCHITECTURE_PAGE = REPO_ROOT / "docs" / "guide" / "architecture.md"
CONFIG_PAGE = REPO_ROOT / "docs" / "guide" / "config.md"


def page_section(path, title: str) -> str:
    """The ``## title`` section of a Markdown page, up to the next ``## `` heading."""
    text = path.read_text()
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def test_the_config_page_vocabulary_table_lists_every_shared_field():
    section = page_section(CONFIG_PAGE, "One config vocabulary")
    documented = set(re.findall(r"^\| `(\w+)` \|", section, re.MULTILINE))
    shared = {}
    for cls in config_classes():
        for field in dataclasses.fields(cls):
            shared.setdefault(field.name, set()).add(cls.__name__)
    in_two_or_more = {name for name, owners in shared.items() if len(owners) >= 2}
    assert in_two_or_more <= documented, f"undocumented shared fields: {sorted(in_two_or_more - documented)}"
    assert set(SYNONYMS.values()) <= documented
    for retired in SYNONYMS:
        assert f"`{retired}`" in section, f"the table should say which name {retired!r} became"


def test_the_architecture_page_layout_lists_exactly_the_modules():
    block = page_section(ARCHITECTURE_PAGE, "Layout").split("```")[1]
    package_lines = block[block.index("\nlabcore/") : block.index("\ntests/")]
    # Paths are written relative to labcore/ (``agents/dqn/core.py``); a * stands for a family of modules.
    listed = set(re.findall(r"(?<![\w/.])((?:[\w*]+/)*[\w*]+\.py)\b", package_lines))
    every_file = {str(path.relative_to(PACKAGE)) for path in MODULES}
    # A subpackage's __init__.py need not be listed (most only describe their package).
    files = {str(path.relative_to(PACKAGE)) for path in MODULES if not (is_package(path) and path.parent != PACKAGE)}
    unlisted = {name for name in files if not any(fnmatch.fnmatch(name, pattern) for pattern in listed)}
    missing = {pattern for pattern in listed if not any(fnmatch.fnmatch(name, pattern) for name in every_file)}
    assert unlisted == set(), "modules missing from the layout in docs/guide/architecture.md"
    assert missing == set(), "the layout in docs/guide/architecture.md lists modules that do not exist"


# Importing gymnax starts JAX's backends. Only the gymnax environment classes may import it at
# module level: everything else (the configs the command line imports to build its parser, the
# exercises, the drivers) must leave the backends unstarted, so a launched worker can still join
# its cluster and a notebook can still choose its devices after importing labcore.
STARTS_A_BACKEND = {"labcore.envs.vault", "labcore.envs.wrappers", "labcore.envs.hypergrid_env", "labcore.envs.treasurehunt_env"}


def test_importing_labcore_starts_no_jax_backend():
    import subprocess
    import sys

    modules = [module_name(path) for path in MODULES if module_name(path) not in STARTS_A_BACKEND]
    script = (
        "import importlib, sys\n"
        "from jax._src import xla_bridge\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "    if xla_bridge._backends:\n"
        "        sys.exit(f'importing {name} started a JAX backend')\n"
        "importlib.import_module('labcore.envs.vault')\n"
        "sys.exit(0 if xla_bridge._backends else 'the check cannot see a started backend')\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]


def test_no_module_imports_itself_through_others():
    """No import cycle among labcore's modules, counting imports at the top, inside functions and
    for annotations alike (a buffer that named its agent's config in an annotation made one)."""
    names = {module_name(path) for path in MODULES}
    edges = {module_name(path): {name for name in labcore_imports(path) if name in names} - {module_name(path)}
             for path in MODULES}
    done: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        if name in path:
            pytest.fail("import cycle: " + " -> ".join([*path[path.index(name):], name]))
        if name in done:
            return
        for target in sorted(edges[name]):
            visit(target, (*path, name))
        done.add(name)

    for name in sorted(edges):
        visit(name, ())
