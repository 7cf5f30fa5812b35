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
from binascii import crc32
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import islice

import orjson

from .store.lock import encode_rows
from .model import (
    EDGE_COLUMNS,
    Edge,
    EdgeStatus,
    EdgeTable,
    FileMeta,
    NamedTuple,
    Problem,
    ProblemKind,
    Report,
    Stamp,
    column,
)

TYPE_CHECKING = False
if TYPE_CHECKING:  # imported where decoded: the no-change path never needs them
    from typing import Any

    from .declarations import Declaration
    from .scan import Resolution, Seen
    from .stamps import Derivation

__all__ = [
    "FORMAT",
    "LEGACY_FORMAT",
    "BATCH_BREAK",
    "Bytes",
    "REPORT",
    "TABLES",
    "VERSION",
    "Checksum",
    "Chunks",
    "Corrupt",
    "EdgeBatch",
    "EdgeBatches",
    "RowTable",
    "RowsAsSeen",
    "Span",
    "StoredEdges",
    "StoredReport",
    "check_format",
    "decode_legacy",
    "decode_problem",
    "decode_edges",
    "decode_edge_rows",
    "decode_report",
    "decode_seen",
    "derivations_of",
    "edge_batches",
    "edge_row",
    "encode_problem",
    "encode_report",
    "encode_seen",
    "encode_table",
    "lock_bytes",
    "optional_text",
    "sized",
    "sized_spans",
    "split_cache",
    "stream",
    "text",
]

FORMAT = "provgraph-cache"
VERSION = 3
"""Version 2 adds what a refresh after a small change needs to leave the last result's
edges unread (``StoredEdges``): batches of edges that never split one file's, their
index, the broken edges, what derives from each file, and a checksum of those parts.
Version 3 records the memory files' metadata as a digest for each part of them, no longer
packed whole, and the files racy at the next scan (``incremental.MemoryFiles``)."""
READABLE = (1, 2, 3)
"""The versions a full scan reads (an earlier cache is as good for it); only ``VERSION``
is patched."""
LEGACY_FORMAT = "provgraph-state"
TABLES = b',"seen":'
"""Where the per-file tables start in the cache, after what ``recall`` reads
(inside a JSON string a quote is always escaped, so these bytes mark the key)."""
REPORT = b',"report":'
"""Where the last result starts: ``recall`` parses it only once the check passed."""
_BATCH = 256
"""Rows (or edges) of a table encoded in one call and parsed in one: few calls and small
buffers, and a refresh after a small change parses or encodes again only the batches
that hold what it reads or changes, so a batch is small."""


class Corrupt(Exception):
    """The bytes are not what this version of provgraph writes; the message says why."""


Bytes = bytes | bytearray | memoryview
"""Bytes as read or written: a batch left alone is written from where it was read."""


class Chunks(NamedTuple):
    """A value already encoded, in parts: ``stream`` writes them as they come."""

    parts: Iterator[Bytes]


class StoredReport(NamedTuple):
    """The last result as the cache keeps it: everything but the stale entries, which
    follow from the edges (``lineage.propagate``)."""

    root: str
    file_count: int
    edges: Sequence[Edge]
    cycles: tuple[tuple[str, ...], ...]
    problems: tuple[Problem, ...]


# -- the lock's stamps -------------------------------------------------------------------


def lock_bytes(derivations: Mapping[str, Derivation], exists: bool) -> bytes | None:
    """The lock for these stamps; None when there is none and nothing to put in it (a
    folder without derived files gets no lock)."""
    if not exists and not any(derivation.stamps for derivation in derivations.values()):
        return None
    return encode_rows(
        (derived, source, stamp.sha256, stamp.stamped_at, stamp.mismatch_since, derivation.derived_at)
        for derived, derivation in derivations.items()
        for source, stamp in derivation.stamps.items()
    )


def derivations_of(table: Mapping[str, tuple[str | None, dict[str, Stamp]]]) -> dict[str, Derivation]:
    """Each derived file's stamps, from the lock's table of them (``LockRead.derivations``)."""
    from .stamps import Derivation

    return {derived: Derivation(at, stamps) for derived, (at, stamps) in table.items()}


def decode_legacy(data: Any) -> dict[str, Derivation]:
    """The stamps of a schema-1 ``state.json``, the state file before the lock."""
    from .stamps import Derivation

    check_format(data, LEGACY_FORMAT, (1,))
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


def stream(entries: Iterable[tuple[str, object]]) -> Iterator[Bytes]:
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


def encode_seen(table: Mapping[str, Seen]) -> tuple[Chunks, list[str]]:
    """The per-file table sorted by path, a batch of rows at a time, and the first path
    of each batch (``RowTable`` finds a row's batch by them)."""
    return encode_table(table, _seen_row)


def encode_table(table: Mapping[str, Any], row: Callable[[Any], object] = list) -> tuple[Chunks, list[str]]:
    """A table keyed by path (the per-file rows, what derives from each file), sorted by path,
    a batch of rows at a time, and the first path of each batch (``RowTable`` reads it)."""
    paths = sorted(table)
    rows = zip(paths, map(row, map(table.__getitem__, paths)), strict=True)
    return Chunks(_batches(rows, b"{", b"}", dict)), paths[::_BATCH]


def encode_report(report: Report, batches: Sequence[EdgeBatch], checksum: Checksum, sizes: list[int]) -> Chunks:
    """Stale entries are not stored: they follow from the edges, and their chains grow with
    the square of the depth (a 10,000-deep chain would make a state file of half a gigabyte).

    The edges are written as ``batches`` (``edge_batches``; one a patch left alone as it
    was read), and their bytes pass through ``checksum``, the size of each part added to
    ``sizes`` (``sized``)."""
    head = orjson.dumps({"root": report.root, "files": report.file_count})
    edges = checksum.over(sized(_in_batches(b"[", map(_encoded_batch, batches), b"]"), sizes))
    tail = orjson.dumps(
        {"cycles": [list(cycle) for cycle in report.cycles], "problems": [encode_problem(p) for p in report.problems]}
    )
    return Chunks(_joined(head[:-1] + b',"edges":', edges, b"," + tail[1:]))


def edge_row(edge: Edge) -> list[object]:
    return [edge.source, edge.derived, edge.status.value, edge.stamped_at, edge.since, edge.moved_to]


Span = Callable[[int, int], bytes]
"""The bytes of the cache from one offset to another, read again when asked for: the batches
a patch leaves alone are copied from the cache as read, never held all at once."""


class Checksum:
    """The CRC-32 of the bytes that pass through it, in order.  The parts of the cache that
    only a refresh after a small change reads (the edges, their index, the broken ones,
    what derives from each file) are checked as a whole before any is trusted: damage
    there that still parses would silently give another answer than the full scan."""

    def __init__(self) -> None:
        self.value = 0

    def over(self, parts: Iterable[Bytes]) -> Iterator[Bytes]:
        for part in parts:
            self.value = crc32(part, self.value)
            yield part


class EdgeBatch(NamedTuple):
    """A run of a result's edges stored as one batch: every edge of each of its derived
    files, the first of which is ``first``; ``raw`` as the cache holds them (rows joined,
    no brackets), else ``edges``, encoded when written."""

    first: str
    size: int
    """How many edges it holds."""
    derived: int
    """How many derived files they belong to."""
    raw: Bytes | None
    edges: EdgeTable | None

    @property
    def entry(self) -> list[object]:
        """What the cache's index of the batches says of it."""
        return [self.first, self.size, self.derived]


def edge_batches(edges: Sequence[Edge]) -> list[EdgeBatch]:
    """``edges`` (sorted by derived file) cut into batches of about ``_BATCH`` edges, never
    between two edges of one file: a file's edges are in the one batch its path falls in,
    and each batch counts its derived files."""
    table = edges if type(edges) is EdgeTable else EdgeTable.joined([edges])
    derived = table.derived
    batches, start, total = [], 0, len(derived)
    while start < total:
        end = min(start + _BATCH, total)
        while end < total and derived[end] == derived[end - 1]:
            end += 1
        part = table[start:end]
        batches.append(EdgeBatch(derived[start], end - start, len(set(part.derived)), None, part))
        start = end
    return batches


def _encoded_batch(batch: EdgeBatch) -> Bytes:
    """A batch's rows as ``edge_row`` writes them, straight from its columns (orjson writes a
    tuple as an array and a status as its value), or as they were read."""
    if batch.raw is not None:
        return batch.raw
    assert batch.edges is not None
    return orjson.dumps(list(zip(*(column(batch.edges, name) for name in EDGE_COLUMNS), strict=True)))[1:-1]


class EdgeBatches(NamedTuple):
    """A result's edges in the batches they are written in (``incremental.Batches``)."""

    batches: list[EdgeBatch]

    @property
    def size(self) -> int:
        return sum(batch.size for batch in self.batches)

    @property
    def derived(self) -> int:
        return sum(batch.derived for batch in self.batches)

    def columns(self) -> tuple[list[Any], ...]:
        """The columns of every edge, those read parsed now (``EdgeTable.deferred``)."""
        tables = (decode_edge_rows(batch.raw) if batch.raw is not None else batch.edges for batch in self.batches)
        table = EdgeTable.joined(table for table in tables if table is not None)
        return tuple(getattr(table, name) for name in EDGE_COLUMNS)


def _joined(head: bytes, middle: Iterator[Bytes], tail: bytes) -> Iterator[Bytes]:
    yield head
    yield from middle
    yield tail


def _in_batches(opening: bytes, batches: Iterable[Bytes], closing: bytes) -> Iterator[Bytes]:
    """A JSON array or object from its batches' encoded items, a line break between two."""
    yield opening
    for index, batch in enumerate(batches):
        yield BATCH_BREAK + batch if index else batch
    yield closing


def _batches(items: Iterable[Any], opening: bytes, closing: bytes, container: type) -> Iterator[Bytes]:
    """A JSON array or object of ``items``, encoded ``_BATCH`` items per call; batches are
    separated by a line break (``BATCH_BREAK``), so that they can be parsed one at a time.
    Each batch is taken from ``items`` by ``islice`` (a first save of 10,000 files took a
    loop step per row, appending it and counting the batch, in Python)."""
    yield opening
    items = iter(items)
    batch, first = container(islice(items, _BATCH)), True
    while batch:
        yield (b"" if first else BATCH_BREAK) + orjson.dumps(batch)[1:-1]
        batch, first = container(islice(items, _BATCH)), False
    yield closing


BATCH_BREAK = b",\n"
"""Between two batches of a table: orjson writes a line break in a string as ``\\n``, so
these bytes occur nowhere else in the cache."""


def _spans(read: Span, start: int, end: int, opening: bytes, closing: bytes) -> list[tuple[int, int]]:
    """Where each batch of the table from ``start`` to ``end`` written by ``_batches`` is
    (none for an empty table), found a chunk at a time: the table is never held whole."""
    if read(start, start + 1) != opening or read(end - 1, end) != closing:
        raise Corrupt("a table is not what provgraph writes")
    spans, position, inner_end = [], start + 1, end - 1
    at = position
    while at < inner_end:
        chunk_end = min(at + _SCAN, inner_end)
        chunk = read(at, min(chunk_end + len(BATCH_BREAK) - 1, inner_end))  # a break across the end
        found = chunk.find(BATCH_BREAK)
        while 0 <= found < chunk_end - at:
            spans.append((position, at + found))
            position = at + found + len(BATCH_BREAK)
            found = chunk.find(BATCH_BREAK, found + len(BATCH_BREAK))
        at = max(chunk_end, position)
    if position < inner_end:
        spans.append((position, inner_end))
    return spans


_SCAN = 1 << 20
"""Bytes of a table searched for batch breaks at once."""


def sized(parts: Iterator[Bytes], sizes: list[int]) -> Iterator[Bytes]:
    """``parts`` as they come, the size of each added to ``sizes``: written beside a table
    written in batches (``_batches``, ``_in_batches``), they say where its batches are."""
    for part in parts:
        sizes.append(len(part))
        yield part


def sized_spans(start: int, end: int, sizes: object) -> list[tuple[int, int]] | None:
    """Where the batches of the table from ``start`` to ``end`` are, from the sizes of the
    parts it was written in (its opening, each batch with the break before it, its
    closing); None when they do not add up to that table."""
    if not isinstance(sizes, list) or len(sizes) < 2 or set(map(type, sizes)) != {int} or sum(sizes) != end - start:
        return None
    spans, position = [], start + sizes[0]
    for index, size in enumerate(sizes[1:-1]):
        skip = len(BATCH_BREAK) if index else 0
        if size <= skip:
            return None
        spans.append((position + skip, position + size))
        position += size
    return spans


def decode_edge_rows(rows: Bytes) -> EdgeTable:
    """A batch of stored edges (rows joined, no brackets) as columns (``EdgeTable``), each
    column checked as a whole."""
    table = EdgeTable([], [], [], [], [], [])
    _add_edge_rows(table, orjson.loads(b"[" + rows + b"]"))
    return table


def batch_of(firsts: Sequence[str], path: str) -> int:
    """The batch of a table kept in batches sorted by path (``firsts``: the first path of
    each) that holds ``path``, or would: the last whose first path is not after it."""
    return max(0, bisect_right(firsts, path) - 1)


class StoredEdges:
    """The last result's edges as the cache holds them: batches sorted by derived file, one
    file's edges all in one batch, kept as the bytes read.  A file's batch is found by the
    first derived file of each (the cache's index of them) and parsed only when asked for,
    so a refresh after a small change parses the few batches it replaces, and writes back
    every other one as it was read (``replaced``)."""

    def __init__(self, data: memoryview, spans: Sequence[tuple[int, int]], index: object) -> None:
        """``data[start:stop]`` for each of ``spans`` is a batch; ``index`` lists each
        batch's first derived file and its counts of edges and of derived files."""
        if not isinstance(index, list) or len(index) != len(spans):
            raise Corrupt("the index of the edges' batches does not list their batches")
        for entry in index:
            if not isinstance(entry, list) or tuple(map(type, entry)) != (str, int, int) or min(entry[1:]) < 1:
                raise Corrupt("an entry of the edges' index must hold a path and two counts")
        self._firsts: list[str] = [entry[0] for entry in index]
        if any(map(str.__ge__, self._firsts, self._firsts[1:])):
            raise Corrupt("the edges' batches are not in order")
        self.batches = [
            EdgeBatch(first, count, derived, data[start:stop], None)
            for (first, count, derived), (start, stop) in zip(index, spans, strict=True)
        ]
        self._parsed: dict[int, EdgeTable] = {}

    def _index_of(self, path: str) -> int:
        """The batch that holds ``path``'s edges, or would (``batch_of``)."""
        return batch_of(self._firsts, path)

    def _batch(self, index: int) -> EdgeTable:
        table = self._parsed.get(index)
        if table is None:
            batch = self.batches[index]
            assert batch.raw is not None
            table = decode_edge_rows(batch.raw)
            if (len(table), table.derived[:1], len(set(table.derived))) != (batch.size, [batch.first], batch.derived):
                raise Corrupt("a batch of edges is not what the index says")
            self._parsed[index] = table
        return table

    def edges_of(self, path: str) -> EdgeTable:
        """The edges of the derived file ``path`` (none when it declares nothing)."""
        if not self.batches:
            return EdgeTable([], [], [], [], [], [])
        table = self._batch(self._index_of(path))
        derived = table.derived
        start = derived.index(path) if path in derived else len(derived)
        end = start
        while end < len(derived) and derived[end] == path:
            end += 1
        return table[start:end]

    def replaced(self, edges: Mapping[str, Sequence[Edge]]) -> EdgeBatches:
        """The batches with the edges of each file in ``edges`` replaced by those given
        (none: it declares nothing now); a batch that no such file falls in stays as read."""
        touched: dict[int, dict[str, Sequence[Edge]]] = {}
        for path, new in edges.items():
            touched.setdefault(self._index_of(path), {})[path] = new
        batches: list[EdgeBatch] = []
        for index, batch in enumerate(self.batches):
            changes = touched.pop(index, None)
            batches += [batch] if changes is None else _rebatched(_by_file(self._batch(index)), changes)
        if touched:  # no batch at all: the new edges make the first ones
            batches += _rebatched({}, touched[0])
        return EdgeBatches(batches)


def _by_file(table: EdgeTable) -> dict[str, Sequence[Edge]]:
    """A batch's edges, by derived file (each file's edges are consecutive)."""
    runs: dict[str, Sequence[Edge]] = {}
    derived, start = table.derived, 0
    for end in range(1, len(derived) + 1):
        if end == len(derived) or derived[end] != derived[start]:
            runs[derived[start]] = table[start:end]
            start = end
    return runs


def _rebatched(runs: dict[str, Sequence[Edge]], changes: Mapping[str, Sequence[Edge]]) -> list[EdgeBatch]:
    """A batch's edges with ``changes`` applied, cut into batches again."""
    runs.update(changes)
    return edge_batches(EdgeTable.joined(runs[path] for path in sorted(runs)))


def _add_edge_rows(table: EdgeTable, rows: list[Any]) -> None:
    """A batch of stored edges added to ``table``'s columns, each column checked as a whole
    (as ``decode_edges`` checks each edge) in loops that run in C: no object per edge."""
    if not rows:
        return
    if set(map(type, rows)) != {list} or set(map(len, rows)) != {6}:
        raise Corrupt("an edge must hold two paths, a status, two dates and a hint")
    source, derived, status, stamped_at, since, moved_to = zip(*rows, strict=True)
    if not set(map(type, source)) | set(map(type, derived)) <= {str}:
        raise Corrupt("an edge must join two paths")
    if not set(map(type, moved_to)) <= _OPTIONAL_TEXT:
        raise Corrupt("an edge's hint must be text")
    table.source += source
    table.derived += derived
    table.status += map(_EDGE_STATUS.__getitem__, status)
    table.stamped_at += _dates(stamped_at)
    table.since += _dates(since)
    table.moved_to += moved_to


def _dates(values: tuple[Any, ...]) -> Sequence[float | None]:
    """Optional dates, checked as a whole when they are what is written (floats in range),
    else each converted (``date``) or refused."""
    given = [value for value in values if value is not None]
    if set(map(type, given)) <= {float} and all(map(math.isfinite, given)) and _in_range(given):
        return values
    return [None if value is None else date(value) for value in values]


def _in_range(dates: list[float]) -> bool:
    return not dates or (min(dates) >= 0.0 and max(dates) <= _LATEST)


_OPTIONAL_TEXT = {str, type(None)}


class RowTable(Mapping[str, list["Any"]]):  # "Any" as text: the run imports no ``typing``
    """The per-file table as the cache holds it (sorted by path, a batch of rows to a line),
    kept as the bytes read: a row's batch is found by the first path of each batch and
    parsed only when a row in it is asked for, and ``written`` copies every batch that
    no row changed in as it was read.  A refresh after a small change so parses and
    encodes a few batches, whatever the size of the folder."""

    def __init__(self, read: Span, start: int, end: int, firsts: list[str], sizes: object = None) -> None:
        """The table is from ``start`` to ``end`` (``{...}``), read by ``read`` a batch at a
        time when asked for; ``firsts`` is each batch's first path, ``sizes`` the size of
        each part the table was written in (``sized``), which spare searching the table for
        its batches (a large folder's table is most of the cache)."""
        spans = sized_spans(start, end, sizes) if sizes is not None else None
        if spans is None:
            spans = _spans(read, start, end, b"{", b"}")
        if len(spans) != len(firsts) or firsts != sorted(firsts) or not all(type(path) is str for path in firsts):
            raise Corrupt("the per-file table's batches are not the ones its index lists")
        self._read, self._spans, self._firsts = read, spans, firsts
        self._parsed: dict[int, dict[str, list[Any]]] = {}

    def _batch(self, index: int) -> dict[str, list[Any]]:
        batch = self._parsed.get(index)
        if batch is None:
            start, stop = self._spans[index]
            batch = orjson.loads(b"{" + self._read(start, stop) + b"}")
            paths = list(batch)
            following = self._firsts[index + 1] if index + 1 < len(self._firsts) else None
            if not paths or paths[0] != self._firsts[index] or (following is not None and paths[-1] >= following):
                raise Corrupt("a batch of the per-file table is not where its index puts it")
            self._parsed[index] = batch
        return batch

    def _index_of(self, path: str) -> int:
        """The batch that holds ``path``'s row, or would (``batch_of``)."""
        return batch_of(self._firsts, path)

    def __getitem__(self, path: str) -> list[Any]:
        if not self._firsts or path < self._firsts[0]:
            raise KeyError(path)
        return self._batch(self._index_of(path))[path]

    def __iter__(self) -> Iterator[str]:
        for index in range(len(self._spans)):
            yield from self._batch(index)

    def __len__(self) -> int:
        return sum(len(self._batch(index)) for index in range(len(self._spans)))

    def written(
        self, updates: Mapping[str, Any], row: Callable[[Any], object] | None = None
    ) -> tuple[Chunks, list[str]]:
        """The table with ``updates`` applied (a value for each path, made a row by ``row``,
        ``Seen`` by default; None drops the path), and the first path of each batch: a
        batch that no update touches is written as it was read."""
        make = _seen_row if row is None else row
        touched: dict[int, dict[str, object | None]] = {}
        for path, value in updates.items():
            touched.setdefault(self._index_of(path), {})[path] = None if value is None else make(value)
        batches: list[tuple[str, tuple[int, int] | dict[str, Any]]] = []
        for index, span in enumerate(self._spans):
            changes = touched.pop(index, None)
            if changes is None:
                batches.append((self._firsts[index], span))
            elif kept := _updated(self._batch(index), changes):
                batches.append((next(iter(kept)), kept))
        if touched and (kept := _updated({}, touched[0])):  # an empty table: its one batch is new
            batches.append((next(iter(kept)), kept))
        encoded = (self._encoded(batch) for _, batch in batches)
        return Chunks(_in_batches(b"{", encoded, b"}")), [first for first, _ in batches]

    def _encoded(self, batch: tuple[int, int] | dict[str, Any]) -> bytes:
        """A batch's bytes: read again where it was left alone, else encoded."""
        return self._read(*batch) if type(batch) is tuple else orjson.dumps(batch)[1:-1]


def _updated(batch: Mapping[str, list[Any]], changes: Mapping[str, object | None]) -> dict[str, Any]:
    """A batch's rows with ``changes`` applied, sorted by path."""
    rows: dict[str, Any] = dict(batch)
    for path, row in changes.items():
        if row is None:
            rows.pop(path, None)
        else:
            rows[path] = row
    return dict(sorted(rows.items()))


def _seen_row(seen: Seen) -> list[object]:
    """One file's row: its metadata, hash and declaration, and the declaration resolved
    when it declares something.  (A full save encodes one per file: the fields are
    unpacked once, and an empty list of problems is not built by a loop; most files declare
    nothing, compared as a whole with what an empty declaration holds.)"""
    meta, sha256, declaration, resolved = seen
    if resolved is None and declaration == _DECLARES_NOTHING:
        return [*meta, sha256, _NO_DECLARATION]
    encoded = _encode_declaration(declaration)
    if resolved is None or declaration is None:
        return [*meta, sha256, encoded]
    sources, refused = resolved
    problems = [[problem.kind.value, problem.detail] for problem in refused] if refused else []
    return [*meta, sha256, encoded, [sources, problems]]


_NO_DECLARATION: tuple[()] = ()
"""How most files encode, as an empty list: no ``derived_from``, no ``derived_at``, no problem."""
_DECLARES_NOTHING = ((), None, ())
"""A declaration's fields when it declares nothing: no entries, no ``derived_at``, no problem
(equal to ``declarations.NOTHING``, which this module imports only where it decodes: compared
with ``==``, never ``is``)."""


def _encode_declaration(declaration: Declaration | None) -> list[object] | tuple[()] | None:
    if declaration is None:
        return None
    entries, derived_at, problems = declaration.entries, declaration.derived_at, declaration.problems
    if not entries and derived_at is None and not problems:
        return _NO_DECLARATION
    return [list(entries), derived_at, [[kind.value, detail] for kind, detail in problems] if problems else []]


def encode_problem(problem: Problem) -> list[str]:
    return list(problem.row)


# -- reading the cache ---------------------------------------------------------------------


def check_format(data: Any, format: str = FORMAT, versions: tuple[int, ...] = READABLE) -> None:
    if not isinstance(data, dict) or data.get("format") != format:
        raise Corrupt(f"it is not a {format} file")
    if data.get("version") not in versions:
        raise Corrupt(f"unknown version {data.get('version')!r}, this provgraph reads version {versions[-1]}")


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
        if not (type(at) is float and 0.0 <= at <= _LATEST):  # what is written: checked, not converted
            at = None if at is None else date(at)
        since = None if since is None else date(since)
        if moved_to is not None and type(moved_to) is not str:
            raise Corrupt(f"expected text, found {type(moved_to).__name__}")
        edges.append(Edge(source, derived, status_of[status], at, since, moved_to))
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
