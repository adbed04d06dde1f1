"""The architecture guide's table of algorithms, written at build time from ``labcore.agents.registry``
(``{{ algorithms_table }}`` in docs/guide/architecture.md), so that an algorithm added to the registry is
in the guide without an edit there."""

from __future__ import annotations

from labcore.agents import registry


def table() -> str:
    """One row per algorithm of the registry: its command-line name, its driver module, what it is."""
    rows = ["| name | driver | what it is |", "|---|---|---|"]
    rows += [f"| `{algorithm.name}` | `{algorithm.driver().__name__}` | {algorithm.help} |" for algorithm in registry.ALGORITHMS]
    return "\n".join(rows)


def substitutions() -> dict[str, str]:
    return {"algorithms_table": table()}
