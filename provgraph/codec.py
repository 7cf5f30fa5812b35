"""What provgraph keeps, as bytes and back: the cache's tables and the lock's stamps.

Pure: values in, bytes out, and bytes in, values out; the files themselves are
read and written by ``state``.  The cache is one JSON object written with
orjson, one top-level entry after the other, with the part the no-change check
reads first, then the last result, then the per-file tables.  A large folder's
tables are written a batch of rows at a time and read a row at a time, so that
neither their rows as lists nor orjson's buffers are ever all held at once.

Decoding checks shapes and raises ``Corrupt`` (or the ``TypeError``,
``ValueError``, ``KeyError`` ... of a wrong shape) on damage; it never
computes anything: the last result comes back as its stored parts, and
staleness is propagated again by whoever needs it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

import orjson

from .lockfile import Record, encode_lock
from .model import Edge, EdgeStatus, FileMeta, Problem, ProblemKind, Report, Stamp

if TYPE_CHECKING:  # imported where decoded: the no-change path never needs them
    from .declarations import Declaration
    from .scan import Resolution, Seen
    from .stamps import Derivation

__all__ = [
    "FORMAT",
    "LEGACY_FORMAT",
    "BATCH_BREAK",
    "REPORT",
    "TABLES",
    "VERSION",
    "Chunks",
    "Corrupt",
    "RowsAsSeen",
    "StoredReport",
    "check_format",
    "decode_legacy",
    "decode_problem",
    "decode_edges",
    "decode_report",
    "decode_seen",
    "derivations_of",
    "encode_problem",
    "encode_report",
    "encode_rows",
    "encode_seen",
    "lock_bytes",
    "optional_text",
    "parsed_in_batches",
    "split_cache",
    "stream",
    "text",
]

FORMAT = "provgraph-cache"
VERSION = 1
LEGACY_FORMAT = "provgraph-state"
TABLES = b',"seen":'
"""Where the per-file tables start in the cache, after what ``recall`` reads
(inside a JSON string a quote is always escaped, so these bytes mark the key)."""
REPORT = b',"report":'
"""Where the last result starts: ``recall`` parses it only once the check passed."""
_BATCH = 4096
"""Rows encoded in one call: few calls, and small buffers."""


class Corrupt(Exception):
    """The bytes are not what this version of provgraph writes; the message says why."""


class Chunks(NamedTuple):
    """A value already encoded, in parts: ``stream`` writes them as they come."""

    parts: Iterator[bytes]


class StoredReport(NamedTuple):
    """The last result as the cache keeps it: everything but the stale entries, which
    follow from the edges (``lineage.propagate``)."""

    root: str
    file_count: int
    edges: tuple[Edge, ...]
    cycles: tuple[tuple[str, ...], ...]
    problems: tuple[Problem, ...]


# -- the lock's stamps -------------------------------------------------------------------


def lock_bytes(derivations: Mapping[str, Derivation], exists: bool) -> bytes | None:
    """The lock for these stamps; None when there is none and nothing to put in it (a
    folder without derived files gets no lock)."""
    records = [
        Record(derived, source, stamp, derivation.derived_at)
        for derived, derivation in derivations.items()
        for source, stamp in derivation.stamps.items()
    ]
    return encode_lock(records) if records or exists else None


def derivations_of(table: Mapping[str, tuple[str | None, dict[str, Stamp]]]) -> dict[str, Derivation]:
    """Each derived file's stamps, from the lock's table of them (``LockRead.derivations``)."""
    from .stamps import Derivation

    return {derived: Derivation(at, stamps) for derived, (at, stamps) in table.items()}


def decode_legacy(data: Any) -> dict[str, Derivation]:
    """The stamps of a schema-1 ``state.json``, the state file before the lock."""
    from .stamps import Derivation

    check_format(data, LEGACY_FORMAT)
    return {
        text(path): Derivation(optional_text(record["derived_at"]), _decode_stamps(record["stamps"]))
        for path, record in data["derivations"].items()
    }


def _decode_stamps(stamps: dict[str, Any]) -> dict[str, Stamp]:
    decoded = {}
    for source, (sha, at, since) in stamps.items():
        decoded[text(source)] = Stamp(optional_text(sha), date(at), None if since is None else date(since))
    return decoded


# -- writing the cache ---------------------------------------------------------------------


def stream(entries: Iterable[tuple[str, object]]) -> Iterator[bytes]:
    """The cache's bytes, one top-level entry at a time, as ``orjson.dumps`` would write
    the whole object."""
    yield b"{"
    for index, (key, value) in enumerate(entries):
        yield (b',"' if index else b'"') + key.encode() + b'":'
        if isinstance(value, Chunks):
            yield from value.parts
        else:
            yield orjson.dumps(value)
    yield b"}"


def encode_seen(table: Mapping[str, Seen]) -> Chunks:
    """The per-file table, a batch of rows at a time."""
    return Chunks(_batches(((path, _seen_row(seen)) for path, seen in table.items()), b"{", b"}", dict))


def encode_report(report: Report) -> Chunks:
    """Stale entries are not stored: they follow from the edges, and their chains grow with
    the square of the depth (a 10,000-deep chain would make a state file of half a gigabyte)."""
    head = orjson.dumps({"root": report.root, "files": report.file_count})
    rows = ([e.source, e.derived, e.status.value, e.stamped_at, e.since, e.moved_to] for e in report.edges)
    tail = orjson.dumps(
        {"cycles": [list(cycle) for cycle in report.cycles], "problems": [encode_problem(p) for p in report.problems]}
    )
    return Chunks(_joined(head[:-1] + b',"edges":', _batches(rows, b"[", b"]", list), b"," + tail[1:]))


def _joined(head: bytes, middle: Iterator[bytes], tail: bytes) -> Iterator[bytes]:
    yield head
    yield from middle
    yield tail


def _batches(items: Iterable[Any], opening: bytes, closing: bytes, container: type) -> Iterator[bytes]:
    """A JSON array or object of ``items``, encoded ``_BATCH`` items per call; batches are
    separated by a line break (``BATCH_BREAK``), so that they can be parsed one at a time."""
    yield opening
    batch: list[Any] = []
    first = True
    for item in items:
        batch.append(item)
        if len(batch) == _BATCH:
            yield (b"" if first else BATCH_BREAK) + orjson.dumps(container(batch))[1:-1]
            batch, first = [], False
    if batch:
        yield (b"" if first else BATCH_BREAK) + orjson.dumps(container(batch))[1:-1]
    yield closing


BATCH_BREAK = b",\n"
"""Between two batches of a table: orjson writes a line break in a string as ``\\n``, so
these bytes occur nowhere else in the cache."""


def parsed_in_batches(data: bytes, start: int, end: int) -> Iterator[Any]:
    """Each batch of the table ``data[start:end]`` written by ``_batches`` (``{...}`` or
    ``[...]``), parsed on its own: a large table is never parsed as a whole beside its
    bytes.  A table written in one piece is one batch."""
    opening, closing = data[start : start + 1], data[end - 1 : end]
    if (opening, closing) not in ((b"{", b"}"), (b"[", b"]")):
        raise Corrupt("a table is not what provgraph writes")
    start, end = start + 1, end - 1
    with memoryview(data) as view:
        while True:
            stop = data.find(BATCH_BREAK, start, end)
            yield orjson.loads(opening + view[start : end if stop < 0 else stop] + closing)
            if stop < 0:
                return
            start = stop + len(BATCH_BREAK)


def encode_rows(rows: Mapping[str, Seen | list[object]]) -> Chunks:
    """The per-file table from rows as ``decode_seen`` would read them back: a row kept
    as the cache held it (a list) is written as it was, without being decoded."""
    return Chunks(
        _batches(
            ((path, row if type(row) is list else _seen_row(row)) for path, row in rows.items()),  # type: ignore[arg-type]
            b"{",
            b"}",
            dict,
        )
    )


def _seen_row(seen: Seen) -> list[object]:
    """One file's row: its metadata, hash and declaration, and the declaration resolved
    when it declares something."""
    row: list[object] = [*seen.meta, seen.sha256, _encode_declaration(seen.declaration)]
    if seen.resolved is not None and seen.declaration is not None:
        sources, refused = seen.resolved
        row.append([sources, [[problem.kind.value, problem.detail] for problem in refused]])
    return row


_NO_DECLARATION: tuple[()] = ()
"""How most files encode, as an empty list: no ``derived_from``, no ``derived_at``, no problem."""


def _encode_declaration(declaration: Declaration | None) -> list[object] | tuple[()] | None:
    if declaration is None:
        return None
    if not declaration.entries and declaration.derived_at is None and not declaration.problems:
        return _NO_DECLARATION
    return [
        list(declaration.entries),
        declaration.derived_at,
        [[kind.value, detail] for kind, detail in declaration.problems],
    ]


def encode_problem(problem: Problem) -> list[str]:
    return list(problem.row)


# -- reading the cache ---------------------------------------------------------------------


def check_format(data: Any, format: str = FORMAT) -> None:
    if not isinstance(data, dict) or data.get("format") != format:
        raise Corrupt(f"it is not a {format} file")
    if data.get("version") != VERSION:
        raise Corrupt(f"unknown version {data.get('version')!r}, this provgraph reads version {VERSION}")


def split_cache(data: bytes) -> tuple[bytes, bytes, bytes]:
    """The cache's three parts, each a JSON object or value of its own: what the no-change
    check reads, the last result (which a scan never needs), and the per-file tables."""
    report = data.find(REPORT)
    tables = data.find(TABLES, report) if report >= 0 else -1
    if tables < 0:
        raise Corrupt("it is not a valid provgraph cache")
    return data[:report] + b"}", data[report + len(REPORT) : tables], b"{" + data[tables + 1 :]


def decode_seen(table: dict[str, Any]) -> dict[str, Seen]:
    """One row per file, decoded in one tight loop, each row let go as soon as it is read
    (a scan after a change needs them all, never twice).  Most rows declare nothing and
    are built from their values as they are, after one check of their types."""
    from .declarations import NOTHING
    from .scan import Seen

    seen = {}
    make_meta, make_seen = FileMeta._make, Seen._make
    while table:
        path, row = table.popitem()
        seen[path] = _decode_row(path, row, NOTHING, make_meta, make_seen)
    return seen


def _decode_row(path: Any, row: Any, nothing: Declaration, make_meta: Any, make_seen: Any) -> Seen:
    if type(path) is not str or tuple(map(type, row[:4])) != _META_TYPES or len(row) not in (6, 7):
        raise Corrupt("a file's row must hold its metadata (four whole numbers), hash and declaration")
    declaration = row[5]
    if declaration == []:
        declaration = nothing
    elif declaration is not None:
        declaration = _decode_declaration(declaration)
    resolved = _decode_resolved(path, row[6:])
    return make_seen((make_meta(row[:4]), optional_text(row[4]), declaration, resolved))  # type: ignore[no-any-return]


class RowsAsSeen(Mapping[str, "Seen"]):
    """The per-file table read lazily: a row is decoded (and checked) only when a scan asks
    for it, so a refresh after a small change decodes the few rows it reads again."""

    def __init__(self, rows: Mapping[str, list[Any]]) -> None:
        from .declarations import NOTHING
        from .scan import Seen

        self._rows = rows
        self._nothing = NOTHING
        self._make_seen = Seen._make

    def __getitem__(self, path: str) -> Seen:
        return _decode_row(path, self._rows[path], self._nothing, FileMeta._make, self._make_seen)

    def __iter__(self) -> Iterator[str]:
        return iter(self._rows)

    def __len__(self) -> int:
        return len(self._rows)


_META_TYPES = (int, int, int, int)
"""Size, mtime_ns, ctime_ns, inode, as orjson reads them back."""


def _decode_declaration(row: Any) -> Declaration:
    from .declarations import NOTHING, Declaration

    entries, derived_at, problems = row
    if not entries and derived_at is None and not problems:
        return NOTHING
    return Declaration(
        tuple(text(entry) for entry in entries),
        optional_text(derived_at),
        tuple((ProblemKind(kind), text(detail)) for kind, detail in problems),
    )


def _decode_resolved(path: str, rest: list[Any]) -> Resolution | None:
    """A row's resolved declaration (sources, refusals), when it has one."""
    if not rest:
        return None
    ((sources, refused),) = rest
    if not isinstance(sources, list) or not isinstance(refused, list):
        raise Corrupt("a resolved declaration must hold two lists")
    return (
        tuple(text(source) for source in sources),
        tuple(Problem(path, ProblemKind(kind), text(detail)) for kind, detail in refused),
    )


def decode_problem(row: Any) -> Problem:
    path, kind, detail = row
    return Problem(text(path), ProblemKind(kind), text(detail))


def decode_report(data: Any) -> StoredReport:
    return StoredReport(
        root=text(data["root"]),
        file_count=int(data["files"]),
        edges=decode_edges(data["edges"]),
        cycles=tuple(tuple(text(path) for path in cycle) for cycle in data["cycles"]),
        problems=tuple(decode_problem(row) for row in data["problems"]),
    )


def decode_edges(rows: list[Any]) -> tuple[Edge, ...]:
    """One row per declared source: checked and built in one tight loop, since the
    no-change path decodes them all."""
    status_of = _EDGE_STATUS
    edges = []
    for source, derived, status, at, since, moved_to in rows:
        if type(source) is not str or type(derived) is not str:
            raise Corrupt("an edge must join two paths")
        at = None if at is None else date(at)
        since = None if since is None else date(since)
        edges.append(Edge(source, derived, status_of[status], at, since, optional_text(moved_to)))
    return tuple(edges)


_EDGE_STATUS = {status.value: status for status in EdgeStatus}


_LATEST = 253402300799.0
"""The last second of year 9999: a later (or negative) date cannot be shown."""


def date(value: object) -> float:
    """Epoch seconds that a date can be made of; anything else is damage."""
    number = float(value)  # type: ignore[arg-type]
    if not (math.isfinite(number) and 0 <= number <= _LATEST):
        raise Corrupt(f"a date out of range: {value!r}")
    return number


def text(value: object) -> str:
    if not isinstance(value, str):
        raise Corrupt(f"expected text, found {type(value).__name__}")
    return value


def optional_text(value: object) -> str | None:
    return None if value is None else text(value)
