"""How long each lesson takes on this machine, at its full (or quick) budget, and every benchmark run here.

    make bench-device                                    # every notebook at its full budget, then every benchmark
    python benchmarks/lesson_times.py                    # every notebook at its full budget
    python benchmarks/lesson_times.py --budget quick     # at the quick budgets, as CI runs them
    python benchmarks/lesson_times.py --notebooks 03_jit_scan_vmap 07_masked_ppo
    python benchmarks/lesson_times.py --only-benchmarks  # every benchmark, no notebook
    python benchmarks/lesson_times.py --render           # rewrite the tables from the records, run nothing

Each notebook runs alone, one after another, as a learner runs it: copied into a temporary folder
and executed start to end under nbval (``pytest --nbval-lax``) in a fresh kernel, with
``LABCORE_QUICK`` set for the budget; the time is the wall time of that command, kernel start
included. The device is the one JAX picks by default (probed in a separate process, so that this
one holds no accelerator). Every benchmark in ``BENCHMARKS`` runs with its default arguments and
writes its JSON and markdown table under ``benchmarks/results/<device>/``.

What was measured goes into ``docs/results/lesson_times.json``, one record per device (a rerun
replaces that device's entries, and keeps the rest). From the records this script writes the
per-device table of ``docs/start-here.md`` (between its ``lesson times`` markers) and the
``**Time**`` paragraph that opens every notebook, so the first accelerator it runs on fills in its
column everywhere. ``tests/test_lesson_times.py`` checks that the tables and paragraphs are what
the records say.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "docs" / "tooling"))
import executed  # noqa: E402  (the CPU model, as the site's lesson pages name it)
NOTEBOOKS = REPO_ROOT / "notebooks"
RECORDS = REPO_ROOT / "docs" / "results" / "lesson_times.json"
START_HERE = REPO_ROOT / "docs" / "start-here.md"
TABLE_START, TABLE_END = "<!-- lesson times: written by benchmarks/lesson_times.py -->", "<!-- end of lesson times -->"
START_HERE_URL = "https://labcore-rl.github.io/labcore/start-here.html#how-long-each-lesson-takes"
CELL_TIMEOUT_S = 7200
WORDS_PER_MINUTE = 200  # reading speed for the prose estimate (technical prose, read once)
# The devices a learner meets on Colab: a column each, "not measured" until a record fills it.
EXPECTED = (("T4", "T4 GPU (Colab)"), ("TPU", "TPU (Colab)"))
BENCHMARKS = (
    "jit_speedup.py", "device_updates.py", "vmap_seeds.py", "dqn_speed.py", "ppo_speed.py", "minatar.py",
    "iqn_modes.py", "gflownet_speed.py", "compile_cache.py", "distributed_scaling.py",
)
PROBE = ("import jax, json, os; d = jax.devices()[0]; "
         "print(json.dumps({'platform': d.platform, 'device_kind': d.device_kind, 'device_count': jax.device_count(), "
         "'jax': jax.__version__, 'cpu_count': os.cpu_count()}))")


def probe_device(python: str = sys.executable) -> dict:
    """The default JAX device of a fresh process: {'label', 'platform', 'device_kind', ...}."""
    found = json.loads(subprocess.run([python, "-c", PROBE], capture_output=True, text=True, check=True,
                                      timeout=300).stdout.strip().splitlines()[-1])
    if found["platform"] == "cpu":
        found["label"] = f"{found['cpu_count']}-core CPU"
    else:
        found["label"] = f"{found['device_kind']} ({found['platform'].upper()})"
    accelerator = ("no accelerator" if found["platform"] == "cpu"
                   else f"{found['device_count']} x {found['device_kind']}")
    found["machine"] = (f"{executed.cpu_model()} ({platform.machine()}), {found['cpu_count']} CPU cores, {accelerator}; "
                        f"Python {platform.python_version()}, JAX {found['jax']}")
    return found


def _commit(path: pathlib.Path | None = None) -> str | None:
    """The checked-out commit; "<commit>+changes" when `path` differs from that commit's copy of it."""
    result = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True)
    commit = result.stdout.strip() or None
    if commit and path is not None:
        changed = subprocess.run(["git", "-C", str(REPO_ROOT), "diff", "--quiet", "HEAD", "--", str(path)])
        if changed.returncode == 1:
            commit += "+changes"
    return commit


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")


def time_notebook(name: str, budget: str, python: str = sys.executable) -> dict:
    """Run notebooks/`name`.ipynb start to end under nbval at `budget` in a temporary folder; its facts."""
    env = dict(os.environ, LABCORE_QUICK="1" if budget == "quick" else "0")
    with tempfile.TemporaryDirectory(prefix="labcore-times-") as folder:
        shutil.copy(NOTEBOOKS / f"{name}.ipynb", folder)
        started = time.monotonic()
        result = subprocess.run([python, "-m", "pytest", f"{name}.ipynb", "--nbval-lax", "--nbval-current-env",
                                 f"--nbval-cell-timeout={CELL_TIMEOUT_S}", "-p", "no:cacheprovider", "-q"],
                                cwd=folder, env=env, capture_output=True, text=True)
        seconds = time.monotonic() - started
    facts = {"seconds": round(seconds, 1), "ok": result.returncode == 0, "date": _now(),
             "commit": _commit(NOTEBOOKS / f"{name}.ipynb")}
    if result.returncode != 0:
        failed = [line for line in result.stdout.splitlines() if line.startswith("FAILED")]
        facts["error"] = failed[0] if failed else result.stdout.strip().splitlines()[-1:]
    return facts


def run_benchmark(script: str, out_dir: pathlib.Path, python: str = sys.executable) -> dict:
    started = time.monotonic()
    result = subprocess.run([python, str(REPO_ROOT / "benchmarks" / script), "--out", str(out_dir)], cwd=REPO_ROOT,
                            capture_output=True, text=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{pathlib.Path(script).stem}.md").write_text(result.stdout)  # its markdown table, as printed
    facts = {"seconds": round(time.monotonic() - started, 1), "ok": result.returncode == 0, "date": _now(),
             "commit": _commit(), "results": str(out_dir.relative_to(REPO_ROOT))}
    if result.returncode != 0:
        facts["error"] = (result.stderr.strip().splitlines() or ["no output"])[-1]
    return facts


def load_records(path: pathlib.Path = RECORDS) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


def save_records(records: dict, path: pathlib.Path = RECORDS) -> None:
    path.write_text(json.dumps(records, indent=1, sort_keys=True) + "\n")


def lesson_names() -> list[str]:
    return sorted(path.stem for path in NOTEBOOKS.glob("*.ipynb"))


def duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _cell(entry: dict | None) -> str:
    if entry is None:
        return "not measured"
    return duration(entry["seconds"]) if entry["ok"] else f"failed after {duration(entry['seconds'])}"


def prose_words(name: str) -> int:
    notebook = json.loads((NOTEBOOKS / f"{name}.ipynb").read_text())
    text = "\n".join("".join(cell["source"]) for cell in notebook["cells"] if cell["cell_type"] == "markdown")
    text = re.sub(r"```.*?```", " ", text, flags=re.DOTALL)  # pseudocode and code listings: not prose
    text = re.sub(r"\*\*Time\*\*.*?(\n\n|$)", " ", text, count=1, flags=re.DOTALL)  # what this script writes
    return len(re.findall(r"[A-Za-z0-9_']+", text))


def article(label: str) -> str:
    """ "a" or "an" before a device's label, by how it is said: an NVIDIA H100, an A100, an 8-core CPU, a T4, a TPU."""
    first, second = label[:1], label[1:2]
    if first.isupper() and (second.isupper() or second.isdigit()):  # said letter by letter: NVIDIA, A100, T4
        return "an" if first in "AEFHILMNORSX" else "a"
    return "an" if first.lower() in "aeiou" or first == "8" else "a"  # said as a word or a number


def title(name: str) -> str:
    """The notebook's title without its number: '# 04 · Many devices in one process: ...' -> 'Many devices in one process'."""
    notebook = json.loads((NOTEBOOKS / f"{name}.ipynb").read_text())
    heading = notebook["cells"][0]["source"][0].strip().lstrip("#").strip()
    return heading.split("·", 1)[-1].split(":", 1)[0].strip()


def reference(records: dict) -> tuple[str, dict] | None:
    """The CPU record the notebooks quote (the first CPU device in label order), if any."""
    cpus = sorted(label for label, record in records.items() if record["device"]["platform"] == "cpu")
    return (cpus[0], records[cpus[0]]) if cpus else None


def _columns(records: dict) -> list[tuple[str, str, str | None]]:
    """(header, budget, record label or None) for each column of the table."""
    columns = []
    ordered = sorted(records, key=lambda label: (records[label]["device"]["platform"] != "cpu", label))
    for label in ordered:
        for budget in ("full", "quick"):
            if records[label].get(budget):
                columns.append((f"{budget} budget, {label}", budget, label))
    for key, header in EXPECTED:
        if not any(key in label for label in records):
            columns.append((f"full budget, {header}", "full", None))
    return columns


def table(records: dict) -> str:
    """The markdown of the lesson-times section's table and its notes."""
    columns = _columns(records)
    lines = ["| # | lesson (its page with outputs) | reading (prose words) | "
             + " | ".join(header for header, _, _ in columns) + " |", "|---|---|---|" + "---|" * len(columns)]
    for name in lesson_names():
        words = prose_words(name)
        cells = [_cell(records[label].get(budget, {}).get(name)) if label else "not measured"
                 for _, budget, label in columns]
        lines.append(f"| {name[:2]} | {{doc}}`{title(name)} <lessons/{name}>` | "
                     f"about {round(words / WORDS_PER_MINUTE)} min ({words:,}) | " + " | ".join(cells) + " |")
    notes = ["", "Run times are whole-notebook wall times under nbval {cite:p}`laslett2014nbval` (kernel start "
             "included), one notebook after another with no other notebook or training run beside it, measured by "
             "`python benchmarks/lesson_times.py` (`make bench-device` also runs every benchmark). Reading time "
             f"counts the prose at {WORDS_PER_MINUTE} words a minute (fenced code and pseudocode not counted); the "
             "exercises and the quiz come on top.", ""]
    for label in sorted(records):
        record = records[label]
        dates = sorted({entry["date"] for budget in ("full", "quick") for entry in record.get(budget, {}).values()})
        span = dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}" if dates else "no runs yet"
        notes.append(f"- **{label}**: {record['device']['machine']}; measured {span}.")
    missing = [header for key, header in EXPECTED if not any(key in label for label in records)]
    if missing:
        notes.append(f"- Not measured yet on: {', '.join(missing)}. `make bench-device` on such a runtime fills "
                     "in its column.")
    return "\n".join(lines + notes)


def time_paragraph(name: str, records: dict) -> str:
    """The **Time** paragraph that ends the first cell of notebooks/`name`."""
    words = prose_words(name)
    parts = [f"**Time**: about {round(words / WORDS_PER_MINUTE)} min of reading ({words:,} words of prose), plus "
             "the runs:"]
    found = reference(records)
    if found is None:
        parts.append("not measured yet.")
    else:
        label, record = found
        full, quick = record.get("full", {}).get(name), record.get("quick", {}).get(name)
        measured = (f"{_cell(full)} at the full budgets" if full else "not yet measured at the full budgets")
        if quick:
            measured += f", {_cell(quick)} at the quick budgets (`LABCORE_QUICK=1`, as CI runs it)"
        parts.append(f"{measured} on {article(label)} {label} (measured one notebook at a time; {record['device']['machine']}).")
    others = [(label, record["full"][name]) for label, record in sorted(records.items())
              if record["device"]["platform"] != "cpu" and name in record.get("full", {})]
    parts.extend(f"On {article(label)} {label}: {_cell(entry)} at the full budgets." for label, entry in others)
    missing = [header for key, header in EXPECTED if not any(key in label for label, _ in others)]
    if missing:
        parts.append(f"Not measured on a {' or a '.join(header.split(' (')[0] for header in missing)} yet.")
    parts.append(f"Every measured time: [Start here]({START_HERE_URL}).")
    return " ".join(parts)


def render(records: dict, write: bool = True) -> list[str]:
    """Rewrite start-here's table and every notebook's Time paragraph; return what changed (or would)."""
    changed = []
    page = START_HERE.read_text()
    start, end = page.index(TABLE_START) + len(TABLE_START), page.index(TABLE_END)
    new_page = page[:start] + "\n" + table(records) + "\n" + page[end:]
    if new_page != page:
        changed.append(str(START_HERE.relative_to(REPO_ROOT)))
        if write:
            START_HERE.write_text(new_page)
    for name in lesson_names():
        path = NOTEBOOKS / f"{name}.ipynb"
        notebook = json.loads(path.read_text())
        first = "".join(notebook["cells"][0]["source"])
        at = first.find("**Time**")
        if at < 0:
            raise ValueError(f"{path.name}: the first cell has no **Time** paragraph to rewrite")
        end = first.find("\n\n", at)
        text = first[:at] + time_paragraph(name, records) + ("" if end < 0 else first[end:])
        if text != first:
            changed.append(str(path.relative_to(REPO_ROOT)))
            if write:
                notebook["cells"][0]["source"] = text.splitlines(True)
                path.write_text(json.dumps(notebook, indent=1, ensure_ascii=False) + "\n")
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget", choices=("full", "quick"), default="full")
    parser.add_argument("--notebooks", nargs="*", help="notebook names without .ipynb (default: every notebook)")
    parser.add_argument("--benchmarks", action="store_true", help="also run every benchmark, after the notebooks")
    parser.add_argument("--only-benchmarks", action="store_true", help="run every benchmark, no notebook")
    parser.add_argument("--render", action="store_true", help="only rewrite the tables from the records")
    parser.add_argument("--check", action="store_true", help="exit 1 if the tables disagree with the records")
    args = parser.parse_args(argv)
    records = load_records()
    if args.check:
        stale = render(records, write=False)
        print("\n".join(f"out of step with {RECORDS.name}: {path}" for path in stale))
        return 1 if stale else 0
    if not args.render:
        device = probe_device()
        record = records.setdefault(device["label"], {"device": device})
        record["device"] = device
        print(f"device: {device['label']} ({device['machine']})", flush=True)
        for name in [] if args.only_benchmarks else (args.notebooks or lesson_names()):
            print(f"{name} at the {args.budget} budget ...", flush=True)
            facts = time_notebook(name, args.budget)
            record.setdefault(args.budget, {})[name] = facts
            save_records(records)  # after each notebook: a long run stopped halfway keeps what it measured
            print(f"  {_cell(facts)}" + (f" ({facts['error']})" if not facts["ok"] else ""), flush=True)
        if args.benchmarks or args.only_benchmarks:
            slug = re.sub(r"[^a-z0-9]+", "-", device["label"].lower()).strip("-")
            for script in BENCHMARKS:
                print(f"benchmark {script} ...", flush=True)
                record.setdefault("benchmarks", {})[script] = run_benchmark(
                    script, REPO_ROOT / "benchmarks" / "results" / slug)
                save_records(records)
    for path in render(records):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
