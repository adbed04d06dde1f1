"""Does JAX's persistent compilation cache shorten a second run? Off, cold and warm, side by side.

Each workload runs three times in a fresh process, one after another:
  off   LABCORE_COMPILATION_CACHE=0: every program is compiled, nothing is written;
  cold  the cache on, in an empty folder: every program is compiled and written;
  warm  the same folder again: programs are read from it instead of compiled.
Workloads are notebooks (run under nbval, as `make test` runs them; quick mode unless --full) and
`python -m labcore` commands. The warm/off ratio is the saving a learner sees when they run a
notebook or a command a second time (a new kernel, the next day).

    python benchmarks/compile_cache.py
    python benchmarks/compile_cache.py --notebooks 03_jit_scan_vmap 07_masked_ppo --out /tmp/bench

Writes {out}/compile_cache.json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import subprocess
import sys
import tempfile
import time

from labcore import compile_cache
from labcore.tools.benchmarking import write_results

REPO = pathlib.Path(__file__).resolve().parents[1]
COMMANDS = {
    "train ppo (65,536 steps)": ["train", "ppo", "--total-steps", "65536", "--no-progress"],
    "train dqn-host (20,000 steps)": ["train", "dqn-host", "--total-steps", "20000"],
}


def _timed(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return seconds


def _folder_mib(folder: pathlib.Path) -> float:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file()) / 2**20


def measure(name: str, argv: list[str], base_env: dict[str, str]) -> dict:
    """One workload: seconds with the cache off, cold and warm, and the cache's size after."""
    with tempfile.TemporaryDirectory(prefix="labcore-cache-bench-") as folder:
        off = _timed(argv, {**base_env, compile_cache.SWITCH_ENV_VAR: "0"})
        on = {**base_env, compile_cache.SWITCH_ENV_VAR: folder}
        cold = _timed(argv, on)
        warm = _timed(argv, on)
        size = _folder_mib(pathlib.Path(folder))
    row = {"workload": name, "off (s)": off, "cold (s)": cold, "warm (s)": warm,
           "warm / off": warm / off, "cache (MiB)": size}
    print(f"{name}: off {off:.1f} s, cold {cold:.1f} s, warm {warm:.1f} s", flush=True)
    return row


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--notebooks", nargs="*", default=["03_jit_scan_vmap"],
                        help="notebook names without .ipynb (default: 03_jit_scan_vmap)")
    parser.add_argument("--commands", nargs="*", default=list(COMMANDS), choices=list(COMMANDS))
    parser.add_argument("--full", action="store_true", help="full training budgets in the notebooks (default: quick)")
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args(argv)

    # What this process's own import of labcore set up must not leak into the measured processes.
    base_env = {key: value for key, value in os.environ.items()
                if key not in (compile_cache.SWITCH_ENV_VAR, compile_cache.JAX_DIR_ENV_VAR, compile_cache.JAX_MIN_TIME_ENV_VAR,
                               compile_cache.INHERITED_ENV_VAR, "JAX_ENABLE_COMPILATION_CACHE")}
    base_env["LABCORE_QUICK"] = "0" if args.full else "1"
    rows = []
    for notebook in args.notebooks:
        path = REPO / "notebooks" / f"{notebook}.ipynb"
        pytest = [sys.executable, "-m", "pytest", str(path), "--nbval-lax", "--nbval-current-env", "-q",
                  "-p", "no:cacheprovider"]
        rows.append(measure(f"notebook {notebook} ({'full' if args.full else 'quick'})", pytest, base_env))
    for name in args.commands:
        rows.append(measure(f"python -m labcore {name}", [sys.executable, "-m", "labcore", *COMMANDS[name]], base_env))
    write_results("compile_cache", rows, out_dir=args.out,
                  extra={"quick": not args.full, "min_compile_time_secs": 0})


if __name__ == "__main__":
    main()
