"""labcore's docstrings as reST, for the API reference (a Sphinx extension; docs/conf.py loads it).

labcore's docstrings are written as plain text for ``help()`` and for reading in the source: prose
with ``literals``, shape notes (``obs: [B, *obs_shape] uint8``, ``sum_x |p(x) - q(x)|``), argument
notes one per line (``run_dir: where the run goes``), and code examples, tables and formulas set
off by indentation, usually without the ``::`` reST wants before a literal block. Read as reST,
the indented blocks would become block quotes (their line breaks lost) or errors, the argument
notes would run into one paragraph, and a shape note's ``*`` or a ``|x|`` would open inline markup
that never closes. ``autodoc-process-docstring`` rewrites each docstring with a few general rules,
so the source keeps its plain-text style and the site shows what the text means:

1. An indented block (deeper than the paragraph or list item before it) is a literal block: a
   ``::`` is added before it unless the paragraph already ends with ``::``.
2. A paragraph whose every line starts with ``name: `` (continuation lines indented) is a list of
   named entries: an entry that names parameters of the documented function or class becomes a
   ``:param name:`` field (merged with the type hints, ``autodoc_typehints = "description"``),
   any other a definition-list item. Entries whose values are aligned in columns (two or more
   spaces after the colon) are a table, kept as a literal block.
3. A line that leaves a list or an indented block without a blank line ends it (a blank line is
   added), as it does for a reader of the plain text.
4. Outside ````literals```` and `interpreted text`: ``|`` is a character, never a substitution;
   a word's trailing ``_`` is a character, never a hyperlink reference (``clip_grad_norm_``,
   ``__init__``); a ``*`` that unpacks inside a shape note (``[B, *obs_shape]``) is a character.

Besides the docstrings: what Python or a decorator wrote rather than labcore is left out (a
dataclass's or NamedTuple's bare-signature docstring, a NamedTuple field's "Alias for field number
N", flax.struct's ``replace``), and a type hint that Python left as a bare name (a dataclass field
whose class has an annotation only a type checker can evaluate) links to the class that name means
in its own module, not to every documented class of that name (two modules define ``FrameBuffer``).
"""

from __future__ import annotations

import inspect
import re
import sys
from typing import Any

# rule 1 and 3: list items, whose content starts after the marker
_LIST_ITEM = re.compile(r"^(\s*)([*+-]|\d+[.)]) +(?=\S)")
# rule 2: "name: value" or "name, other: value" at the start of a line
_ENTRY = re.compile(r"^(?P<names>[A-Za-z_]\w*(?:, [A-Za-z_]\w*)*):(?P<space> +)(?P<value>\S.*)$")
_INLINE_ENTRY = re.compile(r";\s+[A-Za-z_]\w*(?:, [A-Za-z_]\w*)*: ")
# rule 4: spans that are already markup, left untouched
_PROTECTED = re.compile(r"(?::[\w:-]+:)?``.+?``|(?::[\w:-]+:)?`[^`]+`_{0,2}", re.DOTALL)
_PIPE = re.compile(r"(?<!\\)\|")
_TRAILING_UNDERSCORES = re.compile(r"(?<=\w)(_+)(?=[^\w]|$)")
_SHAPE_STAR = re.compile(r"(?:(?<=[\[(])|(?<=, ))\*(?=[A-Za-z_])")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _content_indent(line: str) -> int:
    """Where a line's text starts: after the marker for a list item, else at its first character."""
    match = _LIST_ITEM.match(line)
    return match.end() if match else _indent(line)


def _escape_prose(text: str) -> str:
    """Rule 4 on a run of prose lines (joined by newlines, so that a ````literal```` may span lines)."""
    pieces = []
    last = 0
    for match in _PROTECTED.finditer(text):
        pieces.append(_escape_plain(text[last : match.start()]))
        pieces.append(match.group(0))
        last = match.end()
    pieces.append(_escape_plain(text[last:]))
    return "".join(pieces)


def _escape_plain(text: str) -> str:
    text = _PIPE.sub(r"\\|", text)
    text = _TRAILING_UNDERSCORES.sub(lambda m: "\\_" * len(m.group(1)), text)
    return _SHAPE_STAR.sub(r"\\*", text)


def _parameters(obj: Any) -> set[str]:
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):
        return set()
    return {name for name in signature.parameters if name not in ("self", "cls")}


def _literal(block: list[str], indent: int) -> list[str]:
    """An introduction-less ``::`` at ``indent`` and the block below it (trailing blank lines dropped)."""
    while block and not block[-1].strip():
        block.pop()
    return [" " * indent + "::", "", *block, ""]


def _entries(paragraph: list[str], margin: int) -> list[tuple[list[str], str, list[str]]] | None:
    """Rule 2: the paragraph's named entries (names, first line's value, deeper lines), or None."""
    entries: list[tuple[list[str], str, list[str]]] = []
    for line in paragraph:
        if _indent(line) > margin:
            if not entries:
                return None
            entries[-1][2].append(line)
            continue
        match = _ENTRY.match(line[margin:])
        if match is None or _INLINE_ENTRY.search(line):
            return None
        entries.append((match.group("names").split(", "), match.group("value"), []))
    if len(entries) < 2 and not any(deeper for _, _, deeper in entries):
        return None
    return entries


def _render_entries(paragraph: list[str], margin: int, parameters: set[str]) -> list[str] | None:
    entries = _entries(paragraph, margin)
    if entries is None:
        return None
    pad = " " * margin
    if any(len(_ENTRY.match(line[margin:]).group("space")) > 1 for line in paragraph if _indent(line) == margin):
        return _literal([pad + "    " + line[margin:] for line in paragraph], margin)  # a table
    out: list[str] = []
    for names, value, deeper in entries:
        if deeper and value.endswith(":"):  # "metrics: per iteration:" and a table below it
            base = min(_indent(line) for line in deeper)
            body = [value, "", "::", "", *("    " + line[base:] for line in deeper)]
        else:
            body = [value, *(line.strip() for line in deeper)]
        if parameters and set(names) <= parameters:
            for name in names:
                out.append(f"{pad}:param {name}: {body[0]}")
                out.extend(f"{pad}    {line}" if line else "" for line in body[1:])
                out.append("")
        else:
            out.append(pad + ", ".join(f"``{name}``" for name in names))
            out.extend(f"{pad}    {line}" if line else "" for line in body)
            out.append("")
    return out


def to_rest(lines: list[str], parameters: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """One docstring's lines (dedented, as autodoc passes them) rewritten as reST by rules 1 to 4."""
    out: list[str] = []
    context = 0  # where the text of the paragraph or list item being read starts
    previous = ""  # the last non-blank line read
    after_blank = True
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            out.append("")
            after_blank = True
            i += 1
            continue
        indent = _indent(line)
        if indent > context and previous:
            # rule 1: an indented block, while lines are blank or deeper than the context
            end = i
            while end < len(lines) and (not lines[end].strip() or _indent(lines[end]) > context):
                end += 1
            block = lines[i:end]
            if not after_blank:
                out.append("")
            if previous.rstrip().endswith("::"):
                while block and not block[-1].strip():
                    block.pop()
                out.extend([*block, ""])
            else:
                out.extend(_literal(block, context))
            previous, after_blank, i = lines[i], True, end
            continue
        if indent < context and not after_blank:
            out.append("")  # rule 3: a line that leaves a list item or a block ends it
        if after_blank:
            end = i
            while end < len(lines) and lines[end].strip():
                end += 1
            rendered = _render_entries(lines[i:end], indent, set(parameters))
            if rendered is not None:  # rule 2
                out.extend(rendered)
                previous, after_blank, context, i = lines[end - 1], True, indent, end
                continue
        if after_blank or indent < context or _LIST_ITEM.match(line):
            context = _content_indent(line)
        out.append(line)
        previous, after_blank = line, False
        i += 1
    return _escape(out)


def _escape(out: list[str]) -> list[str]:
    """Rule 4 on every run of lines outside literal blocks (a literal block follows a line ending in ``::``)."""
    result: list[str] = []
    run: list[str] = []
    literal_indent: int | None = None
    for line in out:
        if literal_indent is not None:
            if not line.strip() or _indent(line) > literal_indent:
                result.append(line)
                continue
            literal_indent = None
        run.append(line)
        if line.rstrip().endswith("::"):
            result.extend(_escape_prose("\n".join(run)).split("\n"))
            run = []
            literal_indent = _indent(line)
    if run:
        result.extend(_escape_prose("\n".join(run)).split("\n"))
    return result


def _process_docstring(app: Any, what: str, name: str, obj: Any, options: Any, lines: list[str]) -> None:
    if what == "class" and _synthesized_class_doc(obj, lines):
        lines[:] = []
        return
    parameters = _parameters(obj) if what in ("function", "method", "class", "exception") else set()
    lines[:] = to_rest(list(lines), parameters)


def _synthesized_class_doc(obj: Any, lines: list[str]) -> bool:
    """A dataclass's or NamedTuple's docstring that Python wrote: ``Name(field, ...)``."""
    return _is_generated(obj, " ".join(line.strip() for line in lines if line.strip()))


def _is_generated(obj: Any, text: str) -> bool:
    import dataclasses

    if dataclasses.is_dataclass(obj):
        try:
            return text == obj.__name__ + str(inspect.signature(obj)).replace(" -> None", "")
        except (TypeError, ValueError):
            return False
    fields = getattr(obj, "_fields", None)
    return fields is not None and text == f"{obj.__name__}({', '.join(fields)})"


def _process_signature(app: Any, what: str, name: str, obj: Any, options: Any, signature: Any, annotation: Any):
    """A class whose docstring Python wrote gets its introspected signature, not that docstring's line.

    autodoc reads a first docstring line of the form ``Name(...)`` as the signature, and the line a
    dataclass gets carries its annotations as quoted strings; the signatures of the other classes
    are introspected, without annotations (``autodoc_typehints = "description"``).
    """
    if what not in ("class", "exception") or not _is_generated(obj, (obj.__doc__ or "").strip()):
        return None
    from sphinx.util.inspect import signature as introspect, stringify_signature

    try:
        return stringify_signature(introspect(obj), show_annotation=False, show_return_annotation=False), annotation
    except (TypeError, ValueError):
        return None


def _skip_member(app: Any, what: str, name: str, obj: Any, skip: bool, options: Any) -> bool | None:
    """Leave out what a decorator or base class wrote into a labcore class: a NamedTuple field's
    "Alias for field number N", and methods defined outside labcore (flax.struct's ``replace``)."""
    if type(obj).__name__ == "_tuplegetter" and (obj.__doc__ or "").startswith("Alias for field number"):
        return True
    if what == "class" and inspect.isroutine(obj) and not (getattr(obj, "__module__", None) or "labcore").startswith("labcore"):
        return True
    return None


def _qualify_type_references(app: Any, doctree: Any) -> None:
    """Point a type hint's bare class name at the class it names in the module it was written in.

    Annotations Python could not evaluate (a dataclass field's, when another annotation of the
    class names a type that only exists for type checkers) reach the page as the bare name, and
    Sphinx's search by name then finds every documented class of that name (two modules define a
    ``FrameBuffer``). The module's own namespace says which class was meant.
    """
    from sphinx import addnodes

    for node in doctree.findall(addnodes.pending_xref):
        if node.get("refdomain") != "py" or node.get("reftype") not in ("class", "obj", "exc"):
            continue
        target, module = node.get("reftarget", ""), sys.modules.get(node.get("py:module") or "")
        if module is None or not target or target.startswith(("~", ".")):
            continue
        head, *rest = target.split(".")
        value: Any = vars(module).get(head)
        for part in rest:
            value = getattr(value, part, None)
        if isinstance(value, type) and value.__module__.startswith("labcore"):
            node["reftarget"] = f"{value.__module__}.{value.__qualname__}"


def setup(app: Any) -> dict[str, Any]:
    app.connect("autodoc-process-docstring", _process_docstring)
    app.connect("doctree-read", _qualify_type_references)
    app.connect("autodoc-process-signature", _process_signature)
    app.connect("autodoc-skip-member", _skip_member)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
