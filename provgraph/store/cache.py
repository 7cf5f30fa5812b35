"""The cache, ``.provgraph/cache.json``: what a refresh of an unchanged or slightly changed
folder reads instead of the files.  JSON lines, written whole and replaced atomically: a
head keyed by the package's version, ``SCHEMA``, the root and the reading settings, then
the rows' paths and stats, the rest of the rows a hundred or so to a line, the last
result's edges a column at a time, then the checksum.  A cache
with another key is rebuilt, never read; one that does not decode into valid values raises
``Damaged`` and is never trusted either.  Lines are written one at a time and read in one
call as views of the file's bytes, and the rest of a row is decoded only when asked for
(``RowTable``).
"""

from __future__ import annotations

import gc
import math
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, Mapping, Sequence, Set
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from itertools import accumulate, chain, islice, pairwise
from operator import itemgetter, lt
from typing import Any, NamedTuple
from zlib import crc32

import orjson

from ..declarations import NOTHING, Declaration
from ..model import (
    EDGE_COLUMNS,
    LATEST_DATE,
    Edge,
    EdgeStatus,
    EdgeTable,
    FileMeta,
    Problem,
    ProblemKind,
    as_text,
    column,
)

__all__ = [
    "CACHE_NAME",
    "SCHEMA",
    "Cache",
    "Damaged",
    "FileRow",
    "Last",
    "LockRecord",
    "RowTable",
    "ScannedRows",
    "Watched",
]
__all__ += [
    "checked",
    "checked_date",
    "decode",
    "encode",
    "encode_row",
    "file_rows",
    "hashes_of",
    "lines_of",
    "replaced_rows",
]

CACHE_NAME = "cache.json"
FORMAT = "provgraph-cache"
SCHEMA = 4
"""The layout of the document; with the package's version, part of the cache's key."""

Line = bytes | memoryview
"""A line of the cache as read (a view of the file's bytes) or encoded."""
Resolution = tuple[tuple[str, ...], tuple[Problem, ...]]
"""What ``resolve_entries`` made of a declaration: its sources, and the refused entries."""


class Damaged(Exception):
    """The cache's bytes are not what this provgraph writes; the message says why."""


class FileRow(NamedTuple):
    """What a scan learned about one file, valid while its metadata is unchanged."""

    meta: FileMeta
    sha256: str | None = None
    """Only computed for files that are a source of something."""
    declaration: Declaration | None = None
    """Only for memory (``*.md``) files."""
    resolved: Resolution | None = None
    """The declaration resolved, reused unless it names a wiki link (``declarations.follows_listing``)."""
    meaning: str | None = None
    """Its hash under ``HashRule.MEANING`` when that is not ``sha256``."""


class LockRecord(NamedTuple):
    """The lock the cache was written with; ``canonical``: its bytes are what ``encode_lock`` writes."""

    meta: FileMeta
    sha256: str
    recorded_ns: int
    canonical: bool


class Watched(NamedTuple):
    """A declared source outside the listing as the last scan saw it: ``kind`` is
    ``"file"`` (with its stat), ``"missing"``, or the kind of problem it was refused as."""

    path: str
    kind: str
    meta: FileMeta | None = None


class Last(NamedTuple):
    """The last result as the cache keeps it: its stale entries follow from its edges."""

    file_count: int
    edges: Sequence[Edge]
    """A tuple, or an ``EdgeTable`` (as a scan compares, and as the cache is read)."""
    cycles: tuple[tuple[str, ...], ...]
    problems: tuple[Problem, ...]


@dataclass(frozen=True, slots=True)
class Cache:
    """The cache of one root, decoded but for its rows (``RowTable`` decodes a line of them when asked)."""

    root: str
    settings: str
    scan_started_ns: int
    """The real clock at the start of the scan that wrote it: the racy mark is before it."""
    walk_problems: tuple[Problem, ...]
    lock: LockRecord | None
    rows: RowTable | ScannedRows
    """Path -> ``[size, mtime_ns, ctime_ns, inode, sha256, declaration(, resolved)]``, where
    ``sha256`` is ``[sha256, meaning]`` when its meaning hashes otherwise (``hashes_of``)."""
    refused: dict[str, ProblemKind]
    watched: tuple[Watched, ...]
    last: Last | None
    memory: Mapping[str, tuple[int, int, int, int]]
    """The stat of every memory file the rows hold (``_memory_of`` of a cache read)."""


def _memory_of(rows: RowTable) -> dict[str, tuple[int, int, int, int]]:
    """The stat of the memory files among ``rows`` (with a declaration, even an empty one)."""
    memory = dict(zip(rows.paths, rows.stats, strict=True))
    for path in rows.others:
        del memory[path]
    return memory


class Rows(Mapping[str, FileRow]):
    """The cache's rows (checked when the cache was read), each decoded when a scan asks for it."""

    def __init__(self, rows: Mapping[str, list[Any]]) -> None:
        self._rows = rows

    def __getitem__(self, path: str) -> FileRow:
        return _decode_row(path, self._rows[path])

    def __iter__(self) -> Iterator[str]:
        return iter(self._rows)

    def __len__(self) -> int:
        return len(self._rows)


ROWS_AT_ONCE = 128
"""Rows a line of the cache holds."""


class RowTable(Mapping[str, list[Any]]):
    """The rows of a cache as read: every file's stat at once (the no-change rule compares
    each one), the rest of its row decoded and checked a line of ``ROWS_AT_ONCE`` rows at
    a time, when first asked for (``Damaged`` then, for a line not as written).  A process
    that patches a large folder asks about a handful of files: decoding every row would
    cost it more than the patch.  A line none of whose rows changed is written back as read."""

    __slots__ = ("_decoded", "_others", "lines", "others", "paths", "stats")

    def __init__(
        self, paths: list[str], stats: list[tuple[int, int, int, int]], others: list[str], lines: list[Line]
    ) -> None:
        self.paths, self.stats, self.others, self.lines = paths, stats, others, lines
        """Sorted paths, their stats, the paths whose row holds no declaration, the lines of the rest."""
        self._others = frozenset(others)
        self._decoded: dict[int, list[list[Any]]] = {}

    def _at(self, path: str) -> int:
        at = bisect_left(self.paths, path)
        if at == len(self.paths) or self.paths[at] != path:
            raise KeyError(path)
        return at

    def __getitem__(self, path: str) -> list[Any]:
        at = self._at(path)
        return [*self.stats[at], *self._line(at // ROWS_AT_ONCE)[at % ROWS_AT_ONCE]]

    def stat(self, path: str) -> tuple[int, int, int, int]:
        """The stat of ``path``'s row, its line left undecoded."""
        return self.stats[self._at(path)]

    def __contains__(self, path: object) -> bool:
        if type(path) is not str:
            return False
        at = bisect_left(self.paths, path)
        return at < len(self.paths) and self.paths[at] == path

    def __iter__(self) -> Iterator[str]:
        return iter(self.paths)

    def __len__(self) -> int:
        return len(self.paths)

    def _line(self, number: int) -> list[list[Any]]:
        rests = self._decoded.get(number)
        if rests is None:
            paths = self.paths[number * ROWS_AT_ONCE : (number + 1) * ROWS_AT_ONCE]
            try:
                rests = _checked_rests(_loaded(self.lines[number]), paths, self._others)
            except (TypeError, ValueError, KeyError, IndexError, AttributeError) as error:
                raise Damaged("its values are not what provgraph writes") from error
            self._decoded[number] = rests
        return rests

    def check(self) -> None:
        """Decode every line: ``Damaged`` when one is not as written."""
        for number in range(len(self.lines)):
            self._line(number)

    def replaced(self, changes: Mapping[str, list[Any] | None]) -> RowTable:
        """A table with the rows in ``changes`` written over (None: the row dropped): the
        lines no change reaches are kept as they are, and when a row is added or dropped,
        the lines before the first one it moves."""
        if all(row is not None and path in self for path, row in changes.items()):
            return self._written_over(changes)
        start = min(map(partial(bisect_left, self.paths), changes)) // ROWS_AT_ONCE * ROWS_AT_ONCE
        rows = {path: self[path] for path in self.paths[start:]}
        for path, row in changes.items():
            if row is None:
                rows.pop(path, None)
            else:
                rows[path] = row
        moved = sorted(rows)
        others = self.others[: bisect_right(self.others, self.paths[start - 1])] if start else []
        table = RowTable(
            self.paths[:start] + moved,
            self.stats[:start] + [_STAT(rows[path]) for path in moved],
            others + [path for path in moved if rows[path][5] is None],
            self.lines[: start // ROWS_AT_ONCE] + list(_row_lines(rows, moved)),
        )
        table._decoded = {number: rests for number, rests in self._decoded.items() if number < start // ROWS_AT_ONCE}
        return table

    def _written_over(self, changes: Mapping[str, list[Any] | None]) -> RowTable:
        """``replaced`` when every row of ``changes`` is one of the table's."""
        stats, lines, others, decoded = list(self.stats), list(self.lines), set(self.others), dict(self._decoded)
        written: dict[int, list[list[Any]]] = {}
        for path, row in changes.items():
            assert row is not None
            at = self._at(path)
            number = at // ROWS_AT_ONCE
            if number not in written:
                written[number] = list(self._line(number))
            stats[at], written[number][at % ROWS_AT_ONCE] = _STAT(row), row[4:]
            if row[5] is None:
                others.add(path)
            else:
                others.discard(path)
        for number, rests in written.items():
            decoded[number], lines[number] = rests, _line(rests)
        table = RowTable(self.paths, stats, sorted(others), lines)
        table._decoded = decoded
        return table


class ScannedRows(Mapping[str, list[Any]]):
    """A scan's rows as the cache holds them, each encoded (``encode_row``) when asked for,
    and into the lines of the cache once: the cache's write and the first patch both use
    them, and a large folder's rows are never held as encoded lists.  Patched, they
    become a ``RowTable``."""

    __slots__ = ("_lines", "found", "others", "paths")

    def __init__(self, found: Mapping[str, FileRow]) -> None:
        self.found, self.paths = found, sorted(found)
        self.others = [path for path in self.paths if found[path].declaration is None]
        """The paths whose row holds no declaration: sources other than memory files."""
        self._lines: list[Line] | None = None

    def __getitem__(self, path: str) -> list[Any]:
        return encode_row(self.found[path])

    def __contains__(self, path: object) -> bool:
        return path in self.found

    def stat(self, path: str) -> FileMeta:
        """The stat of ``path``'s row, the rest of it left unencoded."""
        return self.found[path].meta

    def __iter__(self) -> Iterator[str]:
        return iter(self.paths)

    def __len__(self) -> int:
        return len(self.paths)

    def lines(self) -> list[Line]:
        """The rows past their stats, ``ROWS_AT_ONCE`` a line, encoded when first asked for."""
        if self._lines is None:
            self._lines = list(_row_lines(self, self.paths))
        return self._lines

    def table(self) -> RowTable:
        return RowTable(self.paths, [self.found[path].meta for path in self.paths], self.others, self.lines())


def file_rows(rows: RowTable | ScannedRows) -> Mapping[str, FileRow]:
    """``rows`` as a scan reads them (``Rows``)."""
    return rows.found if isinstance(rows, ScannedRows) else Rows(rows)


def replaced_rows(rows: RowTable | ScannedRows, changes: Mapping[str, list[Any] | None]) -> RowTable:
    """``rows`` with ``changes`` written over (``RowTable.replaced``)."""
    return _table(rows).replaced(changes)


def _table(rows: RowTable | ScannedRows) -> RowTable:
    return rows.table() if isinstance(rows, ScannedRows) else rows


def checked(rows: RowTable | ScannedRows) -> None:
    """Every row decoded and checked (``Damaged``), before a scan that may ask for any."""
    if type(rows) is RowTable:
        rows.check()


def encode(cache: Cache, version: str) -> Iterator[Line]:
    """The lines written by provgraph ``version``: the head, the rows' paths, their stats,
    the rest of the rows (``ROWS_AT_ONCE`` a line), the last result's edges a column at a
    time, and the CRC-32 of every byte before it (against damage into valid values, and tearing)."""
    lock, last, rows = cache.lock, cache.last, _table(cache.rows)
    paths, others, stats, lines = rows.paths, rows.others, chain.from_iterable(rows.stats), rows.lines
    head = {
        "format": FORMAT,
        "provgraph": version,
        "schema": SCHEMA,
        "root": as_text(cache.root),
        "settings": cache.settings,
        "scan_started_ns": cache.scan_started_ns,
        "walk_problems": [list(problem.row) for problem in cache.walk_problems],
        "lock": None if lock is None else [*lock.meta, lock.sha256, lock.recorded_ns, lock.canonical],
        "refused": {path: kind.value for path, kind in sorted(cache.refused.items())},
        "watched": [[item.path, item.kind, None if item.meta is None else [*item.meta]] for item in cache.watched],
        "last": None if last is None else _encoded_last(last),
        "others": others,
        "row_count": len(paths),
        "edge_count": 0 if last is None else len(last.edges),
    }
    edges = () if last is None else last.edges
    columns = (_pieces(list(column(edges, name)), 1) for name in EDGE_COLUMNS)
    check = 0
    for data in chain([_line(head)], _pieces(paths, 1), _pieces(list(stats), 4), lines, *columns):
        check = crc32(data, check)
        yield data
    yield b"%d\n" % check


VALUES_AT_ONCE = 4096
"""Paths, stats or edges a line of the cache holds: orjson sets aside many times the size of
what it encodes while it encodes, which for one line of every path would be a large part of
a process's peak memory."""


def _pieces(values: list[Any], width: int) -> Iterator[bytes]:
    """``values`` as lines of ``VALUES_AT_ONCE`` files' values (``width`` values each)."""
    size = VALUES_AT_ONCE * width
    return (_line(values[at : at + size]) for at in range(0, len(values), size))


def _row_lines(rows: Mapping[str, list[Any]], paths: list[str]) -> Iterator[bytes]:
    """The rows past their stats, ``ROWS_AT_ONCE`` a line, in the order of ``paths``."""
    for at in range(0, len(paths), ROWS_AT_ONCE):
        yield _line([rows[path][4:] for path in paths[at : at + ROWS_AT_ONCE]])


def _line(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_APPEND_NEWLINE)


def _encoded_last(last: Last) -> dict[str, object]:
    return {
        "files": last.file_count,
        "cycles": [list(cycle) for cycle in last.cycles],
        "problems": [list(problem.row) for problem in last.problems],
    }


def encode_row(row: FileRow) -> list[Any]:
    """One file's row: its stat, hash, declaration, and that declaration resolved."""
    meta, sha256, declaration, resolved, meaning = row
    encoded = _encode_declaration(declaration)
    hashed = sha256 if meaning is None else [sha256, meaning]
    if resolved is None or declaration is None or not encoded:
        return [*meta, hashed, encoded]
    sources, refused = resolved
    return [*meta, hashed, encoded, [list(sources), [[problem.kind.value, problem.detail] for problem in refused]]]


def hashes_of(row: list[Any]) -> tuple[str | None, str | None]:
    """A row's sha256 and, when it differs, its meaning's (``FileRow.meaning``)."""
    hashed = row[4]
    return (hashed, None) if type(hashed) is not list else (hashed[0], hashed[1])


def _encode_declaration(declaration: Declaration | None) -> list[object] | None:
    if declaration is None:
        return None
    entries, derived_at, problems = declaration.entries, declaration.derived_at, declaration.problems
    if not entries and derived_at is None and not problems:
        return []
    return [list(entries), derived_at, [[kind.value, detail] for kind, detail in problems]]


def lines_of(data: bytes) -> Iterator[memoryview]:
    """The lines of ``data``, each with its newline, as views of it: a cache file is read in
    one call and its lines are not copied (reading it a line at a time costs many calls)."""
    view, at = memoryview(data), 0
    while at < len(data):
        end = data.find(b"\n", at) + 1 or len(data)
        yield view[at:end]
        at = end


def decode(lines: Iterable[Line], version: str, root: str, settings: str) -> Cache | None:
    """The cache in ``lines`` (``lines_of`` the file's bytes); None when it is keyed for
    another provgraph ``version``, schema, root or settings; ``Damaged`` when it is not a
    valid cache at all.  The rest of each row is checked when first asked for (``RowTable``)."""
    lines = iter(lines)
    first = next(lines, b"")
    head = _loaded(first)
    if not isinstance(head, dict) or head.get("format") != FORMAT:
        raise Damaged("it is not a provgraph cache")
    if "schema" not in head and head.get("version") in (1, 2, 3):
        return None  # provgraph's first layout: rebuilt like a cache of another version, not set aside
    key = (head.get("provgraph"), head.get("schema"), head.get("root"), head.get("settings"))
    if key != (version, SCHEMA, root, settings):
        return None
    with _collector_paused():
        try:
            return _decode(head, _Body(lines, crc32(first)))
        except (TypeError, ValueError, KeyError, IndexError, AttributeError) as error:
            raise Damaged("its values are not what provgraph writes") from error


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused while the cache's values are built: they hold
    no cycles, and the collector, run every few hundred new lists, would go through all the
    values built so far again and again (a large part of the decoding time)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class _Body:
    """The lines after the head, each taken into the checksum; ``end`` checks the checksum line."""

    def __init__(self, lines: Iterator[Line], check: int) -> None:
        self._lines, self._check = lines, check

    def raw(self) -> Line:
        line = next(self._lines, b"")
        if line[-1:] != b"\n":
            raise Damaged("its checksum does not match its bytes")  # cut short
        self._check = crc32(line, self._check)
        return line

    def value(self) -> Any:
        return _loaded(self.raw())

    def values(self, count: int) -> list[Any]:
        """The lists of the lines that hold ``count`` files' values, joined."""
        joined: list[Any] = []
        for _ in range(-(-count // VALUES_AT_ONCE)):
            value = self.value()
            if type(value) is not list:
                raise Damaged("a line of paths, stats or edges must be a list")
            joined += value
        return joined

    def end(self) -> None:
        line = next(self._lines, b"")
        if line != b"%d\n" % self._check or next(self._lines, None) is not None:
            raise Damaged("its checksum does not match its bytes")


def _loaded(line: Line) -> Any:
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError as error:
        raise Damaged("it is not JSON") from error


def _decode(head: dict[str, Any], body: _Body) -> Cache:
    """The cache after its head: every line is read and checksummed before any value is trusted."""
    count, edges = _whole(head["row_count"]), _whole(head["edge_count"])
    paths, stats = body.values(count), body.values(count)
    lines = _copied([body.raw() for _ in range(-(-count // ROWS_AT_ONCE))])
    columns = [body.values(edges) for _ in EDGE_COLUMNS]
    body.end()
    others = head["others"]
    if type(others) is not list or len(paths) != count or any(len(values) != edges for values in columns):
        raise Damaged("a cache's counts must be those of its paths and edges")
    if not set(map(type, chain(paths, others))) <= {str} or not _ascending(paths) or not _ascending(others):
        raise Damaged("a cache's paths must be distinct text, sorted")
    if len(stats) != 4 * len(paths) or not set(map(type, stats)) <= {int}:
        raise Damaged("a file's stat must be four whole numbers")
    at = iter(stats)
    rows = RowTable(paths, list(zip(at, at, at, at, strict=True)), others, lines)
    if not all(map(rows.__contains__, others)):
        raise Damaged("the other sources must be rows")
    last = head["last"]
    if last is None and any(columns):
        raise Damaged("edges without a last result")
    return Cache(
        root=_text(head["root"]),
        settings=_text(head["settings"]),
        scan_started_ns=_whole(head["scan_started_ns"]),
        walk_problems=tuple(map(_problem, head["walk_problems"])),
        lock=_lock_record(head["lock"]),
        rows=rows,
        refused={_text(path): ProblemKind(kind) for path, kind in head["refused"].items()},
        watched=tuple(map(_watched, head["watched"])),
        last=None if last is None else _last(last, _edge_table(*columns)),
        memory=_memory_of(rows),
    )


def _copied(lines: list[Line]) -> list[Line]:
    """``lines`` as views of one copy of their bytes: the rows of a cache kept by a
    long-lived process keep alive the bytes of their lines, not the whole file's."""
    copy = memoryview(b"".join(lines))
    return [copy[start:end] for start, end in pairwise(accumulate(map(len, lines), initial=0))]


def _ascending(values: list[str]) -> bool:
    """Whether ``values`` are sorted and distinct."""
    return all(map(lt, values, islice(values, 1, None)))


def _checked_rests(rests: Any, paths: list[str], others: Set[str]) -> list[list[Any]]:
    """One line of rows past their stats, of the types provgraph writes, a column at a time."""
    if type(rests) is not list or len(rests) != len(paths):
        raise Damaged("a line of the cache must hold its rows")
    if not all(type(rest) is list and len(rest) in (2, 3) for rest in rests):
        raise Damaged("a file's row must be a list of six or seven values")
    hashed = [rest[0] for rest in rests]
    types = set(map(type, hashed))
    if not types <= {str, type(None), list}:
        raise Damaged("a file's sha256 must be text")
    if list in types and not all(type(pair) is not list or list(map(type, pair)) == [str, str] for pair in hashed):
        raise Damaged("a file's sha256 and its meaning's must be text")
    if not set(type(rest[1]) for rest in rests) <= {list, type(None)}:
        raise Damaged("a file's declaration must be a list")
    for path, rest in zip(paths, rests, strict=True):
        if (rest[1] is None) != (path in others):
            raise Damaged("the other sources must be the rows without a declaration")
        if rest[1] or len(rest) == 3:
            _check_declared(rest)
    return rests


def _check_declared(rest: list[Any]) -> None:
    """A row's declaration and its resolution of the shapes ``encode_row`` writes."""
    entries, derived_at, problems = rest[1]
    if not (set(map(type, entries)) <= {str} and (derived_at is None or type(derived_at) is str)):
        raise Damaged("a declaration's entries and derived_at must be text")
    if len(rest) == 3:
        sources, refused = rest[2]
        if not set(map(type, sources)) <= {str}:
            raise Damaged("a declaration's sources must be text")
        problems = [*problems, *refused]
    for kind, detail in problems:
        if kind not in _KINDS or type(detail) is not str:
            raise Damaged("a declaration's problem must be a kind and text")


_KINDS = frozenset(kind.value for kind in ProblemKind)
_STAT = itemgetter(0, 1, 2, 3)


def _decode_row(path: str, row: list[Any]) -> FileRow:
    """A row as ``FileRow``: its values' types were checked when the cache was read."""
    declaration = row[5]
    if declaration == []:
        declaration = NOTHING
    elif declaration is not None:
        entries, derived_at, problems = declaration
        problems = tuple((ProblemKind(kind), detail) for kind, detail in problems)
        declaration = Declaration(tuple(entries), derived_at, problems)
    resolved = None
    if len(row) == 7:
        sources, refused = row[6]
        resolved = (tuple(sources), tuple(Problem(path, ProblemKind(kind), detail) for kind, detail in refused))
    sha256, meaning = hashes_of(row)
    return FileRow(FileMeta._make(row[:4]), sha256, declaration, resolved, meaning)


def _lock_record(data: object) -> LockRecord | None:
    if data is None:
        return None
    if not isinstance(data, list) or len(data) != 7 or type(data[6]) is not bool:
        raise Damaged("the lock's record must hold its stat, its sha256, a time and a flag")
    *stat, sha256, recorded_ns, canonical = data
    return LockRecord(FileMeta(*map(_whole, stat)), _text(sha256), _whole(recorded_ns), canonical)


def _watched(data: list[Any]) -> Watched:
    path, kind, meta = data
    if kind not in _WATCHED_KINDS:
        raise Damaged(f"unknown kind of watched source {kind!r}")
    if (kind == "file") != (meta is not None):
        raise Damaged("a watched file must hold its stat, and only a file")
    return Watched(_text(path), kind, None if meta is None else FileMeta(*map(_whole, meta)))


_WATCHED_KINDS = frozenset({"file", "missing", *(kind.value for kind in ProblemKind)})


def _edge_table(
    source: list[Any], derived: list[Any], status: list[Any], at: list[Any], since: list[Any], moved_to: list[Any]
) -> EdgeTable:
    """The last result's edges from their columns, checked a column at a time (no ``Edge`` is made)."""
    if len({len(values) for values in (source, derived, status, at, since, moved_to)}) != 1:
        raise Damaged("an edge's columns must be as long as each other")
    if not set(map(type, chain(source, derived))) <= {str} or not set(map(type, moved_to)) <= {str, type(None)}:
        raise Damaged("an edge's files must be text")
    return EdgeTable(source, derived, [_STATUS[value] for value in status], _dates(at), _dates(since), moved_to)


def _dates(values: list[Any]) -> list[float | None]:
    """Dates in epoch seconds as provgraph writes them, checked a column at a time; ``Damaged`` else."""
    types = set(map(type, values))
    if not types <= {float, int, type(None)}:
        raise Damaged("a date must be a number")
    if int in types:
        values = [None if value is None else float(value) for value in values]
    given = [value for value in values if value is not None]
    if given and not (min(given) >= 0 and max(given) <= LATEST_DATE and all(map(math.isfinite, given))):
        raise Damaged("a date out of range")
    return values


_STATUS = {status.value: status for status in EdgeStatus}


def _last(data: dict[str, Any], edges: EdgeTable) -> Last:
    return Last(
        file_count=_whole(data["files"]),
        edges=edges,
        cycles=tuple(tuple(map(_text, cycle)) for cycle in data["cycles"]),
        problems=tuple(map(_problem, data["problems"])),
    )


def _problem(row: list[Any]) -> Problem:
    path, kind, detail = row
    return Problem(_text(path), ProblemKind(kind), _text(detail))


def checked_date(value: object) -> float:
    """A date in epoch seconds as provgraph writes it; ``Damaged`` for anything else."""
    if type(value) not in (int, float):
        raise Damaged(f"a date must be a number, not {value!r}")
    number = float(value)  # type: ignore[arg-type]
    if not (math.isfinite(number) and 0 <= number <= LATEST_DATE):
        raise Damaged(f"a date out of range: {value!r}")
    return number


def _whole(value: object) -> int:
    if type(value) is not int:
        raise Damaged(f"expected a whole number, found {type(value).__name__}")
    return value


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise Damaged(f"expected text, found {type(value).__name__}")
    return value
