"""show_source reads labcore's own code at run time: whole functions, pieces defined inside them,
and clear errors for what has no source."""

from __future__ import annotations

import inspect

import pytest

from labcore.agents.dqn import core as dqn
from labcore.agents.dqn import scan as dqn_scan
from labcore.course.source import Source, show_source


def test_a_whole_function_is_its_module_source_with_file_and_lines():
    shown = show_source(dqn.make_update)
    lines, first = inspect.getsourcelines(dqn.make_update)
    assert shown.text == "".join(lines)
    assert (shown.first_line, shown.last_line) == (first, first + len(lines) - 1)
    assert shown.path == "labcore/agents/dqn/core.py"
    assert shown.qualname == "labcore.agents.dqn.core.make_update"
    assert shown.text.startswith("def make_update(")


def test_a_piece_is_the_function_defined_inside_dedented_with_its_own_lines():
    shown = show_source(dqn_scan.make_parts, piece="iteration")
    assert shown.text.startswith("def iteration(") and "jax.lax.scan(env_step" in shown.text
    file_lines = inspect.getsource(dqn_scan).splitlines()
    assert file_lines[shown.first_line - 1].strip().startswith("def iteration(")
    assert file_lines[shown.last_line - 1].strip() == shown.text.splitlines()[-1].strip()
    assert shown.qualname.endswith("make_parts.<locals>.iteration")


def test_an_unknown_piece_names_the_ones_that_exist():
    with pytest.raises(ValueError, match="defines: env_step, init, iterate, iteration"):
        show_source(dqn_scan.make_parts, piece="body")


def test_objects_without_python_source_are_refused():
    with pytest.raises(TypeError, match="no Python source"):
        show_source(len)


def test_notebooks_get_a_highlighted_block_and_a_plain_prompt_gets_text():
    shown = show_source(dqn.linear_epsilon)
    assert isinstance(shown, Source)
    markdown = shown._repr_markdown_()
    assert "```python\ndef linear_epsilon(" in markdown and "labcore/agents/dqn/core.py" in markdown
    assert repr(shown).startswith("# labcore.agents.dqn.core.linear_epsilon") and "def linear_epsilon(" in str(shown)
