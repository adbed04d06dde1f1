"""How long each lesson takes on this machine, at its full (or quick) budget, and every benchmark run here.

    make bench-device                                    # every notebook at its full budget, then every benchmark
    make bench-device BUDGET=540                         # only what fits in 540 s; the same command again goes on
    make bench-device PART=2/3                           # the second of three parts of about the same length
    python benchmarks/lesson_times.py                    # every notebook at its full budget
    python benchmarks/lesson_times.py --budget quick     # at the quick budgets (LABCORE_QUICK=1)
    python benchmarks/lesson_times.py --notebooks 03_jit_scan_vmap 07_masked_ppo
    python benchmarks/lesson_times.py --only-benchmarks  # every benchmark, no notebook
    python benchmarks/lesson_times.py --budget-s 540     # start nothing that would not finish within 540 s
    python benchmarks/lesson_times.py --again            # also what this device has recorded at this commit
    python benchmarks/lesson_times.py --render           # rewrite the tables from the records, run nothing

Each item (a notebook or a benchmark) runs alone, one after another. A notebook runs as a learner
runs it: copied into a temporary folder and executed start to end under nbval (``pytest
--nbval-lax``) in a fresh kernel, with ``LABCORE_QUICK`` set for the budget; its time is the wall
time of that command, kernel start included. The device is the one JAX picks by default (probed in
a separate process, so that this one holds no accelerator). Every benchmark in ``BENCHMARKS`` runs
with its default arguments and writes its JSON and markdown table under
``benchmarks/results/<device>/``.

Start-up, compile and run. The kernel starts with an IPython start-up file (``KERNEL_TIMING``,
placed in a temporary ``IPYTHONDIR``) that notes when the kernel started, how long ``import jax``
and the initialisation of JAX's backends took, and how long JAX spent compiling: the wall time
covered by its tracing, lowering and XLA compile events (``jax.monitoring``; reading a compiled
program from the persistent compilation cache counts as compiling), overlaps counted once. Beside
``seconds`` a notebook's record keeps ``startup_s`` (from launching pytest to the kernel's start,
plus importing jax and initialising its backends), ``compile_s`` and ``run_s`` (the rest: the
lesson's own work, and shutting the kernel down), and ``compiles`` (XLA compilations). Processes a
notebook starts itself (lesson 05's) are not counted in ``compile_s``. A JAX without those events
leaves the split out, and a record without it is shown without it.

Slices. ``--budget-s S`` bounds the whole call to S seconds. Before each item the script estimates
its time and starts it only if it would finish within what is left; one that would not waits, and
a shorter one after it may go first. The estimate is 1.1 times this device's last time for the item
(a finished run, or how long a run stopped at the budget had gone); else 1.1 times the reference
CPU's time (the first other CPU in the records), plus 30 s on an accelerator for its start-up and
compiles; else a guess, 10 min for a notebook and 5 min for a benchmark. Each item also runs with a
timeout of what is left, so a slice never overruns: an item stopped so is recorded as "stopped at
the budget after N s" (with no split), not as a failure, and 1.1 N becomes its estimate. When
nothing left fits, the call prints what is left and the command that continues, and exits 0. A call skips every item this
device has recorded at the current commit (a notebook's commit gains "+changes" when the notebook
differs from it, its **Time** paragraph apart), so the same command again goes on where the last
stopped; ``--again`` runs them anyway. ``--part K/N`` runs the K-th of N parts of the item list,
split by expected time (the estimates from the records of the checked-out commit, so that every
call splits alike). ``--try-long`` also gives what is left to an item that this device has never
run and whose estimate does not fit (an estimate from the CPU can be far off on an accelerator).

What was measured goes into ``docs/results/lesson_times.json``, one record per device (a rerun
replaces that device's entries, and keeps the rest), saved after every item. From the records this
script writes the per-device table of ``docs/start-here.md`` (between its ``lesson times`` markers)
and the ``**Time**`` paragraph that opens every notebook, so the first accelerator it runs on fills
in its column everywhere. ``--records PATH`` measures into another file (a trial run); the tables
are written from ``docs/results/lesson_times.json`` only. ``tests/test_lesson_times.py`` checks
that the tables and paragraphs are what the records say.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import pathlib
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Callable

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "docs" / "tooling"))
import executed  # noqa: E402  (the CPU model, as the site's lesson pages name it)
NOTEBOOKS = REPO_ROOT / "notebooks"
RECORDS = REPO_ROOT / "docs" / "results" / "lesson_times.json"
START_HERE = REPO_ROOT / "docs" / "start-here.md"
TABLE_START, TABLE_END = "<!-- lesson times: written by benchmarks/lesson_times.py -->", "<!-- end of lesson times -->"
SITE_URL = "https://labcore-rl.github.io/labcore"
START_HERE_URL = f"{SITE_URL}/start-here.html#how-long-each-lesson-takes"
CELL_TIMEOUT_S = 7200
WORDS_PER_MINUTE = 200  # reading speed for the prose estimate (technical prose, read once)
# The devices a learner meets on Colab: a column each, "not measured" until a record fills it.
EXPECTED = (("T4", "T4 GPU (Colab)"), ("TPU", "TPU (Colab)"))
BENCHMARKS = (
    "jit_speedup.py", "device_updates.py", "vmap_seeds.py", "dqn_speed.py", "ppo_speed.py", "minatar.py",
    "iqn_modes.py", "gflownet_speed.py", "compile_cache.py", "distributed_scaling.py", "try_it.py",
)
PROBE = ("import jax, json, os; d = jax.devices()[0]; "
         "print(json.dumps({'platform': d.platform, 'device_kind': d.device_kind, 'device_count': jax.device_count(), "
         "'jax': jax.__version__, 'cpu_count': os.cpu_count()}))")
# Estimates before an item starts (see the module's docstring): timing noise on top of a recorded time,
# an accelerator's start-up and compiles on top of a CPU's time, and a guess where nothing is recorded.
ESTIMATE_MARGIN = 1.1
ACCELERATOR_STARTUP_S = 30.0
GUESS_S = {"notebook": 600.0, "benchmark": 300.0}
FINISH_RESERVE_S = 5.0  # kept back from every timeout: stopping an item, saving, rewriting the tables
TRY_LONG_MIN_S = 60.0  # --try-long gives an item what is left only if at least this much is

# The IPython start-up file every timed kernel runs (written into a temporary IPYTHONDIR). It imports
# nothing into the notebook's namespace and does not import jax itself (a notebook may set jax's
# environment variables first): it waits for the notebook's own `import jax`, then listens to JAX's
# compile events, and writes what it saw after every cell and at exit, so a kernel stopped at the
# budget still leaves its numbers.
KERNEL_TIMING = r'''
def _labcore_kernel_timing():
    import atexit, importlib.util, json, os, sys, threading, time

    out = os.environ.get("LABCORE_TIMING_OUT")
    if not out:
        return
    path = os.path.join(out, f"kernel-{os.getpid()}.json")
    compile_events = {"/jax/core/compile/jaxpr_trace_duration", "/jax/core/compile/jaxpr_to_mlir_module_duration",
                      "/jax/core/compile/backend_compile_duration"}
    facts = {"kernel_started": time.time(), "jax_import_s": None, "backend_init_s": None, "compile_s": None,
             "compiles": 0}
    compile_spans, init_spans, import_spans, listening, lock = [], [], [], [], threading.Lock()

    def covered(spans):
        total, end = 0.0, float("-inf")
        for start, stop in sorted(spans):
            if stop > end:
                total += stop - max(start, end)
                end = stop
        return total

    def write(*_):
        with lock:  # start-up: importing jax, and initialising its backends (the first call of backends())
            startup = list(init_spans) + import_spans
            if import_spans:
                facts["backend_init_s"] = covered(startup) - covered(import_spans)
            if listening:  # compile time that is not start-up
                facts["compile_s"] = covered(compile_spans + startup) - covered(startup)
            try:
                with open(path + ".tmp", "w") as file:
                    json.dump(facts, file)
                os.replace(path + ".tmp", path)
            except OSError:
                pass

    def on_duration(event, duration, *_, **__):
        if event in compile_events:
            now = time.time()
            compile_spans.append((now - float(duration), now))
            if event.endswith("backend_compile_duration"):
                facts["compiles"] += 1

    def after_jax_import(began):
        import_spans.append((began, time.time()))
        facts["jax_import_s"] = import_spans[0][1] - began
        try:
            import jax.monitoring
            jax.monitoring.register_event_duration_secs_listener(on_duration)
            listening.append(True)
        except Exception:
            pass
        try:  # backends() finds JAX's plugins (CUDA's, say) and starts every backend the first time it runs
            from jax._src import xla_bridge
            backends = xla_bridge.backends

            def timed_backends(*args, **kwargs):
                if getattr(xla_bridge, "_backends", True):
                    return backends(*args, **kwargs)
                start = time.time()
                try:
                    return backends(*args, **kwargs)
                finally:
                    init_spans.append((start, time.time()))

            xla_bridge.backends = timed_backends
        except Exception:
            pass

    class AfterJaxImport:
        def find_spec(self, name, path=None, target=None):
            if name != "jax":
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(name)
            loader = getattr(spec, "loader", None)
            if loader is not None and hasattr(loader, "exec_module"):
                exec_module = loader.exec_module

                def timed_exec_module(module):
                    began = time.time()
                    exec_module(module)
                    after_jax_import(began)

                loader.exec_module = timed_exec_module
            return spec

    if "jax" in sys.modules:
        after_jax_import(time.time())
    else:
        sys.meta_path.insert(0, AfterJaxImport())
    atexit.register(write)
    try:
        get_ipython().events.register("post_run_cell", write)
    except Exception:
        pass
    write()


_labcore_kernel_timing()
del _labcore_kernel_timing
'''


@dataclasses.dataclass(frozen=True)
class Item:
    """One thing to time: a notebook (`name` without .ipynb) or a benchmark script (`name` with .py)."""
    kind: str
    name: str

    def section(self, budget: str) -> str:
        """Where a device's record keeps it: under the budget for a notebook, under "benchmarks" for a script."""
        return budget if self.kind == "notebook" else "benchmarks"

    def __str__(self) -> str:
        return self.name if self.kind == "notebook" else f"benchmark {self.name}"


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


def _without_time_paragraph(text: str) -> str | None:
    """A notebook's JSON with its first cell's **Time** paragraph taken out, normalised; None if it is not one."""
    try:
        notebook = json.loads(text)
        cell = notebook["cells"][0]
        source = "".join(cell["source"])
    except (ValueError, KeyError, IndexError, TypeError):
        return None
    at = source.find("**Time**")
    if at >= 0:
        end = source.find("\n\n", at)
        source = source[:at] + ("" if end < 0 else source[end:])
    cell["source"] = source
    return json.dumps(notebook, sort_keys=True)


def _commit(path: pathlib.Path | None = None) -> str | None:
    """The checked-out commit; "<commit>+changes" when `path` differs from that commit's copy of it.

    A notebook whose only difference is its **Time** paragraph (which this script rewrites) has not changed.
    """
    result = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True)
    commit = result.stdout.strip() or None
    if commit and path is not None:
        changed = subprocess.run(["git", "-C", str(REPO_ROOT), "diff", "--quiet", "HEAD", "--", str(path)])
        if changed.returncode == 1:
            committed = subprocess.run(["git", "-C", str(REPO_ROOT), "show", f"HEAD:{path.relative_to(REPO_ROOT)}"],
                                       capture_output=True, text=True)
            before = _without_time_paragraph(committed.stdout) if committed.returncode == 0 else None
            if before is None or before != _without_time_paragraph(path.read_text()):
                commit += "+changes"
    return commit


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")


@dataclasses.dataclass
class Finished:
    """What a command left: its exit status (None when stopped at its timeout), output and wall time."""
    returncode: int | None
    stdout: str
    stderr: str
    seconds: float


def run_command(command: list[str], cwd: pathlib.Path, env: dict | None = None,
                timeout_s: float | None = None) -> Finished:
    """Run `command`; at `timeout_s` stop it and every process it started in its session."""
    started = time.monotonic()
    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)  # a group of its own, stopped whole at the timeout
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
        return Finished(process.returncode, stdout, stderr, time.monotonic() - started)
    except subprocess.TimeoutExpired:
        seconds = time.monotonic() - started
        _stop_group(process)
        try:
            stdout, stderr = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:  # a process that left the group still holds the pipes
            stdout, stderr = "", ""
        return Finished(None, stdout, stderr, seconds)
    except BaseException:  # Ctrl-C: the command is in its own session, so it would run on unseen
        _stop_group(process)
        raise


def _stop_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        process.kill()


def _stopped(facts: dict, timeout_s: float) -> dict:
    return dict(facts, ok=False, stopped=True, timeout_s=round(timeout_s, 1))


def split_times(kernel: dict | None, launched: float, seconds: float) -> dict:
    """startup_s, compile_s and run_s of a notebook that took `seconds`, from its kernel's timing file.

    `launched` is the wall-clock time (time.time()) at which the timed command started. Nothing when the kernel
    left no file; no compile_s (and no run_s) when its JAX had no compile events to listen to.
    """
    if not kernel or kernel.get("kernel_started") is None:
        return {}
    startup = (max(0.0, kernel["kernel_started"] - launched) + (kernel.get("jax_import_s") or 0.0)
               + (kernel.get("backend_init_s") or 0.0))
    startup = min(startup, seconds)
    split = {"startup_s": round(startup, 1)}
    if kernel.get("compile_s") is not None:
        compile_s = min(kernel["compile_s"], seconds - startup)
        split.update(compile_s=round(compile_s, 1), run_s=round(seconds - startup - compile_s, 1),
                     compiles=int(kernel.get("compiles") or 0))
    return split


def _stop_kernels(folder: pathlib.Path) -> None:
    """Stop the kernels that wrote into `folder`, and what they started (Linux; elsewhere a kernel stops itself).

    jupyter_client starts a kernel in a session of its own, so stopping pytest's process group leaves it (and
    anything it started) running; ipykernel notices its parent has gone only within a second or so.
    """
    for path in folder.glob("kernel-*.json"):
        pid = int(path.stem.split("-")[1])
        try:  # that pid, if it still runs, is one of these kernels: its environment names this folder
            if str(folder).encode() not in pathlib.Path(f"/proc/{pid}/environ").read_bytes():
                continue
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:  # not a group of its own
                os.kill(pid, signal.SIGKILL)
        except OSError:
            continue


def _kernel_facts(folder: pathlib.Path) -> dict | None:
    """The timing file of the notebook's kernel (the first to start, should the notebook start others)."""
    found = []
    for path in folder.glob("kernel-*.json"):
        try:
            found.append(json.loads(path.read_text()))
        except ValueError:
            continue
    return min(found, key=lambda facts: facts.get("kernel_started") or float("inf")) if found else None


def time_notebook(name: str, budget: str, python: str = sys.executable, timeout_s: float | None = None,
                  run: Callable[..., Finished] = run_command) -> dict:
    """Run notebooks/`name`.ipynb start to end under nbval at `budget` in a temporary folder; its facts.

    Stopped at `timeout_s` (None: no limit), it is recorded as stopped, with how long it had run.
    """
    with tempfile.TemporaryDirectory(prefix="labcore-times-") as folder:
        folder = pathlib.Path(folder)
        shutil.copy(NOTEBOOKS / f"{name}.ipynb", folder)
        startup = folder / "ipython" / "profile_default" / "startup"
        startup.mkdir(parents=True)
        (startup / "00-labcore-timing.py").write_text(KERNEL_TIMING)
        (folder / "timing").mkdir()
        env = dict(os.environ, LABCORE_QUICK="1" if budget == "quick" else "0", IPYTHONDIR=str(folder / "ipython"),
                   LABCORE_TIMING_OUT=str(folder / "timing"))
        launched = time.time()
        result = run([python, "-m", "pytest", f"{name}.ipynb", "--nbval-lax", "--nbval-current-env",
                      f"--nbval-cell-timeout={CELL_TIMEOUT_S}", "-p", "no:cacheprovider", "-q"],
                     cwd=folder, env=env, timeout_s=timeout_s)
        if result.returncode is None:
            _stop_kernels(folder / "timing")
        kernel = _kernel_facts(folder / "timing")
    facts = {"seconds": round(result.seconds, 1), "ok": result.returncode == 0, "date": _now(),
             "commit": _commit(NOTEBOOKS / f"{name}.ipynb")}
    if result.returncode is None:  # the kernel's file tells of the cells it finished only: no split
        return _stopped(facts, timeout_s)
    facts.update(split_times(kernel, launched, result.seconds))
    if result.returncode != 0:
        failed = [line for line in result.stdout.splitlines() if line.startswith("FAILED")]
        facts["error"] = failed[0] if failed else result.stdout.strip().splitlines()[-1:]
    return facts


def run_benchmark(script: str, out_dir: pathlib.Path, python: str = sys.executable, timeout_s: float | None = None,
                  run: Callable[..., Finished] = run_command) -> dict:
    """Run benchmarks/`script` with its results in `out_dir`; its facts (stopped at `timeout_s` as a notebook is)."""
    result = run([python, str(REPO_ROOT / "benchmarks" / script), "--out", str(out_dir)], cwd=REPO_ROOT,
                 timeout_s=timeout_s)
    facts = {"seconds": round(result.seconds, 1), "ok": result.returncode == 0, "date": _now(),
             "commit": _commit(), "results": str(out_dir.relative_to(REPO_ROOT))}
    if result.returncode is None:
        return _stopped(facts, timeout_s)  # its earlier table, if any, stays
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{pathlib.Path(script).stem}.md").write_text(result.stdout)  # its markdown table, as printed
    if result.returncode != 0:
        facts["error"] = (result.stderr.strip().splitlines() or ["no output"])[-1]
    return facts


def load_records(path: pathlib.Path = RECORDS) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


def save_records(records: dict, path: pathlib.Path = RECORDS) -> None:
    path.write_text(json.dumps(records, indent=1, sort_keys=True) + "\n")


def committed_records(path: pathlib.Path = RECORDS) -> dict | None:
    """The records as the checked-out commit has them (None outside git): the same in every call at a commit."""
    try:
        result = subprocess.run(["git", "-C", str(REPO_ROOT), "show", f"HEAD:{path.relative_to(REPO_ROOT)}"],
                                capture_output=True, text=True)
        return json.loads(result.stdout) if result.returncode == 0 else None
    except (ValueError, OSError):
        return None


def lesson_names() -> list[str]:
    return sorted(path.stem for path in NOTEBOOKS.glob("*.ipynb"))


def duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _cell(entry: dict | None) -> str:
    """A record's time as the tables say it: '38 s (29 s start-up and compile)', 'failed after 2.0 min', ..."""
    if entry is None:
        return "not measured"
    if entry.get("stopped"):
        return f"stopped at the budget after {duration(entry['seconds'])}"
    if not entry["ok"]:
        return f"failed after {duration(entry['seconds'])}"
    said = duration(entry["seconds"])
    if entry.get("startup_s") is not None and entry.get("compile_s") is not None:
        said += f" ({duration(entry['startup_s'] + entry['compile_s'])} start-up and compile)"
    return said


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


def _split_notes(records: dict) -> str:
    """What the notes say of split times and of runs stopped at a budget, where the records hold any."""
    entries = [entry for record in records.values() for budget in ("full", "quick")
               for entry in record.get(budget, {}).values()]
    said = ""
    if any(entry["ok"] and entry.get("startup_s") is not None and entry.get("compile_s") is not None
           for entry in entries):
        said += (" A time with a second one in brackets was split as it ran: the bracket is the time of start-up (pytest and "
                 "the kernel starting, `import jax` and the initialisation of JAX's backend) and of compiling (JAX "
                 "tracing, lowering and compiling with XLA in the notebook's kernel, or reading a compiled program "
                 "from the persistent cache); the rest is the lesson's own work.")
    if any(entry.get("stopped") for entry in entries):
        said += (" \"Stopped at the budget\" is a run that a time-limited call (`make bench-device BUDGET=...`) "
                 "stopped: the lesson takes longer than that there, and did not fail.")
    return said


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
    machines = ["Where and when each column was measured:", ""]
    for label in sorted(records):
        record = records[label]
        dates = sorted({entry["date"] for budget in ("full", "quick") for entry in record.get(budget, {}).values()})
        span = dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}" if dates else "no runs"
        lead, elsewhere = _machines(record)
        machines.append(f"- **{label}**: {lead}; measured {span}"
                        + (f"; with the same label, {'; '.join(elsewhere)}" if elsewhere else "") + ".")
    machines.append("")
    notes = ["", "Run times are whole-notebook wall times under nbval {cite:p}`laslett2014nbval` (kernel start "
             "included), one notebook after another with no other notebook or training run beside it, measured by "
             "`python benchmarks/lesson_times.py` (`make bench-device` also runs every benchmark). Reading time "
             f"counts the prose at {WORDS_PER_MINUTE} words a minute (fenced code and pseudocode not counted); the "
             "exercises and the quiz come on top." + _split_notes(records), ""]
    missing = [header for key, header in EXPECTED if not any(key in label for label in records)]
    if missing:
        notes.append(f"- Not measured on: {', '.join(missing)}. `make bench-device` on such a runtime fills "
                     "in its column; `make bench-device BUDGET=540` measures only what fits in 9 minutes, and the "
                     "same command again goes on where it stopped.")
    return "\n".join(machines + lines + notes)


def machine_of(record: dict, entry: dict | None) -> str:
    """The machine an entry was measured on: its own; for an entry from before entries named one, the record's
    where the record's device is an accelerator (its label names it), and on a CPU only what is known: the
    record's CPU was replaced by another model under the same label, so the model is not recorded."""
    if entry is not None and entry.get("machine"):
        return entry["machine"]
    device = record["device"]
    if entry is None or device["platform"] != "cpu":
        return device["machine"]
    cores = f", {device['cpu_count']} CPU cores" if device.get("cpu_count") else ""
    jax_version = f"; JAX {device['jax']}" if device.get("jax") else ""
    return f"CPU model not recorded{cores}, no accelerator{jax_version}"


def _machines(record: dict) -> tuple[str, list[str]]:
    """The machine most of a record's entries were measured on (the record's own where none names one,
    or on a tie), and notes for the entries measured on another machine of the same label."""
    lessons_on: dict[str, dict[str, list[str]]] = {}  # machine -> lesson -> budgets
    for budget in ("full", "quick"):
        for name, entry in sorted(record.get(budget, {}).items()):
            lessons_on.setdefault(machine_of(record, entry), {}).setdefault(name[:2], []).append(budget)
    count = {machine: sum(len(budgets) for budgets in lessons.values()) for machine, lessons in lessons_on.items()}
    own = record["device"]["machine"]
    lead = max(count, key=lambda machine: (count[machine], machine == own), default=own)
    return lead, [", ".join(f"lesson {number} ({' and '.join(budgets)} budget{'s' if len(budgets) > 1 else ''})"
                            for number, budgets in sorted(lessons.items())) + f" on {machine}"
                  for machine, lessons in lessons_on.items() if machine != lead]


def time_paragraph(name: str, records: dict) -> str:
    """The **Time** paragraph that ends the first cell of notebooks/`name`."""
    words = prose_words(name)
    parts = [f"**Time**: about {round(words / WORDS_PER_MINUTE)} min of reading ({words:,} words of prose), plus "
             "the runs:"]
    found = reference(records)
    if found is None:
        parts.append("not measured.")
    else:
        label, record = found
        full, quick = record.get("full", {}).get(name), record.get("quick", {}).get(name)
        measured = (f"{_cell(full)} at the full budgets" if full else "not measured at the full budgets")
        machine = machine_of(record, full or quick)
        if quick:
            measured += f", {_cell(quick)} at the quick budgets (`LABCORE_QUICK=1`: the same code, shorter training)"
            if machine_of(record, quick) != machine:
                measured += f" ({machine_of(record, quick)})"
        parts.append(f"{measured} on {article(label)} {label} (measured one notebook at a time; {machine}).")
    others = [(label, record["full"][name]) for label, record in sorted(records.items())
              if record["device"]["platform"] != "cpu" and name in record.get("full", {})]
    parts.extend(f"On {article(label)} {label}: {_cell(entry)} at the full budgets." for label, entry in others)
    missing = [header for key, header in EXPECTED if not any(key in label for label, _ in others)]
    if missing:
        parts.append(f"Not measured on a {' or a '.join(header.split(' (')[0] for header in missing)}.")
    parts.append(f"Every measured time: [Start here]({START_HERE_URL}). Read it with its outputs (the quick budgets' "
                 f"run): [its page on the site]({SITE_URL}/lessons/{name}.html).")
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


def _reference_cpu(records: dict, label: str) -> tuple[str, dict] | None:
    """The CPU record an estimate falls back on: the first CPU in label order other than `label`."""
    cpus = sorted(other for other, record in records.items()
                  if other != label and record.get("device", {}).get("platform") == "cpu")
    return (cpus[0], records[cpus[0]]) if cpus else None


def estimate(item: Item, budget: str, records: dict, device: dict) -> tuple[float, str]:
    """Seconds `item` should take on `device` at `budget`, and where the figure comes from.

    1.1 times this device's last finished time, or how long its last run went before it was stopped at the
    budget; else 1.1 times the reference CPU's time, plus 30 s on an accelerator; else a guess.
    """
    here = records.get(device["label"], {}).get(item.section(budget), {}).get(item.name)
    if here is not None and (here["ok"] or here.get("stopped")):
        did = "was stopped after" if here.get("stopped") else "took"
        return ESTIMATE_MARGIN * here["seconds"], f"this device {did} {duration(here['seconds'])}"
    found = _reference_cpu(records, device["label"])
    entry = found[1].get(item.section(budget), {}).get(item.name) if found else None
    if entry is not None and entry["ok"]:
        seconds = ESTIMATE_MARGIN * entry["seconds"]
        if device["platform"] != "cpu":
            seconds += ACCELERATOR_STARTUP_S
        return seconds, f"from the {found[0]}'s {duration(entry['seconds'])}"
    return GUESS_S[item.kind], "a guess: no time recorded"


def is_recorded(entry: dict | None, commit: str | None) -> bool:
    """Whether a record entry is a finished run (passed or failed) at `commit`: one a resumed call skips."""
    return entry is not None and not entry.get("stopped") and commit is not None and entry.get("commit") == commit


def partition(items: list[Item], weights: dict[Item, float], parts: int) -> list[list[Item]]:
    """`items` in `parts` parts of about equal total weight, each in the list's order; the same split every time.

    The longest item first goes to the part with the least so far (ties: the earlier part, the earlier name).
    """
    chosen: list[list[Item]] = [[] for _ in range(parts)]
    totals = [0.0] * parts
    for item in sorted(items, key=lambda item: (-weights[item], item.kind, item.name)):
        part = min(range(parts), key=lambda part: (totals[part], part))
        chosen[part].append(item)
        totals[part] += weights[item]
    order = {item: at for at, item in enumerate(items)}
    return [sorted(part, key=order.__getitem__) for part in chosen]


def measure(items: list[Item], record: dict, *, budget: str, estimates: dict[Item, tuple[float, str]],
            commit_of: Callable[[Item], str | None], run_item: Callable[[Item, float | None], dict],
            save: Callable[[], None], budget_s: float | None = None, again: bool = False, try_long: bool = False,
            clock: Callable[[], float] = time.monotonic, started: float | None = None,
            say: Callable[[str], None] = print) -> list[Item]:
    """Time `items` one after another into `record` (one device's), calling `save` after each; what is left.

    Skips an item `record` holds at its current commit (unless `again`). With `budget_s`, counted from `started`,
    an item whose estimate does not fit what is left is not started, and every item runs with a timeout of what
    is left; with `try_long` too, what is left at the end goes to an item not started that this device never ran.
    Returns the items not started and those stopped at the budget, in the list's order.
    """
    started = clock() if started is None else started

    def remaining() -> float | None:
        return None if budget_s is None else budget_s - (clock() - started) - FINISH_RESERVE_S

    def run(item: Item, timeout_s: float | None) -> None:
        seconds, source = estimates[item]
        at = f" at the {budget} budget" if item.kind == "notebook" else ""
        limit = "" if timeout_s is None else f", at most {duration(timeout_s)}"
        say(f"{item}{at} (about {duration(seconds)}, {source}{limit}) ...")
        facts = run_item(item, timeout_s)
        record.setdefault(item.section(budget), {})[item.name] = facts
        save()  # after each item: a call stopped halfway keeps what it measured
        said = _cell(facts)
        if facts.get("startup_s") is not None and facts.get("run_s") is not None:
            said += (f": start-up {facts['startup_s']:.1f} s, compile {facts['compile_s']:.1f} s "
                     f"({facts['compiles']} compilations), run {facts['run_s']:.1f} s")
        say(f"  {said}" + (f" ({facts['error']})" if facts.get("error") else ""))
        if facts.get("stopped"):
            stopped.append(item)

    waiting, stopped = [], []
    for item in items:
        entry = record.get(item.section(budget), {}).get(item.name)
        if not again and is_recorded(entry, commit_of(item)):
            say(f"{item}: recorded here at {entry['commit']}, {_cell(entry)}; skipped")
            continue
        left = remaining()
        if left is not None and estimates[item][0] > left:
            waiting.append(item)
            say(f"{item}: about {duration(estimates[item][0])} ({estimates[item][1]}), "
                f"{duration(max(left, 0.0))} left: not started")
            continue
        run(item, left)
    if try_long and budget_s is not None:
        for item in list(waiting):
            left = remaining()
            if record.get(item.section(budget), {}).get(item.name) is None and left >= TRY_LONG_MIN_S:
                say(f"{item}: longer than the {duration(left)} left by its estimate; started anyway (--try-long)")
                waiting.remove(item)
                run(item, left)
    return [item for item in items if item in waiting or item in stopped]


def _part(text: str) -> tuple[int, int]:
    match = re.fullmatch(r"(\d+)/(\d+)", text.strip())
    if not match or not 1 <= int(match[1]) <= int(match[2]):
        raise argparse.ArgumentTypeError(f"expected K/N with 1 <= K <= N, as 2/3; got {text!r}")
    return int(match[1]), int(match[2])


def _continue_command(argv: list[str]) -> str:
    """The command that goes on where this call stopped: this one, without --again."""
    return shlex.join(["python", "benchmarks/lesson_times.py", *(arg for arg in argv if arg != "--again")])


def _say_what_is_left(left: list[Item], estimates: dict[Item, tuple[float, str]], record: dict,
                      args: argparse.Namespace, argv: list[str], say: Callable[[str], None]) -> None:
    """The end of a call stopped at its budget: what is left, by how much, and the command that goes on."""
    whole = args.budget_s - FINISH_RESERVE_S
    say(f"stopped at the budget of {args.budget_s:.0f} s with {len(left)} left, about "
        f"{duration(sum(estimates[item][0] for item in left))} by their estimates:")
    for item in left:
        seconds, source = estimates[item]
        too_long = "; more than a whole budget" if seconds > whole else ""
        say(f"  {item}: about {duration(seconds)} ({source}){too_long}")
    if any(estimates[item][0] <= whole for item in left):
        say(f"the same command again goes on (it skips what this device has recorded at this commit):\n"
            f"  {_continue_command(argv)}")
    longer = [item for item in left if estimates[item][0] > whole]
    if longer:
        never_run = [item for item in longer if record.get(item.section(args.budget), {}).get(item.name) is None]
        say("an item longer than a whole budget runs with a larger budget (--budget-s; BUDGET= for make)"
            + (" or, if this device has never run it, with --try-long, which gives it what is left once "
               "nothing else fits" if never_run and not args.try_long else ""))


def main(argv: list[str] | None = None, *, probe: Callable[[], dict] = probe_device,
         run_item: Callable[[Item, float | None], dict] | None = None, clock: Callable[[], float] = time.monotonic,
         say: Callable[[str], None] = print) -> int:
    started = clock()
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget", choices=("full", "quick"), default="full")
    parser.add_argument("--notebooks", nargs="*", help="notebook names without .ipynb (default: every notebook)")
    parser.add_argument("--benchmarks", action="store_true", help="also run every benchmark, after the notebooks")
    parser.add_argument("--only-benchmarks", action="store_true", help="run every benchmark, no notebook")
    parser.add_argument("--render", action="store_true", help="only rewrite the tables from the records")
    parser.add_argument("--check", action="store_true", help="exit 1 if the tables disagree with the records")
    parser.add_argument("--budget-s", type=float, metavar="SECONDS",
                        help="this call's time: start nothing that would not finish within it, and stop at it")
    parser.add_argument("--again", action="store_true",
                        help="also run what this device has recorded at the current commit (skipped by default)")
    parser.add_argument("--part", type=_part, metavar="K/N",
                        help="only the K-th of N parts of the items, split by expected time")
    parser.add_argument("--try-long", action="store_true",
                        help="with --budget-s: give what is left at the end to an item never run on this device "
                             "whose estimate does not fit")
    parser.add_argument("--records", type=pathlib.Path, default=RECORDS,
                        help=f"the records to read and add to (default {RECORDS.relative_to(REPO_ROOT)}); the "
                             "tables are rewritten only from the default")
    args = parser.parse_args(argv)
    records = load_records(args.records)
    tables = args.records.resolve() == RECORDS.resolve()
    if args.check:
        stale = render(records, write=False)
        say("\n".join(f"out of step with {args.records.name}: {path}" for path in stale))
        return 1 if stale else 0
    if not args.render:
        device = probe()
        record = records.get(device["label"], {"device": device})
        say(f"device: {device['label']} ({device['machine']})")
        names = [] if args.only_benchmarks else (args.notebooks or lesson_names())
        items = [Item("notebook", name) for name in names]
        if args.benchmarks or args.only_benchmarks:
            items += [Item("benchmark", script) for script in BENCHMARKS]
        if args.part:
            part, parts = args.part
            stable = committed_records() or records  # the same in every call at this commit, whatever ran since
            weights = {item: estimate(item, args.budget, stable, device)[0] for item in items}
            items = partition(items, weights, parts)[part - 1]
            say(f"part {part} of {parts}: {', '.join(map(str, items)) or 'nothing'} "
                f"(about {duration(sum(weights[item] for item in items))})")
        estimates = {item: estimate(item, args.budget, records, device) for item in items}
        slug = re.sub(r"[^a-z0-9]+", "-", device["label"].lower()).strip("-")

        def run_for_real(item: Item, timeout_s: float | None) -> dict:
            if item.kind == "notebook":
                facts = time_notebook(item.name, args.budget, timeout_s=timeout_s)
            else:
                facts = run_benchmark(item.name, REPO_ROOT / "benchmarks" / "results" / slug, timeout_s=timeout_s)
            return dict(facts, machine=device["machine"])  # a label can cover several machines (two 2-core CPUs)

        def save() -> None:
            # the record's machine stays the one its earlier entries were measured on; each new entry names its own
            record.setdefault("device", device)
            records[device["label"]] = record
            save_records(records, args.records)

        def commit_of(item: Item) -> str | None:
            return _commit(NOTEBOOKS / f"{item.name}.ipynb") if item.kind == "notebook" else _commit()

        left = measure(items, record, budget=args.budget, estimates=estimates, commit_of=commit_of,
                          run_item=run_item or run_for_real, save=save, budget_s=args.budget_s, again=args.again,
                          try_long=args.try_long, clock=clock, started=started, say=say)
        if left:
            _say_what_is_left(left, {item: estimate(item, args.budget, records, device) for item in left},
                              record, args, argv, say)
        elif items:
            say(f"done: every item of this call is recorded for the {device['label']}")
    if tables:
        for path in render(records):
            say(f"wrote {path}")
    elif not args.check:
        say(f"tables not rewritten: they are written from {RECORDS.relative_to(REPO_ROOT)}, and these records "
            f"are {args.records}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
