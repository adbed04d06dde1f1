"""Show the library's own source in a notebook, read at run time so lesson and code cannot drift.

A notebook that teaches an algorithm shows the code that runs it::

    from labcore.course.source import show_source
    show_source(dqn.make_update)                      # the whole function
    show_source(dqn_scan.make_parts, piece="iteration")  # one function defined inside it

``show_source`` returns a :class:`Source`: in Jupyter or Colab it renders as a highlighted code
block headed by the file and line numbers; printed, it is plain text. Because the text is read from
the installed module with ``inspect`` when the cell runs, what the reader sees is exactly what the
training cells below execute.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
from pathlib import Path
from typing import Any


@dataclasses.dataclass(frozen=True)
class Source:
    """A piece of source code and where it lives: ``module`` (dotted name), ``path`` relative to the
    package's parent folder (``labcore/agents/dqn/core.py``), and its first and last line."""

    qualname: str
    module: str
    path: str
    first_line: int
    last_line: int
    text: str

    @property
    def header(self) -> str:
        return f"{self.qualname}  ({self.path}, lines {self.first_line}-{self.last_line})"

    def __str__(self) -> str:
        return f"# {self.header}\n{self.text}"

    def __repr__(self) -> str:  # what a plain Python prompt shows
        return str(self)

    def _repr_markdown_(self) -> str:  # what Jupyter and Colab show: a highlighted block
        return f"`{self.header}`\n\n```python\n{self.text}```\n"


def _relative_path(filename: str, module: str) -> str:
    """``labcore/agents/dqn/core.py`` for a file of package ``labcore`` wherever it is installed."""
    parts = Path(filename).parts
    top = module.split(".")[0]
    if top in parts:
        start = len(parts) - 1 - parts[::-1].index(top)
        return "/".join(parts[start:])
    return Path(filename).name


def _find_piece(tree: ast.AST, piece: str) -> ast.AST | None:
    """The first function or class named ``piece`` defined anywhere inside ``tree`` (breadth first,
    in source order), not counting ``tree`` itself."""
    for node in ast.walk(tree):
        if node is tree:
            continue
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.name == piece:
            return node
    return None


def show_source(obj: Any, *, piece: str | None = None) -> Source:
    """The source of ``obj`` (a function, class or method of an installed module), or of the
    function or class named ``piece`` defined inside it (a closure such as the scan body that a
    ``make_*`` function returns). Decorators are included; the text is dedented.

    Raises TypeError for objects without Python source (builtins, compiled functions) and
    ValueError when ``piece`` is not defined inside ``obj``, naming the pieces that are.
    """
    target = inspect.unwrap(obj)
    try:
        lines, first_line = inspect.getsourcelines(target)
        filename = inspect.getsourcefile(target) or inspect.getfile(target)
    except (OSError, TypeError) as error:
        raise TypeError(f"no Python source for {obj!r}: {error}") from None
    module = getattr(target, "__module__", None) or "?"
    qualname = f"{module}.{getattr(target, '__qualname__', getattr(target, '__name__', '?'))}"
    text = textwrap.dedent("".join(lines))
    if piece is not None:
        tree = ast.parse(text)
        node = _find_piece(tree, piece)
        if node is None:
            inner = sorted({n.name for n in ast.walk(tree) if n is not tree.body[0]
                            and isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)})
            raise ValueError(f"{qualname} defines no function or class {piece!r} inside it; it defines: {', '.join(inner) or 'none'}")
        start = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
        text = textwrap.dedent("".join(text.splitlines(keepends=True)[start - 1:node.end_lineno]))
        first_line, last_line = first_line + start - 1, first_line + node.end_lineno - 1
        qualname = f"{qualname}.<locals>.{piece}"
    else:
        last_line = first_line + len(lines) - 1
    if not text.endswith("\n"):
        text += "\n"
    return Source(qualname, module, _relative_path(filename, module), first_line, last_line, text)


def display(source: Source) -> None:
    """Render ``source`` in a notebook (highlighted), or print it outside one."""
    try:
        from IPython import get_ipython
        from IPython.display import Markdown
        from IPython.display import display as ipython_display
    except ImportError:
        print(source)
        return
    if get_ipython() is None:
        print(source)
    else:
        ipython_display(Markdown(source._repr_markdown_()))
