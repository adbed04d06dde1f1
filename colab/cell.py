"""The Colab setup cell: keep every copy of it in step, and run it as Colab would.

`setup_cell.py` beside this file is the single source of the first code cell of every notebook.
Its `LABCORE` line names where Colab installs labcore from: a repository and a pinned ref (a
release tag such as `v0.2.0`, or a commit), never a floating branch, so that a notebook opened
from a badge always runs against the library it was written for. Three other places must agree
with that line, and this script writes them:

- the first code cell of every notebook in `notebooks/`;
- every "Open in Colab" badge in `README.md` and `colab/README.md` (they open the notebooks at the
  same repository and ref);
- the copy of the cell shown in `colab/README.md`;
- each notebook's Colab runtime request: the notebooks in `GPU_NOTEBOOKS` carry the metadata that
  makes Colab open them on a T4 GPU runtime (`"accelerator": "GPU"`, `colab.gpuType`); the others
  carry none, and open on Colab's default CPU runtime.

Usage (from the repository root):

    python colab/cell.py sync      # after editing setup_cell.py (a fork, a new release)
    python colab/cell.py check     # exit 1 and list what is out of step (the tests run this)
    python colab/cell.py install --python VENV/bin/python --source git+file:///path/to/clone@COMMIT

`install` runs the cell's own code in a fresh interpreter, in a temporary folder outside the
repository, with `google.colab` present as on Colab, and with only the cell's source replaced
(by a local clone at a commit): the same non-editable `pip install "labcore @ git+..."` a Colab
user runs. `make test-compat` and `tests/test_colab.py` use it.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import pathlib
import re
import subprocess
import sys
import tempfile

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
SETUP_CELL = pathlib.Path("colab", "setup_cell.py")  # these paths are relative to a repository root
BADGE_PAGES = (pathlib.Path("README.md"), pathlib.Path("colab", "README.md"))
CELL_COPY_PAGE = pathlib.Path("colab", "README.md")
CELL_COPY_START, CELL_COPY_END = "<!-- setup cell: written by colab/cell.py sync -->", "<!-- end of setup cell -->"

# The lessons whose work is batched: many vmapped agents or envs, convolutions, large matmuls. A GPU runs
# those in parallel where 2 CPU cores take turns. The others are small networks, or (04, 05) simulate
# many devices on the CPU and need a CPU runtime, or are about debugging and run anywhere.
GPU_NOTEBOOKS = ("01_haiku_dqn", "03_jit_scan_vmap", "07_masked_ppo", "08_accelerators", "12_pqn")
GPU_TYPE = "T4"  # Colab's free-tier GPU

SOURCE = re.compile(r"^labcore @ git\+https://github\.com/(?P<owner>[\w.-]+)/(?P<repo>[\w.-]+?)(?:\.git)?@(?P<ref>[\w./-]+)$")
BADGE = re.compile(r"https://colab\.research\.google\.com/github/[\w.-]+/[\w.-]+/blob/[\w./-]+?/notebooks/")
RELEASE_TAG = re.compile(r"^v\d+\.\d+\.\d+$")
COMMIT = re.compile(r"^[0-9a-f]{40}$")


@dataclasses.dataclass(frozen=True)
class CellSource:
    """Where the setup cell installs labcore from."""

    owner: str
    repo: str
    ref: str

    def badge_prefix(self) -> str:
        return f"https://colab.research.google.com/github/{self.owner}/{self.repo}/blob/{self.ref}/notebooks/"


def cell_text(root: pathlib.Path = REPO_ROOT) -> str:
    """The setup cell exactly as notebooks hold it (no trailing newline)."""
    return (root / SETUP_CELL).read_text().strip()


def labcore_requirement(text: str) -> str:
    """The string assigned to `LABCORE` in the cell's code."""
    for node in ast.parse(text).body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["LABCORE"]:
            if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                return node.value.value
    raise ValueError(f"{SETUP_CELL}: no line LABCORE = \"labcore @ git+https://github.com/OWNER/REPO.git@REF\"")


def parse_source(text: str) -> CellSource:
    """Owner, repository and ref of the cell; refuses a branch (a ref must be vX.Y.Z or a commit)."""
    requirement = labcore_requirement(text)
    match = SOURCE.match(requirement)
    if not match:
        raise ValueError(f"LABCORE = {requirement!r}: expected 'labcore @ git+https://github.com/OWNER/REPO.git@REF'")
    ref = match["ref"]
    if not (RELEASE_TAG.match(ref) or COMMIT.match(ref)):
        raise ValueError(f"LABCORE pins {ref!r}: pin a release tag (vX.Y.Z) or a full commit, not a branch, "
                         "so that the notebooks and the library they install stay the same version")
    return CellSource(match["owner"], match["repo"], ref)


def _notebook_paths(root: pathlib.Path) -> list[pathlib.Path]:
    return sorted((root / "notebooks").glob("*.ipynb"))


def _first_code_cell(notebook):
    return next(cell for cell in notebook.cells if cell.cell_type == "code")


def _with_cell_copy(page_text: str, text: str) -> str:
    start, end = page_text.index(CELL_COPY_START), page_text.index(CELL_COPY_END)
    return page_text[: start + len(CELL_COPY_START)] + f"\n```python\n{text}\n```\n" + page_text[end:]


def _runtime_wanted(stem: str) -> tuple[str | None, str | None]:
    return ("GPU", GPU_TYPE) if stem in GPU_NOTEBOOKS else (None, None)


def _runtime_request(notebook) -> tuple[str | None, str | None]:
    """(accelerator, GPU type) as the notebook's metadata asks Colab for them."""
    return notebook.metadata.get("accelerator"), notebook.metadata.get("colab", {}).get("gpuType")


def _request_runtime(notebook, stem: str) -> None:
    accelerator, gpu_type = _runtime_wanted(stem)
    colab = notebook.metadata.setdefault("colab", {"provenance": []})
    if accelerator is None:
        notebook.metadata.pop("accelerator", None)
        colab.pop("gpuType", None)
    else:
        notebook.metadata["accelerator"] = accelerator
        colab["gpuType"] = gpu_type


def out_of_step(root: pathlib.Path = REPO_ROOT, write: bool = False) -> list[str]:
    """Every place that disagrees with setup_cell.py; with `write`, fix them and return what changed."""
    import nbformat  # only the maintenance commands need it, not `install`

    text = cell_text(root)
    source = parse_source(text)
    changed = []
    for path in _notebook_paths(root):
        notebook = nbformat.read(path, as_version=4)
        cell = _first_code_cell(notebook)
        fixed = []
        if cell.source.strip() != text:
            fixed.append("first code cell")
            cell.source = text
        if _runtime_request(notebook) != _runtime_wanted(path.stem):
            fixed.append("Colab runtime request")
            _request_runtime(notebook, path.stem)
        if fixed:
            changed.append(f"{path.relative_to(root)}: {' and '.join(fixed)}")
            if write:
                nbformat.write(notebook, path)
    for page in BADGE_PAGES:
        page_text = (root / page).read_text()
        new_text = BADGE.sub(source.badge_prefix(), page_text)
        if page == CELL_COPY_PAGE:
            new_text = _with_cell_copy(new_text, text)
        if new_text != page_text:
            changed.append(f"{page}: badges or the copy of the cell")
            if write:
                (root / page).write_text(new_text)
    return changed


def install_as_colab(python: str, source: str, timeout: float = 900) -> subprocess.CompletedProcess:
    """Run the setup cell in `python` as Colab would, installing labcore from `source` instead.

    `source` is a pip URL such as ``git+file:///path/to/clone@COMMIT``. The cell runs from a fresh
    temporary folder, so nothing is importable from a checkout, and it sees ``google.colab`` in
    ``sys.modules`` as it does on Colab. Raises RuntimeError, with pip's output, when the install fails.
    """
    text = cell_text()
    requirement = labcore_requirement(text)
    code = "\n".join([
        "import sys, types",
        "sys.modules['google.colab'] = types.ModuleType('google.colab')  # as in a Colab kernel",
        text.replace(requirement, f"labcore @ {source}"),
    ])
    assert f"labcore @ {source}" in code, "the cell's LABCORE line was not replaced"
    with tempfile.TemporaryDirectory(prefix="labcore-colab-") as folder:
        result = subprocess.run([python, "-c", code], cwd=folder, timeout=timeout, capture_output=True, text=True)
    if result.returncode:
        raise RuntimeError(f"the setup cell failed in {python} (exit {result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("sync", help="write setup_cell.py into the notebooks, badges and colab/README.md")
    commands.add_parser("check", help="exit 1 if any of them disagrees with setup_cell.py")
    install = commands.add_parser("install", help="run the cell as Colab would, from another source")
    install.add_argument("--python", required=True, help="the interpreter to install into")
    install.add_argument("--source", required=True, help="pip URL, e.g. git+file:///path/to/clone@COMMIT")
    args = parser.parse_args(argv)
    if args.command == "install":
        try:
            result = install_as_colab(args.python, args.source)
        except RuntimeError as error:
            print(error, file=sys.stderr)
            return 1
        print(result.stdout, end="")
        return 0
    changed = out_of_step(write=args.command == "sync")
    for line in changed:
        print(("updated " if args.command == "sync" else "out of step with colab/setup_cell.py: ") + line)
    return 1 if changed and args.command == "check" else 0


if __name__ == "__main__":
    sys.exit(main())
