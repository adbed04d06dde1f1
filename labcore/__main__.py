"""The ``python -m labcore`` command line.

    python -m labcore doctor            versions, devices and a measured micro-benchmark
    python -m labcore doctor --json     the same as JSON
    python -m labcore exercises         list the notebook exercises and what each asks
"""

from __future__ import annotations

import argparse
import sys


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m labcore", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    doctor = commands.add_parser("doctor", help="print versions, devices and a measured micro-benchmark")
    doctor.add_argument("--matmul-n", type=_positive_int, default=1024, help="square matmul size (default 1024)")
    doctor.add_argument(
        "--vector-size", type=_positive_int, default=1_000_000, help="length of the jit speed-up vector"
    )
    doctor.add_argument("--json", action="store_true", help="print the results as JSON")

    commands.add_parser("exercises", help="list the notebook exercises")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "doctor":
        from labcore import doctor

        doctor.run(matmul_n=args.matmul_n, vector_size=args.vector_size, as_json=args.json)
    elif args.command == "exercises":
        from labcore import exercises

        for name in exercises.names():
            print(f"{name:<24} {exercises.get(name).description.splitlines()[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
