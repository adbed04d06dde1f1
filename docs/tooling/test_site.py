"""The built site, opened in a real browser: every page, every link, every figure.

``make docs-check`` runs this after ``make docs``. It serves ``docs/_build/html`` on 127.0.0.1,
drives the system's Chromium (Debian's ``chromium`` and ``chromium-driver``; a browser that
playwright or selenium would download cannot be fetched without internet) and visits every page.
A page fails on: a console error (a script error, or a resource that did not load, such as a
script or font from a CDN), a broken internal link or anchor, an image that did not load, a
lesson page that shows fewer figures than its notebook drew, or a citation or glossary term that
did not resolve. Screenshots of the start page and of one lesson go to ``docs/_build/screenshots``.
"""

from __future__ import annotations

import functools
import http.server
import os
import pathlib
import re
import shutil
import threading
import urllib.parse

import nbformat
import pytest

DOCS = pathlib.Path(__file__).resolve().parents[1]
SITE = DOCS / "_build" / "html"
LESSONS = DOCS / "lessons"
SCREENSHOTS = DOCS / "_build" / "screenshots"
SCREENSHOT_LESSON = os.environ.get("LABCORE_SCREENSHOT_LESSON", "lessons/07_masked_ppo.html")
# Debian's packages by default; LABCORE_CHROMIUM / LABCORE_CHROMEDRIVER name another Chrome and its
# driver (GitHub's runners ship Google Chrome and a matching chromedriver).
CHROMIUM = tuple(filter(None, (os.environ.get("LABCORE_CHROMIUM"), "/usr/bin/chromium", "/usr/bin/chromium-browser")))
CHROMEDRIVER = tuple(filter(None, (os.environ.get("LABCORE_CHROMEDRIVER"), "/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver")))

if not (SITE / "index.html").exists():
    raise RuntimeError(f"{SITE} has no index.html: build the site first (make docs)")
# Every page; _static/ holds the theme's HTML templates, which are not pages.
PAGES = sorted(str(path.relative_to(SITE)) for path in SITE.rglob("*.html") if path.relative_to(SITE).parts[0] != "_static")

# What a page reports about itself, read in the browser once the page has loaded.
PAGE_FACTS = """
const inCode = el => el.closest('pre, code, .highlight') !== null;
const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
const rawRoles = [];
for (let node = walker.nextNode(); node; node = walker.nextNode()) {
  if (!inCode(node.parentElement) && /\\{(cite|term|py|doc|ref)(:\\w+)?\\}`/.test(node.textContent)) {
    rawRoles.push(node.textContent.trim().slice(0, 80));
  }
}
return {
  ids: Array.from(document.querySelectorAll('[id]')).map(el => el.id)
         .concat(Array.from(document.querySelectorAll('a[name]')).map(el => el.name)),
  links: Array.from(document.querySelectorAll('a[href]')).map(a => a.href),
  images: Array.from(document.images).map(img => ({src: img.currentSrc || img.src, ok: img.complete && img.naturalWidth > 0})),
  outputImages: document.querySelectorAll('div.cell_output img').length,
  problematic: Array.from(document.querySelectorAll('.problematic')).map(el => el.textContent.slice(0, 80)),
  unlinkedTerms: Array.from(document.querySelectorAll('.xref.std-term')).filter(el => !el.closest('a')).map(el => el.textContent),
  unresolvedCitations: Array.from(document.querySelectorAll('a, span')).filter(el => /^\\[?\\?\\]?$/.test(el.textContent.trim()) && el.className.includes('cite')).length,
  rawRoles: rawRoles,
  formulas: document.querySelectorAll('div.math, span.math').length,
  formulasRendered: document.querySelectorAll('div.math mjx-container, span.math mjx-container').length,
  formulasTooWide: Array.from(document.querySelectorAll('div.math')).filter(el => el.scrollWidth > el.clientWidth + 1).length,
  formulaErrors: Array.from(document.querySelectorAll('mjx-merror, [data-mjx-error]'))
                      .map(el => el.getAttribute('data-mjx-error') || el.textContent.slice(0, 80)),
  title: document.title,
};
"""


# MathJax typesets after the page has loaded: wait for it (at most the script timeout) where it runs.
MATHJAX_DONE = """
const done = arguments[arguments.length - 1];
if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
  MathJax.startup.promise.then(() => done('typeset'), error => done('failed: ' + error));
} else {
  done(document.querySelector('div.math, span.math') ? 'MathJax did not load' : 'no formula');
}
"""

SCROLL_TO_FIRST_FIGURE = """
const figure = document.querySelector('div.cell_output img');
if (figure) { figure.scrollIntoView({block: 'center'}); }
return figure !== null;
"""


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="session")
def server():
    handler = functools.partial(_QuietHandler, directory=str(SITE))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()
    httpd.server_close()


def _first_existing(paths):
    found = next((path for path in paths if shutil.which(path)), None)
    if found is None:
        raise RuntimeError(f"none of {paths} exists: install Debian's chromium and chromium-driver "
                           "(apt-get install -y chromium chromium-driver)")
    return found


@pytest.fixture(scope="session")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = _first_existing(CHROMIUM)
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1366,900", "--hide-scrollbars"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=_first_existing(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(60)
    driver.set_script_timeout(60)
    yield driver
    driver.quit()


@pytest.fixture(scope="session")
def visited(server, browser):
    """Every page, loaded once: its facts and its console errors."""
    from selenium.webdriver.support.ui import WebDriverWait

    facts = {}
    for page in PAGES:
        browser.get(server + page)
        WebDriverWait(browser, 30).until(lambda driver: driver.execute_script("return document.readyState") == "complete")
        mathjax = browser.execute_async_script(MATHJAX_DONE)
        if page in ("index.html", SCREENSHOT_LESSON):
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            name = page.replace("/", "_").removesuffix(".html")
            browser.save_screenshot(str(SCREENSHOTS / f"{name}.png"))
            if browser.execute_script(SCROLL_TO_FIRST_FIGURE):
                browser.save_screenshot(str(SCREENSHOTS / f"{name}_figure.png"))
        page_facts = browser.execute_script(PAGE_FACTS)
        page_facts["mathjax"] = mathjax
        page_facts["console"] = [entry["message"] for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
        facts[page] = page_facts
    return {"server": server, "pages": facts}


def _target(server: str, href: str) -> tuple[str, str] | None:
    """(file path relative to the site, fragment) of an internal link; None for an external one."""
    if not href.startswith(server):
        return None
    parsed = urllib.parse.urlsplit(href)
    path = urllib.parse.unquote(parsed.path.lstrip("/")) or "index.html"
    if path.endswith("/"):
        path += "index.html"
    return path, urllib.parse.unquote(parsed.fragment)


@pytest.mark.parametrize("page", PAGES)
def test_page(visited, page):
    facts = visited["pages"][page]
    problems = [f"console: {message}" for message in facts["console"]]
    for href in facts["links"]:
        target = _target(visited["server"], href)
        if target is None:
            continue
        path, fragment = target
        if not (SITE / path).is_file():
            problems.append(f"broken link: {href}")
        elif fragment and path.endswith(".html") and fragment not in visited["pages"].get(path, {}).get("ids", ()):
            problems.append(f"broken anchor: {href}")
    problems += [f"image did not load: {image['src']}" for image in facts["images"] if not image["ok"]]
    problems += [f"unresolved reference: {text!r}" for text in facts["problematic"]]
    problems += [f"glossary term without its entry: {text!r}" for text in facts["unlinkedTerms"]]
    problems += [f"role left as text: {text!r}" for text in facts["rawRoles"]]
    if facts["formulas"]:
        if facts["mathjax"] != "typeset":
            problems.append(f"formulas not typeset: {facts['mathjax']}")
        elif facts["formulasRendered"] < facts["formulas"]:
            problems.append(f"{facts['formulas'] - facts['formulasRendered']} of {facts['formulas']} formulas not rendered")
    problems += [f"formula error: {text!r}" for text in facts["formulaErrors"]]
    if facts["formulasTooWide"]:
        problems.append(f"{facts['formulasTooWide']} displayed formulas wider than the text column")
    if facts["unresolvedCitations"]:
        problems.append(f"{facts['unresolvedCitations']} unresolved citations")
    assert problems == [], f"{page}:\n  " + "\n  ".join(dict.fromkeys(problems))


LESSON_PAGES = sorted(page for page in PAGES if page.startswith("lessons/") and (LESSONS / page[8:]).with_suffix(".ipynb").exists())
DRAWS = re.compile(r"\bplt\.|\.plot\(|\.imshow\(|\.subplots\(|\bplot_\w+\(|\.figure\(")


@pytest.mark.parametrize("page", LESSON_PAGES)
def test_lesson_shows_every_figure_its_notebook_drew(visited, page):
    notebook = nbformat.read((LESSONS / page[8:]).with_suffix(".ipynb"), as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    drawn = sum("image/png" in output.get("data", {}) or "image/svg+xml" in output.get("data", {})
                for cell in code for output in cell.get("outputs", []))
    draws = any(DRAWS.search(cell.source) for cell in code)
    shown = visited["pages"][page]["outputImages"]
    assert not (draws and drawn == 0), f"{page}: the notebook draws, but its run recorded no figure"
    assert shown == drawn, f"{page}: shows {shown} figures, its notebook drew {drawn}"


ALGORITHM_LESSONS = [page for page in LESSON_PAGES
                     if "**Algorithm:" in (DOCS.parent / "notebooks" / page[8:]).with_suffix(".ipynb").read_text()]


@pytest.mark.parametrize("page", ALGORITHM_LESSONS)
def test_an_algorithm_lesson_shows_its_key_equations_typeset(visited, page):
    facts = visited["pages"][page]
    assert facts["mathjax"] == "typeset" and facts["formulasRendered"] >= 3, (page, facts["mathjax"], facts["formulasRendered"])
    assert facts["formulaErrors"] == []


@pytest.mark.parametrize("page", LESSON_PAGES)
def test_a_lesson_links_its_own_page_on_the_site(visited, page):
    assert f"https://labcore-rl.github.io/labcore/{page}" in visited["pages"][page]["links"], page


def test_every_lesson_has_a_page():
    notebooks = sorted(path.stem for path in (DOCS.parent / "notebooks").glob("*.ipynb"))
    assert [page[8:-5] for page in LESSON_PAGES] == notebooks


def test_the_screenshots_were_saved(visited):
    lesson = SCREENSHOT_LESSON.replace("/", "_").removesuffix(".html")
    for name in ("index.png", f"{lesson}.png", f"{lesson}_figure.png"):
        assert (SCREENSHOTS / name).stat().st_size > 10_000, f"{name} is missing or blank"
