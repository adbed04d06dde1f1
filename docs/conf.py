"""Sphinx configuration of labcore's site: the lessons with their outputs, the guides, the results,
the API reference, the glossary and the bibliography.

``make docs`` first writes the executed lessons into ``docs/lessons/`` (``docs/tooling/lessons.py``:
the outputs CI's notebook run recorded, or a fresh execution when a notebook's code changed), then
builds this folder with warnings as errors. Nothing here executes a notebook.
"""

from __future__ import annotations

import datetime
import pathlib
import shutil
import sys

DOCS = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS / "tooling"))

import atari_page  # noqa: E402  (docs/tooling: the Atari results page's tables and figure)
import labcore  # noqa: E402
import registry_table  # noqa: E402  (docs/tooling: the architecture guide's table of algorithms)
import site_facts  # noqa: E402  (docs/tooling: where the repository and the site live)

project = "labcore"
author = "the labcore developers"
copyright = f"{datetime.date.today().year}, {author}"
release = labcore.__version__
version = release

extensions = [
    "myst_nb",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "sphinxcontrib.bibtex",
    "api_docstrings",  # docs/tooling: labcore's docstrings (shapes, indented examples) as reST
]

exclude_patterns = ["_build", "_generated", "_templates", "tooling", "README.md", "**.ipynb_checkpoints", "jupyter_execute"]
# ".rst" first: autosummary writes its generated pages with the first suffix registered for reST
# (Sphinx 9 looks the parser up by suffix), and they are reST.
source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
templates_path = ["_templates"]

# Lessons arrive executed (docs/tooling/lessons.py); the site never runs a notebook itself.
nb_execution_mode = "off"
nb_merge_streams = True
myst_enable_extensions = ["colon_fence", "dollarmath", "amsmath", "deflist", "substitution"]
myst_heading_anchors = 3
# Pages rendered at build time: the Atari results page's numbers and figure from its recorded runs
# (docs/tooling/atari_page.py), the architecture guide's table of algorithms from the registry
myst_substitutions = {**atari_page.substitutions(), **registry_table.substitutions()}
atari_page.write_figure(DOCS / "_generated" / "atari_breakout.png")

# Citations: one bibliography (docs/references.bib), author-year in the text.
bibtex_bibfiles = ["references.bib"]
bibtex_default_style = "plain"
bibtex_reference_style = "author_year"

# The API reference: one page per public module, written by autosummary from the docstrings.
autosummary_generate = True
autosummary_imported_members = False
# undoc-members: a public name without a docstring is still part of the API (its signature and
# types are documented); autodoc treats any value of a flag option as "on", so say True.
autodoc_default_options = {"members": True, "undoc-members": True, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_format = "short"
autodoc_preserve_defaults = True
# The PyTorch reference and the Ray parts import what they need lazily; nothing is mocked.

# MathJax from the installed django-static-mathjax package, copied next to the pages: the site
# works offline (a CDN copy would fail in CI's browser test and on a plane).
import mathjax as _mathjax_package  # noqa: E402

_MATHJAX = pathlib.Path(_mathjax_package.__file__).parent / "static" / "mathjax" / "es5" / "tex-svg.js"
_STATIC_BUILD = DOCS / "_build" / "static"
_STATIC_BUILD.mkdir(parents=True, exist_ok=True)
shutil.copyfile(_MATHJAX, _STATIC_BUILD / "tex-svg.js")
mathjax_path = "tex-svg.js"
html_static_path = ["_static", str(_STATIC_BUILD)]
html_css_files = ["labcore.css"]

html_theme = "sphinx_book_theme"
html_favicon = "_static/labcore-icon.svg"
# The theme's colour mode before a reader picks one (an empty mode makes its script log an error).
html_context = {"default_mode": "auto"}
html_title = f"labcore {release}"
html_last_updated_fmt = "%Y-%m-%d"
html_theme_options = {
    "repository_url": site_facts.repository_url(),
    "repository_branch": "main",
    "path_to_docs": "docs",
    "use_repository_button": True,
    "use_source_button": False,
    "use_download_button": True,
    "show_toc_level": 2,
    "navigation_with_keys": False,
}

# Warnings fail the build (make docs runs sphinx-build -W); these two are expected and harmless:
# notebooks carry a kernel's widget mime types beside their text, and myst-nb says so.
suppress_warnings = ["mystnb.unknown_mime_type"]
