"""Numbers in the lessons' prose that nothing backs: each must come from somewhere a reader can check.

A number typed into a sentence drifts from the run it describes. In a lesson's markdown a number
passes when it is

* a setting the lesson's own code uses (``40_000`` in a cell backs "40k transitions");
* in a sentence that cites a paper (``{cite:p}``), links the page that records it (a results page,
  a guide, another lesson, a paper), or says that a cell prints it;
* a reference into the course (section 3.2, lesson 03, line 11, exercise 2), a small count (10 or
  less, with no unit), or part of an identifier (an H100 80GB, a 10x10 grid named by its code);
* rendered from the records (the **Time** paragraph, which ``benchmarks/lesson_times.py`` writes);
* a fact of arithmetic or of a format, listed in ``FACTS`` below with the reason it holds.

Anything else is reported, with its sentence. The results pages are the records themselves: there,
every section whose table holds numbers must say what produced them (a command, a script or a link)
and when (a date). ``python docs/tooling/prose_numbers.py`` prints each problem and exits 1 if there is any.
"""

from __future__ import annotations

import json
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]

# Numbers that are true by arithmetic or by a format's definition, per lesson: (number as written, why).
FACTS: dict[str, dict[str, str]] = {
    "05_many_processes": {
        "15": "Ray's default niceness for its worker processes (RAY_worker_niceness)",
    },
    "06_iqn_port": {
        "500": "5 agents x 50 turns x (act, remember), plus each agent's start, learn and end: 515 calls",
        "52": "jax_parallel's calls in an epoch: its start, one per turn (50), its end",
    },
    "00_jax_primitives": {
        "88.7": "exp overflows float32 above log(float32 max) = log(3.4e38) = 88.72",
        "112": "4*8 + 8*8 + 8*2, the sum written out beside it",
    },
    "01_haiku_dqn": {
        "1.69M": "the Nature DQN's parameter count: 32*8*8*4+32 + 64*4*4*32+64 + 64*3*3*64+64 + 3136*512+512 + 512*A+A",
        "3136": "7*7*64, the flattened output of the Nature network's last convolution",
        "512": "the Nature network's dense layer",
        "56": "1M transitions x 2 stacks x 4 frames x 84x84 bytes = 56 GB",
        "500": "CartPole-v1's time limit",
    },
    "07_masked_ppo": {
        "65,536": "labcore.logged_scan.METRICS_BURST_STEPS",
        "475": "CartPole-v1's reward threshold in gymnasium",
        "500": "CartPole-v1's time limit",
    },
    "08_accelerators": {
        "0.4%": "2**-8 = 0.39%, bfloat16's relative rounding error with 8 significant bits",
        "23": "float32's mantissa bits (IEEE 754)",
    },
    "09_gflownet_hybrid": {
        "4,096": "8**4 terminal states of the D=4, H=8 grid",
        "29": "the longest trajectory on that grid: D*(H-1) = 28 moves and the stop action",
        "1,250": "20,000 samples / 16 trajectories per iteration",
        "0.25": "a threshold of the HyperGrid reward (Bengio et al. 2021), cited with the pseudocode",
        "0.4": "a threshold of the HyperGrid reward (Bengio et al. 2021), cited with the pseudocode",
    },
    "10_debugging": {
        "104": "float32's exp underflows to 0 below about -103.97: a logit 104 below its row's largest",
    },
    "11_profiling": {
        "6006": "TensorBoard's default port",
    },
    "12_pqn": {
        "500": "CartPole-v1's time limit",
    },
}

NUMBER = re.compile(r"(?<![\w.$\\/#@-])(\d[\d,]*(?:\.\d+)?)(\s?(?:k|M|%|x|×|s|ms|min|GB|GiB|MiB|MB)(?![\w]))?")
# A number that points into the course, not a measurement: section 3.2, lesson 03, lines 10-16.
REFERENCE = re.compile(r"\b(?:sections?|lessons?|lines?|cells?|exercises?|notebooks?|items?|equations?|parts?|steps?)"
                       r"\s+(?:\d[\d.]*(?:\s*(?:,|and|to|-|–)\s*)?)+$", re.IGNORECASE)
SOURCED = re.compile(r"\{cite:[a-z]+\}|\]\(|\bprint(?:s|ed)?\b|\{doc\}|\{ref\}|\{py:|\blessons? \d+ measures?\b")
PRINTED = re.compile(r"\bprint(?:s|ed)?\b|\blessons? \d+ measures?\b")
CITED_KEYS = re.compile(r"\{cite:[a-z]+\}<([^>]*)>")
RESULTS_LINK = re.compile(r"\]\([^)]*\bresults/([\w-]+)\.(?:html|md)")
# A version number: JAX 0.10.2, Flax 0.11, Python 3.11.
VERSION = re.compile(r"(?:\b(?:jax|jaxlib|linux|ale|ale-py|flax|optax|orbax|chex|ray|python|pytorch|torch|cuda|cudnn|numpy|gymnasium|version"
                     r"|ICLR|ICML|NeurIPS|AAAI|AISTATS)"
                     r"\s?v?|\d\.)$", re.IGNORECASE)


def _plain(text: str) -> str:
    """Markdown without what is not prose: math, code, comments, headings (roles such as {cite:p} keep
    their names, and links their targets' opening, so that a sentence still shows it cites)."""
    text = re.sub(r"\$\$.*?\$\$", " ", text, flags=re.S)
    text = re.sub(r"\$[^$\n]+\$", " ", text)
    text = re.sub(r"```.*?```", " ", text, flags=re.S)
    # {py:meth}`Title <target>` keeps only its target, as {py:meth}`target` does
    text = re.sub(r"(\{[a-z:]+\})`(?:[^`<]*<)?([^`>]*)>?`", lambda m: m.group(1) + "<" + m.group(2).replace(" ", "") + ">", text)
    text = re.sub(r"`[^`]*`", " ", text)
    text = re.sub(r"<!--.*?-->", " ", text, flags=re.S)
    text = re.sub(r"^#+ .*$", " ", text, flags=re.M)
    return text


def _sentences(text: str) -> list[str]:
    return [s for part in re.split(r"\n\s*\n|\n\s*[*\-] |\n\s*\d+\. ", text)
            for s in re.split(r"(?<=[.!?;])\s+(?=[A-Z(*])", part) if s.strip()]


def _code_numbers(code: str) -> set[str]:
    found = set()
    for token in re.findall(r"\d[\d_]*(?:\.\d+)?(?:e-?\d+)?", code):
        value = float(token.replace("_", ""))
        found |= {repr(value), str(int(value)) if value.is_integer() else repr(value)}
    return found


def _value(number: str, unit: str) -> str:
    value = float(number.replace(",", ""))
    value *= {"k": 1e3, "M": 1e6}.get(unit.strip(), 1)
    return str(int(value)) if value.is_integer() else repr(value)


def _on_page(number: str, unit: str, page: str) -> bool:
    """Whether a results page's text holds the number (as written, or without its thousands commas)."""
    forms = {number + unit.strip(), number, number.replace(",", "")}
    return any(re.search(r"(?<![\d.])" + re.escape(form) + r"(?![\d])", page) for form in forms if form)


PY_ROLE = re.compile(r"\{py:[a-z]+\}<~?([\w.]+)>")


def _named_code_numbers(sentence: str) -> set[str]:
    """The numbers written in the source of the labcore objects the sentence names with a {py:...} role."""
    import importlib
    import inspect

    found: set[str] = set()
    for path in PY_ROLE.findall(sentence):
        parts = path.split(".")
        for split in range(len(parts), 0, -1):  # the longest importable module, then attributes
            try:
                obj = importlib.import_module(".".join(parts[:split]))
            except ImportError:
                continue
            try:
                for name in parts[split:]:
                    obj = getattr(obj, name)
                found |= _code_numbers(inspect.getsource(obj))
            except (AttributeError, TypeError, OSError):
                pass
            break
    return found


def _quoted(number: str, unit: str, sentence: str) -> bool:
    """Whether the number is one recorded, with its locator, from a source the sentence cites or links."""
    from labcore.course import published

    keys = {key for keys in CITED_KEYS.findall(sentence) for key in keys.split(",")}
    links = set(re.findall(r"\]\(([^)]*)\)", sentence))
    for quote in published.QUOTES:
        if quote.value in (number + unit.strip(), number + unit, number) and (quote.source in keys or quote.source in links):
            return True
    return False


def lesson_numbers(notebook: dict, name: str, results: dict[str, str] | None = None) -> list[tuple[str, str]]:
    """(number, its sentence) for every number in a lesson's prose that nothing backs.

    A sentence that says a cell prints it backs its numbers. A sentence that links a results page
    backs only the numbers that page holds (``results``: page name -> text; default: docs/results).
    A sentence that cites a paper or links another source backs only the numbers recorded, with
    where in that source they stand, in ``labcore.course.published.QUOTES``: a citation beside a
    number is not evidence that the source contains it."""
    if results is None:
        results = {path.stem: path.read_text() for path in (ROOT / "docs" / "results").glob("*.md")}
    cells = notebook["cells"]
    code = _code_numbers("\n".join("".join(cell["source"]) for cell in cells if cell["cell_type"] == "code"))
    facts = FACTS.get(name, {})
    found = []
    for index, cell in enumerate(cells):
        if cell["cell_type"] != "markdown":
            continue
        text = "".join(cell["source"])
        if index == 0 and "**Time**" in text:
            text = text[:text.index("**Time**")]  # rendered from the records
        for sentence in _sentences(_plain(text)):
            if PRINTED.search(sentence):
                continue
            pages = [results[page] for page in RESULTS_LINK.findall(sentence) if page in results]
            named = _named_code_numbers(sentence)
            elsewhere = SOURCED.search(RESULTS_LINK.sub("", sentence))
            plain = sentence
            for match in NUMBER.finditer(plain):
                number, unit = match.group(1).rstrip(","), match.group(2) or ""
                before, after = plain[:match.start()], plain[match.end():]
                if (number + unit.strip() in facts or number in facts or REFERENCE.search(before + number)
                        or VERSION.search(before) or re.match(r"\.\d", after)
                        or (not unit and "." not in number and float(number.replace(",", "")) <= 10)
                        or re.match(r"[A-Za-z]", after) or re.search(r"[A-Za-z]$|[A-Za-z]\d+\s$", before)  # a name: H100 80GB
                        or re.match(r"\s?x\s?\d", after) or re.search(r"\d\s?x\s?$", before)  # a shape: 10x10, 4 x 128
                        or (unit.strip() in ("x", "×") and re.match(r"\s?\d", after))
                        or _value(number, unit) in code or _value(number, unit) in named
                        or any(_on_page(number, unit, page) for page in pages)
                        or (elsewhere and _quoted(number, unit, sentence))):
                    continue
                as_written = re.sub(r"(\{[a-z:]+\})<([^>]*)>", r"\1`\2`", sentence)  # the role's target, as in the source
                found.append((number + unit, " ".join(as_written.split())))
    return found


TABLE_WITH_NUMBERS = re.compile(r"^\|.*\d.*\|\s*$", re.M)
PRODUCED_BY = re.compile(r"```bash|\bpython [\w/]+\.py|benchmarks/\w+\.py|\bmake [a-z-]+|\]\(")
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")


def unrecorded_tables(text: str) -> list[str]:
    """The headings of a results page's sections whose numeric tables say not what produced them or when."""
    found, heading = [], "(the page's top)"
    text = re.sub(r"```.*?```", lambda block: block.group(0).replace("\n#", "\n "), text, flags=re.S)  # comments
    for chunk in re.split(r"^(#{1,4} .*)$", text, flags=re.M):
        if re.match(r"#{1,4} ", chunk):
            heading = chunk.strip()
        elif TABLE_WITH_NUMBERS.search(chunk) and not (PRODUCED_BY.search(chunk) and DATE.search(chunk)):
            found.append(heading)
    return found


MACHINE = re.compile(r"\b(?:CPU|GPU|TPU|H200|H100|A100|T4|EPYC|Xeon|cores?)\b")
JAX_VERSION = re.compile(r"\bJAX\b[^|\n]{0,40}?\b0\.\d+(?:\.\d+)?|\bjax \d\.\d+", re.IGNORECASE)
TABLE = re.compile(r"(?:^\|.*\|[ \t]*\n)+", re.M)


def tables_without_machine(text: str) -> list[str]:
    """The first row of each results table with numbers whose own lead-in (the text between it and the
    table or heading before it) or header does not name its machine, its JAX version and a date."""
    found = []
    text = re.sub(r"```.*?```", lambda block: " " * len(block.group(0)), text, flags=re.S)
    start = 0
    for match in TABLE.finditer(text):
        table = match.group(0)
        lead_in = re.split(r"^#{1,4} .*$", text[start:match.start()], flags=re.M)[-1]
        start = match.end()
        if not TABLE_WITH_NUMBERS.search("\n".join(table.splitlines()[2:])):
            continue
        header = table.splitlines()[0]
        if all(column in header.lower() for column in ("machine", "jax", "date")):
            continue  # said in each row
        said = lead_in + " " + header
        if not (MACHINE.search(said) and JAX_VERSION.search(said) and DATE.search(said)):
            found.append(header.strip()[:80])
    return found


def problems(root: pathlib.Path = ROOT) -> list[str]:
    found = []
    for path in sorted((root / "notebooks").glob("*.ipynb")):
        for number, sentence in lesson_numbers(json.loads(path.read_text()), path.stem):
            found.append(f"{path.name}: {number!r} is not printed by a cell, set by the code, cited or linked: {sentence}")
    for path in sorted((root / "docs" / "results").glob("*.md")):
        for heading in unrecorded_tables(path.read_text()):
            found.append(f"{path.relative_to(root)}: the table under {heading!r} says not what produced it and when "
                         "(a command or link, and a date)")
        for header in tables_without_machine(path.read_text()):
            found.append(f"{path.relative_to(root)}: the table {header!r} does not say, just above it, on which machine, "
                         "with which JAX and on which date it was measured")
    return found


if __name__ == "__main__":
    found = problems()
    print("\n".join(found) or "every number in the lessons' prose is backed; every results table says where it came from")
    sys.exit(1 if found else 0)
