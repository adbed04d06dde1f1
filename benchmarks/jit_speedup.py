"""How much does jax.jit speed up a chain of element-wise operations, by array size?

The measurement behind notebook 00's plot: `labcore.tools.doctor.elementwise_chain` (a dozen
element-wise ops) timed op by op and jitted, compile excluded, at each vector length.

    python benchmarks/jit_speedup.py                 # sizes 1e2 .. 1e7
    python benchmarks/jit_speedup.py --sizes 100 10000 --repeats 5 --out /tmp/bench

Writes {out}/jit_speedup.json and prints a markdown table.
"""

from __future__ import annotations

import argparse

from labcore.tools import doctor
from labcore.tools.benchmarking import write_results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10**k for k in range(2, 8)])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args(argv)

    rows = []
    for size in args.sizes:
        result = doctor.measure_jit_speedup(size=size, repeats=args.repeats)
        rows.append(
            {
                "vector length": size,
                "op by op (ms)": result.eager_seconds * 1e3,
                "jit (ms)": result.jit_seconds * 1e3,
                "speed-up (x)": result.speedup,
            }
        )
    matmul = doctor.measure_matmul()
    write_results(
        "jit_speedup",
        rows,
        out_dir=args.out,
        extra={"matmul_1024_gflops": matmul.gflops, "repeats": args.repeats},
    )
    print(f"jitted float32 matmul 1024x1024: {matmul.gflops:.1f} GFLOP/s")


if __name__ == "__main__":
    main()
