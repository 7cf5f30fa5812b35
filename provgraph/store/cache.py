"""The cache, ``.provgraph/cache.json``: what a refresh of an unchanged or slightly changed
folder reads instead of the files.  JSON lines, written whole and replaced atomically: a
head keyed by the package's version, ``SCHEMA``, the root and the reading settings, then
the rows and the last result's edges a few thousand to a line, then the checksum.  A cache
with another key is rebuilt, never read; one that does not decode into valid values raises
``Damaged`` and is never trusted either.  Lines are written and read one at a time, so
that a large folder's cache is never held whole, as bytes, beside its values.
"""

from __future__ import annotations

import gc
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import chain, islice
from operator import itemgetter
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

__all__ = ["CACHE_NAME", "SCHEMA", "Cache", "Damaged", "FileRow", "Last", "LockRecord", "Rows", "Watched"]
__all__ += ["checked_date", "decode", "encode", "encode_row", "hashes_of"]

CACHE_NAME = "cache.json"
FORMAT = "provgraph-cache"
SCHEMA = 3
"""The layout of the document; with the package's version, part of the cache's key."""

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
    """The cache of one root, decoded but for its rows (``Rows`` decodes one when asked)."""

    root: str
    settings: str
    scan_started_ns: int
    """The real clock at the start of the scan that wrote it: the racy mark is before it."""
    walk_problems: tuple[Problem, ...]
    lock: LockRecord | None
    rows: dict[str, list[Any]]
    """Path -> ``[size, mtime_ns, ctime_ns, inode, sha256, declaration(, resolved)]``, where
    ``sha256`` is ``[sha256, meaning]`` when its meaning hashes otherwise (``hashes_of``)."""
    refused: dict[str, ProblemKind]
    watched: tuple[Watched, ...]
    last: Last | None
    memory: Mapping[str, tuple[int, int, int, int]]
    """The stat of every memory file the rows hold (``_memory_of`` of a cache read)."""


def _memory_of(rows: Mapping[str, list[Any]]) -> dict[str, tuple[int, int, int, int]]:
    """The stat of the memory files among ``rows`` (with a declaration, even an empty one)."""
    return {path: _STAT(row) for path, row in rows.items() if row[5] is not None}


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


def encode(cache: Cache, version: str) -> Iterator[bytes]:
    """The lines written by provgraph ``version``: the head, the rows (an object of
    ``AT_ONCE`` rows a line), the last result's edges (a list of ``AT_ONCE`` a line), and
    the CRC-32 of every byte before it (against damage into valid values, and tearing)."""
    lock, last = cache.lock, cache.last
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
    }
    check = 0
    for line in chain([head], _batches(iter(cache.rows.items()), dict), _edge_batches(last)):
        data = orjson.dumps(line, option=orjson.OPT_APPEND_NEWLINE)
        check = crc32(data, check)
        yield data
    yield b"%d\n" % check


AT_ONCE = 4096
"""Rows, or edges, a line of the cache holds."""


def _batches(items: Iterator[Any], kind: Callable[[Iterable[Any]], Any]) -> Iterator[Any]:
    while batch := kind(islice(items, AT_ONCE)):
        yield batch


def _edge_batches(last: Last | None) -> Iterator[list[tuple[object, ...]]]:
    edges = () if last is None else last.edges
    return _batches(zip(*(column(edges, name) for name in EDGE_COLUMNS), strict=True), list)


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


def decode(lines: Iterable[bytes], version: str, root: str, settings: str) -> Cache | None:
    """The cache in ``lines`` (an open file reads one at a time); None when it is keyed for
    another provgraph ``version``, schema, root or settings; ``Damaged`` when it is not a
    valid cache at all."""
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
        rows, edges = _body(lines, crc32(first))
        try:
            return _decode(head, rows, edges)
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


def _body(lines: Iterator[bytes], check: int) -> tuple[dict[str, list[Any]], list[list[Any]]]:
    """The rows and the edges' columns of the lines after the head, up to the checksum that ends them."""
    rows: dict[str, list[Any]] = {}
    columns: list[list[Any]] = [[] for _ in EDGE_COLUMNS]
    for line in lines:
        value = _loaded(line)
        if type(value) is int:
            if value != check or next(lines, None) is not None:
                break
            return rows, columns
        check = crc32(line, check)
        if type(value) is dict:
            rows.update(value)
        elif type(value) is list and all(type(edge) is list and len(edge) == len(EDGE_COLUMNS) for edge in value):
            for kept, values in zip(columns, zip(*value, strict=True), strict=False):  # an empty line: none
                kept += values
        else:
            raise Damaged("a line of the cache must hold rows or edges")
    raise Damaged("its checksum does not match its bytes")


def _loaded(line: bytes) -> Any:
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError as error:
        raise Damaged("it is not JSON") from error


def _decode(head: dict[str, Any], rows: dict[str, list[Any]], edges: list[list[Any]]) -> Cache:
    if not all(type(row) is list and len(row) in (6, 7) for row in rows.values()):
        raise Damaged("a file's row must be a list of six or seven values")
    _check_rows(rows)
    last = head["last"]
    if last is None and edges[0]:
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
        last=None if last is None else _last(last, _edge_table(*edges)),
        memory=_memory_of(rows),
    )


def _check_rows(rows: dict[str, list[Any]]) -> None:
    """Every row's values of the types provgraph writes, a column at a time."""
    if not set(map(type, chain.from_iterable(map(_STAT, rows.values())))) <= {int}:
        raise Damaged("a file's stat must be four whole numbers")
    hashed = list(map(itemgetter(4), rows.values()))
    types = set(map(type, hashed))
    if not types <= {str, type(None), list}:
        raise Damaged("a file's sha256 must be text")
    if list in types and not all(type(pair) is not list or list(map(type, pair)) == [str, str] for pair in hashed):
        raise Damaged("a file's sha256 and its meaning's must be text")
    if not set(map(type, map(itemgetter(5), rows.values()))) <= {list, type(None)}:
        raise Damaged("a file's declaration must be a list")
    for row in rows.values():
        if row[5] or len(row) == 7:
            _check_declared(row)


def _check_declared(row: list[Any]) -> None:
    """A row's declaration and its resolution of the shapes ``encode_row`` writes."""
    entries, derived_at, problems = row[5]
    if not (set(map(type, entries)) <= {str} and (derived_at is None or type(derived_at) is str)):
        raise Damaged("a declaration's entries and derived_at must be text")
    if len(row) == 7:
        sources, refused = row[6]
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
    if not set(map(type, chain(source, derived))) <= {str} or not set(map(type, moved_to)) <= {str, type(None)}:
        raise Damaged("an edge's files must be text")
    return EdgeTable(source, derived, [_STATUS[value] for value in status], _dates(at), _dates(since), moved_to)


def _dates(values: list[Any]) -> list[float | None]:
    return [None if value is None else checked_date(value) for value in values]


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
