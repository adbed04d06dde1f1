"""Device memory profiles: what is live on the devices, how big, and which line allocated it.

    profile = device_memory_profile()        # decoded jax.profiler.device_memory_profile()
    profile.total_bytes                      # every live buffer and executable, in bytes
    profile.top(3)                           # [Allocation(bytes=4194304, count=1, kind='buffer', ...), ...]
    save_memory_profile("memory.prof")       # for `pprof -http :8080 memory.prof`

JAX records a Python stack for every device allocation; ``jax.profiler.device_memory_profile``
returns them as a gzipped pprof ``Profile`` protocol buffer. ``parse_memory_profile`` decodes
the few fields a summary needs by hand: the protobuf wire format is varints and
length-delimited fields, so no ``.proto`` file, no generated code and no extra dependency.
``labcore.tools.profiling`` re-exports everything here.
"""

from __future__ import annotations

import dataclasses
import gzip
import os
import pathlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from labcore.tools.benchmarking import markdown_table

__all__ = ["Allocation", "MemoryProfile", "device_memory_profile", "parse_memory_profile", "save_memory_profile"]


def _varint(data: bytes, i: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[i]
        i += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return result, i


def _fields(data: bytes) -> Iterator[tuple[int, int, Any]]:
    """(field number, wire type, value) of a protobuf message: value is an int for varints,
    bytes for length-delimited fields and for fixed 64/32-bit fields."""
    i = 0
    while i < len(data):
        key, i = _varint(data, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(data, i)
        elif wire == 2:
            size, i = _varint(data, i)
            value, i = data[i : i + size], i + size
        elif wire == 1:
            value, i = data[i : i + 8], i + 8
        elif wire == 5:
            value, i = data[i : i + 4], i + 4
        else:  # groups (3, 4) are deprecated and pprof does not use them
            raise ValueError(f"unsupported protobuf wire type {wire} for field {field}")
        yield field, wire, value


def _ints(wire: int, value: Any) -> list[int]:
    """A repeated integer field's entries: packed (one length-delimited run) or one varint."""
    if wire == 0:
        return [value]
    out, i = [], 0
    while i < len(value):
        number, i = _varint(value, i)
        out.append(number)
    return out


def _signed(value: int) -> int:
    # int64 fields hold negative numbers as 64-bit two's complement varints
    return value - (1 << 64) if value >= 1 << 63 else value


@dataclasses.dataclass(frozen=True)
class Allocation:
    """One sample of a device memory profile: live allocations sharing a stack and labels.

    bytes, count: the sample's "space" (bytes) and "allocations" (count) values. kind:
    ``buffer`` (a jax.Array's memory) or ``executable`` (a compiled program). device: e.g.
    ``cpu:0``. site: the innermost frame outside JAX's own code, ``function (file:line)``:
    where the user's code asked for it. stack: every frame, innermost first.
    """

    bytes: int
    count: int
    kind: str
    device: str
    site: str
    stack: tuple[str, ...]
    labels: Mapping[str, Any]


@dataclasses.dataclass(frozen=True)
class MemoryProfile:
    """A decoded device memory profile: what is live on the devices, and who allocated it.

    sample_types: the pprof value columns, e.g. (("allocations", "count"), ("space", "bytes")).
    allocations: every sample, largest first.
    """

    sample_types: tuple[tuple[str, str], ...]
    allocations: tuple[Allocation, ...]

    @property
    def total_bytes(self) -> int:
        """Bytes of every live allocation in the profile (buffers and executables)."""
        return sum(a.bytes for a in self.allocations)

    def top(self, n: int = 10, kind: str | None = None) -> list[Allocation]:
        """The ``n`` largest samples (optionally only one kind: "buffer" or "executable")."""
        return [a for a in self.allocations if kind is None or a.kind == kind][:n]

    def table(self, n: int = 10) -> str:
        rows = [
            {"MiB": a.bytes / 2**20, "count": a.count, "kind": a.kind, "device": a.device, "allocated at": a.site}
            for a in self.top(n)
        ]
        return markdown_table(rows) if rows else "(no live allocations)"

    def __repr__(self) -> str:
        # One line for the text view a notebook saves beside the markdown table, not every sample.
        return f"MemoryProfile({self.total_bytes / 2**20:.2f} MiB live in {len(self.allocations)} samples)"

    def _repr_markdown_(self) -> str:
        return f"**{self.total_bytes / 2**20:.2f} MiB live** in {len(self.allocations)} samples\n\n{self.table()}"


def _jax_source_dirs() -> tuple[str, ...]:
    import jax

    dirs = [os.path.dirname(os.path.abspath(jax.__file__))]
    try:
        import jaxlib

        dirs.append(os.path.dirname(os.path.abspath(jaxlib.__file__)))
    except ImportError:  # jaxlib ships with jax; a missing one only means fewer frames to skip
        pass
    return tuple(d + os.sep for d in dirs)


def parse_memory_profile(data: bytes, internal_dirs: Sequence[str] | None = None) -> MemoryProfile:
    """Decode a pprof ``Profile`` (gzipped, as ``jax.profiler.device_memory_profile`` returns it, or raw).

    Only the fields a summary needs: sample_type (1), sample (2: location_id 1, value 2,
    label 3), location (4: id 1, line 4 -> function_id 1, line 2), function (5: id 1, name 2,
    filename 4) and string_table (6). internal_dirs: source folders whose frames are skipped
    when naming an allocation's site (default: jax's and jaxlib's).
    """
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    internal = tuple(internal_dirs) if internal_dirs is not None else _jax_source_dirs()
    strings: list[str] = []
    raw_types: list[tuple[int, int]] = []
    raw_samples: list[tuple[list[int], list[int], list[tuple[int, int, int]]]] = []
    functions: dict[int, tuple[int, int]] = {}
    locations: dict[int, list[tuple[int, int]]] = {}
    for field, wire, value in _fields(data):
        if field == 6:
            strings.append(value.decode("utf-8", "replace"))
        elif field == 1:
            parts = dict((f, v) for f, _, v in _fields(value))
            raw_types.append((parts.get(1, 0), parts.get(2, 0)))
        elif field == 2:
            location_ids, values, labels = [], [], []
            for f, w, v in _fields(value):
                if f == 1:
                    location_ids += _ints(w, v)
                elif f == 2:
                    values += [_signed(x) for x in _ints(w, v)]
                elif f == 3:
                    label = dict((lf, lv) for lf, _, lv in _fields(v))
                    labels.append((label.get(1, 0), label.get(2, 0), _signed(label.get(3, 0))))
            raw_samples.append((location_ids, values, labels))
        elif field == 4:
            location_id, lines = 0, []
            for f, _, v in _fields(value):
                if f == 1:
                    location_id = v
                elif f == 4:
                    line = dict((lf, lv) for lf, _, lv in _fields(v))
                    lines.append((line.get(1, 0), line.get(2, 0)))
            locations[location_id] = lines
        elif field == 5:
            parts = dict((f, v) for f, _, v in _fields(value))
            functions[parts.get(1, 0)] = (parts.get(2, 0), parts.get(4, 0))

    def text(index: int) -> str:
        return strings[index] if 0 <= index < len(strings) else ""

    sample_types = tuple((text(t), text(u)) for t, u in raw_types)
    columns = [t for t, _ in sample_types]
    bytes_column = columns.index("space") if "space" in columns else len(columns) - 1
    count_column = columns.index("allocations") if "allocations" in columns else 0
    allocations = []
    for location_ids, values, labels in raw_samples:
        frames = []
        for location_id in location_ids:  # pprof lists the innermost frame first
            for function_id, line in locations.get(location_id, []):
                name_index, file_index = functions.get(function_id, (0, 0))
                frames.append((text(name_index), text(file_index), line))
        site = next(((n, f, l) for n, f, l in frames if not f.startswith(internal)), frames[0] if frames else None)
        label_map = {text(key): (text(s) if s else number) for key, s, number in labels}
        allocations.append(
            Allocation(
                bytes=values[bytes_column] if values else 0,
                count=values[count_column] if values else 0,
                kind=str(label_map.get("kind", "")),
                device=str(label_map.get("device", "")),
                site=f"{site[0]} ({os.path.basename(site[1])}:{site[2]})" if site else "",
                stack=tuple(f"{n} ({f}:{l})" for n, f, l in frames),
                labels=label_map,
            )
        )
    allocations.sort(key=lambda a: a.bytes, reverse=True)
    return MemoryProfile(sample_types, tuple(allocations))


def device_memory_profile(backend: str | None = None) -> MemoryProfile:
    """What is live on the devices now: ``jax.profiler.device_memory_profile``, decoded.

    Counts every live jax.Array buffer and compiled executable of the backend (all its
    devices), with the Python stack that created it. On the CPU, executables show 0 bytes
    (their code is not device memory). Arrays that are unreachable but not yet garbage
    collected still count.
    """
    import jax

    return parse_memory_profile(jax.profiler.device_memory_profile(backend))


def save_memory_profile(path: str | os.PathLike, backend: str | None = None) -> pathlib.Path:
    """Write the device memory profile to ``path`` (gzipped pprof): ``pprof -top path`` or
    ``pprof -http :8080 path`` reads it. Returns the path."""
    import jax

    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(jax.profiler.device_memory_profile(backend))
    return path
