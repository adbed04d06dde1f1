"""Where each side of a ``benchmarks/peers.py`` pair spends its time: the compiled program's loops, the kernels
it runs per env step, its round trips to Python, and the costliest ops of a profiled run, by the line that made them.

    python benchmarks/peers_anatomy.py ppo-cartpole-rejax               # the pair's budget, one agent
    python benchmarks/peers_anatomy.py pqn-cartpole-rejax --scale 0.2 --top 15
    python benchmarks/peers_anatomy.py pqn-cartpole-rejax --agents 16 --scheduler default   # 16 vmapped agents

peers.py says which side is faster; this says why. Each side of the pair runs in a process of its own, in
its own environment (peers.py's), trains once timed (one run, not rounds: the speed comparison is
peers.py's table), writes its compiled program's optimised HLO, and trains once more under JAX's
profiler. From those, per side:

* **kernels**: what one call of the compiled program executes, every loop of known length unrolled
  (``labcore.tools.gpu_program.kernels_per_call``; XLA:CPU runs each fusion, dot, copy, sort as one
  thunk), over the env steps it trains;
* **loops**: each while loop of the program that runs a thousandth of its kernels or more, where it was
  written, its trips and the kernels of a turn;
* **round trips to Python**: the program's host callbacks (custom calls back into Python);
* **costliest ops**: the profiled run's op time (self time, so a loop's body is not counted twice) by
  opcode and by the source line that made the op (the innermost frame XLA recorded; "made by XLA": a
  loop's carried copies, its test), beside the time any op ran ("ops busy") and the profiled run's wall
  time: on a CPU the rest is XLA's executor starting each op and the host.

Only pairs whose two sides are each one compiled program (not SBX's, nor labcore's ``dqn-host``). Writes
benchmarks/results/peers_anatomy.json and prints markdown tables.
"""

from __future__ import annotations

import argparse
import re
import pathlib
import shutil
import sys
import tempfile
from collections import defaultdict

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import peers  # noqa: E402  (benchmarks/ is not a package)

# the custom calls that call back into Python: the CPU's and the GPU's, the legacy ones and the FFI ones
CALLBACK_TARGET = re.compile(r'custom_call_target="\w*python_(cpu|gpu)_callback"')


def inspect_side(pair: peers.Pair, side: str, python: str, folder: pathlib.Path, timeout_s: float, agents: int = 1,
                 scheduler: str = "off") -> dict:
    """Train one side once timed, once profiled; its result line, the HLO text and the trace folder."""
    spec = peers.spec_of(pair, side, agents=agents, scheduler=scheduler)
    spec["inspect"] = {"hlo": str(folder / f"{side}.hlo"), "trace": str(folder / f"{side}-trace")}
    result = peers.run_side(python, spec, timeout_s)
    return {"result": result, "hlo": (folder / f"{side}.hlo").read_text(), "trace": folder / f"{side}-trace"}


def anatomy(hlo: str, trace_folder: pathlib.Path, steps: int, top: int) -> dict:
    """The numbers above for one side: its HLO text, its profiled run's trace, the env steps it trained."""
    from labcore.tools import gpu_program, profiling

    ops = gpu_program.ops(hlo)
    kernels = gpu_program.kernels_per_call(hlo)
    loops = [{"where": loop.where, "depth": loop.depth, "trips": loop.trips, "kernels per turn": loop.kernels}
             for loop in gpu_program.kernel_loops(hlo) if loop.trips is None or loop.trips * loop.kernels > kernels // 1000]
    callbacks = sum(1 for line in hlo.splitlines() if "custom-call(" in line and CALLBACK_TARGET.search(line))
    trace = profiling.read_trace(trace_folder)
    by_opcode: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    by_site: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for op in trace.top_operations(n=1_000_000, where="device", by="self"):
        known = ops.get(op.name)
        opcode, site = (known.opcode, known.where) if known else ("(not in the HLO)", "")
        for table, key in ((by_opcode, opcode), (by_site, site or "(made by XLA)")):
            table[key][0] += op.self_ms
            table[key][1] += op.count
    busy = trace.host_vs_device()

    def ranked(table: dict[str, list[float]]) -> list[dict]:
        rows = sorted(table.items(), key=lambda item: item[1][0], reverse=True)[:top]
        return [{"name": name, "self ms": round(ms, 1), "ops run": int(count)} for name, (ms, count) in rows]

    return {"kernels per call": kernels, "kernels per env step": round(kernels / steps, 2), "loops": loops,
            "host callbacks": callbacks, "profiled ms": round(busy["wall_ms"], 1), "ops busy ms": round(busy["device_ms"], 1),
            "op ms": round(sum(ms for ms, _ in by_opcode.values()), 1), "by opcode": ranked(by_opcode),
            "by source": ranked(by_site)}


def main(argv: list[str] | None = None) -> None:
    jitted = [pair.name for pair in peers.PAIRS if pair.peer == "rejax" and pair.algorithm != "dqn-host"]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pairs", nargs="+", choices=jitted)
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every step count")
    parser.add_argument("--agents", type=int, default=1, help="vmapped agents on each side")
    parser.add_argument("--scheduler", choices=peers.SCHEDULERS, default="off", help="XLA's CPU scheduler (peers.py's)")
    parser.add_argument("--top", type=int, default=12, help="rows of each costliest-ops table")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds one side may take")
    parser.add_argument("--out", default=str(HERE / "results"), help="folder for peers_anatomy.json")
    args = parser.parse_args(argv)
    from labcore.tools.benchmarking import markdown_table, write_results

    rows = []
    for pair in [pair.scaled(args.scale) for pair in peers.PAIRS if pair.name in args.pairs]:
        pythons = {"labcore": sys.executable, pair.peer: str(peers.setup(peers.peers()[pair.peer]))}
        folder = pathlib.Path(tempfile.mkdtemp(prefix="peers-anatomy-"))
        try:
            for side in ("labcore", pair.peer):
                seen = inspect_side(pair, side, pythons[side], folder, args.timeout, args.agents, args.scheduler)
                result = seen["result"]
                row = {"pair": pair.name, "side": side, "agents": args.agents, "steps": result["steps"], "run s": round(result["run_s"], 3),
                       "steps/s": round(result["steps_per_s"]), **anatomy(seen["hlo"], seen["trace"], result["steps"], args.top)}
                rows.append(row)
                print(f"\n## {pair.name}: {side}, {row['steps/s']:,} env steps/s, {row['kernels per env step']} kernels per "
                      f"env step, {row['host callbacks']} host callbacks\n")
                print(markdown_table(row["loops"]))
                print()
                print(markdown_table(row["by opcode"]))
                print()
                print(markdown_table(row["by source"]))
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    write_results("peers_anatomy", rows, out_dir=args.out,
                  columns=["pair", "side", "steps/s", "kernels per env step", "host callbacks", "op ms", "ops busy ms",
                           "profiled ms"],
                  extra={"command": " ".join(["python benchmarks/peers_anatomy.py", *(argv if argv is not None else sys.argv[1:])]),
                         "scale": args.scale, "agents": args.agents, "xla_scheduler": args.scheduler})


if __name__ == "__main__":
    main()
