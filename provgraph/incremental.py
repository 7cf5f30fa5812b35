"""When the last result still holds, and how to patch it after a small change.

Staleness depends only on the content of the memory files and their sources, and on the
lock's stamps; the cache holds what the last scan saw of each.  **Nothing changed**
(``unchanged``) when the walk meets the same problems, every memory file has the stat its
row holds and none is racy (git's racy-clean rule), the lock is the same, and every source
outside the listing looks as it did.  **A small change** (``Patch``) when the same memory
files are listed and nothing refused is involved: only the changed files are read again and
only the derived files they reach compared again.  Anything else: the full scan answers.

Pure: how a file is looked at or read again is passed in.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Collection, Mapping, Sequence, Set
from datetime import datetime
from itertools import compress
from operator import attrgetter, itemgetter
from typing import Any, NamedTuple, Protocol

import orjson

from .lineage import Children, find_cycles, propagate
from .model import (
    EDGE_COLUMNS,
    Edge,
    EdgeStatus,
    EdgeTable,
    FileMeta,
    Problem,
    ProblemKind,
    Report,
    Snapshot,
    SourceState,
    broken_edges,
    by_content,
    column,
)
from .stamps import Derivation, reconcile
from .store.cache import Cache, FileRow, Last, ScannedRows, Watched, encode_row, hashes_of, replaced_rows
from .store.lock import HEADER_BYTES, Record, decode_stamps, encode_lock, records_start

__all__ = ["Declared", "Index", "LockLines", "Patch", "Rereading", "changed_files", "newest", "patch", "patched_cache"]
__all__ += ["scanned_cache", "unchanged", "watched_sources"]

Declared = tuple[tuple[str, ...], str | None]
"""What a derived file declares: its resolved sources (empty: it declares none) and ``derived_at``."""

SourceStat = Callable[[str], Watched | None]
"""How a source outside the listing looks now (None when it cannot be looked at)."""


def newest(listing: Mapping[str, tuple[int, int, int, int]]) -> int:
    """The latest mtime or ctime of the files (size, mtime_ns, ctime_ns, inode), in ns (0 for none)."""
    return max(map(max, map(_TIMES, listing.values())), default=0)


_TIMES = itemgetter(1, 2)


def unchanged(
    cache: Cache,
    listing: Mapping[str, FileMeta],
    walk_problems: tuple[Problem, ...],
    racy_mark: int,
    newest_listed: int,
    lock_unchanged: Callable[[], bool],
    stat_source: SourceStat,
) -> bool:
    """Whether nothing the last result depends on can have changed.  ``racy_mark`` is the
    cache's scan start less the racy window; ``newest_listed``, ``newest(listing)``."""
    if cache.last is None or newest_listed >= racy_mark or walk_problems != cache.walk_problems:
        return False
    if listing != cache.memory or not lock_unchanged():
        return False
    return all(_as_before(stat_source(before.path), before, racy_mark) for before in cache.watched)


def _as_before(now: Watched | None, before: Watched, racy_mark: int) -> bool:
    return now == before and (now.meta is None or max(now.meta.mtime_ns, now.meta.ctime_ns) < racy_mark)


def changed_files(
    cache: Cache, listing: Mapping[str, FileMeta], racy_mark: int, newest_row: int | None = None
) -> set[str] | None:
    """The memory files whose stat is not the one their row holds, or that are racy; None
    when the memory files are not the ones the cache lists (added, removed, renamed).
    ``newest_row``, ``newest(cache.memory)`` when the caller has it, spares the search
    for racy rows when none can be."""
    memory = cache.memory
    if listing.keys() != memory.keys():
        return None
    moved = {path for path, meta in listing.items() if memory[path] != meta}
    if newest_row is not None and newest_row < racy_mark:
        return moved
    return moved | {path for path, meta in memory.items() if meta[1] >= racy_mark or meta[2] >= racy_mark}


def watched_sources(
    sources: Collection[str], listing: Collection[str], refused: Mapping[str, ProblemKind], rows: Mapping[str, FileMeta]
) -> tuple[Watched, ...]:
    """What to look at again outside the listing: every declared or refused source that is
    not a memory file listed, with what it was (``rows`` holds the stat of those that were files)."""
    watched = []
    for path in sorted((set(sources) | refused.keys()) - set(listing)):
        kind, meta = refused.get(path), rows.get(path)
        if kind is not None:
            watched.append(Watched(path, kind.value))
        else:
            watched.append(Watched(path, "missing") if meta is None else Watched(path, "file", meta))
    return tuple(watched)


def scanned_cache(
    root: str,
    settings: str,
    started_ns: int,
    walk_problems: tuple[Problem, ...],
    rows: Mapping[str, FileRow],
    refused: Mapping[str, ProblemKind],
    report: Report,
) -> Cache:
    """The cache of a full scan that started at ``started_ns`` and learned ``rows``."""
    scanned = ScannedRows(rows)
    memory = {path: rows[path].meta for path in scanned.paths if rows[path].declaration is not None}  # listed
    others = {path: row.meta for path, row in rows.items() if path not in memory}
    watched, last = _last(report, memory, refused, others)
    return Cache(root, settings, started_ns, walk_problems, None, scanned, dict(refused), watched, last, memory)


def _last(
    report: Report, listing: Collection[str], refused: Mapping[str, ProblemKind], others: Mapping[str, FileMeta]
) -> tuple[tuple[Watched, ...], Last]:
    """What a cache holds of ``report``: the sources to watch and the last result."""
    watched = watched_sources(set(column(report.edges, "source")), listing, refused, others)
    return watched, Last(report.file_count, report.edges, report.cycles, report.problems)


class Index(NamedTuple):
    """The last result's edges looked up by file.  A patch asks about a handful of files, so
    each lookup scans a column or two (``Children`` indexes every edge only after many):
    indexing every edge up front would cost a process more than the patch itself."""

    edges: Sequence[Edge]
    children: Mapping[str, list[str]]
    broken: tuple[Edge, ...]

    @classmethod
    def of(cls, edges: Sequence[Edge]) -> Index:
        return cls(edges, Children(edges), broken_edges(edges))

    def declared_by(self, paths: Collection[str]) -> list[Edge]:
        """The edges of the derived files among ``paths``, in the result's order."""
        edges = self.edges
        return [edges[at] for at, derived in enumerate(column(edges, "derived")) if derived in paths]


class Rereading(Protocol):
    """What a patch needs of ``scan.Rescan``: the changed files read again as a full scan reads them."""

    @property
    def listing(self) -> Mapping[str, FileMeta]: ...

    @property
    def seen(self) -> Mapping[str, FileRow]: ...

    @property
    def problems(self) -> list[Problem]: ...

    def declaration(self, path: str, remembered: bool) -> Declared | None: ...

    def source(self, path: str) -> SourceState | None: ...


class Patch(NamedTuple):
    """The next result, the lock's next bytes in pieces (None: unchanged), and the rows read again."""

    report: Report
    lock: list[bytes | memoryview] | None
    rows: dict[str, FileRow | None]
    """The rows to write over the cache's (None: drop the row)."""


def patch(
    cache: Cache, index: Index, lock: LockLines, rescan: Rereading, changed: set[str], now: datetime, root: str
) -> Patch | None:
    """The last result with the ``changed`` files read again (``rescan``), or None when the
    change is not one a patch handles (the full scan answers then)."""
    last = cache.last
    if last is None or cache.refused:
        return None
    redeclared = {}
    for path in sorted(changed.intersection(rescan.listing)):
        found = rescan.declaration(path, lock.has(path))
        if found is None:
            return None
        redeclared[path] = found
    declaring = [path for path, (sources, _) in redeclared.items() if sources or lock.has(path)]
    compared = {
        path: redeclared[path] if path in redeclared else _declared(path, cache.rows[path])
        for path in _affected(index, changed, declaring)
    }
    sources = _source_states(cache.rows, rescan, compared, changed)
    if sources is None:
        return None
    contents: Mapping[str, tuple[str, ...]] | None = {}
    if any(state.sha256 is None for state in sources.values()):
        contents = _contents(cache.rows, rescan, changed)
    records = lock.derivations(compared)
    if contents is None or records is None:
        return None
    declarations = {path: found for path, (found, _) in compared.items() if found}
    snapshot: Snapshot[object] = Snapshot(
        files=tuple(path for path in compared if path in rescan.listing),  # reconcile asks about no other file
        declarations=declarations,
        derived_at={path: compared[path][1] for path in declarations},
        sources=sources,
        problems=(),
        seen={},
        contents=contents,
    )
    updated, new_edges = reconcile(records, snapshot, now.timestamp())
    next_lock = None if updated == records else lock.replaced(compared, updated)
    if updated != records and next_lock is None:
        return None
    old_edges = index.declared_by(compared)
    edges = _joined(last.edges, compared, new_edges)
    cycles = last.cycles if _pairs(old_edges) == _pairs(new_edges) else find_cycles(edges)
    problems = [problem for problem in rescan.problems if problem.path in changed]
    kept = (problem for problem in last.problems if _still_declared(problem, cache.rows, changed))
    report = Report(
        root=root,
        scanned_at=now,
        file_count=len(rescan.listing),
        edges=edges,
        stale=propagate(edges),
        cycles=cycles,
        problems=tuple(sorted({*kept, *problems, *cache.walk_problems}, key=_problem_order)),
    )
    rows: dict[str, FileRow | None] = dict(rescan.seen)
    sources_now = set(column(edges, "source"))
    for path in cache.rows.others:
        if path not in sources_now or (path in changed and path not in rescan.seen):
            rows[path] = None  # no longer a source, or gone
    return Patch(report, next_lock, rows)


def patched_cache(cache: Cache, found: Patch, started_ns: int, listing: dict[str, FileMeta]) -> Cache:
    """The cache after ``found``: its rows written over, the last result replaced."""
    changes = {path: None if row is None else encode_row(row) for path, row in found.rows.items()}
    rows = replaced_rows(cache.rows, changes)
    others = {path: FileMeta._make(rows.stat(path)) for path in rows.others}
    watched, last = _last(found.report, listing, {}, others)
    return Cache(
        cache.root, cache.settings, started_ns, cache.walk_problems, cache.lock, rows, {}, watched, last, listing
    )


def others_changed(cache: Cache, stat_source: SourceStat, racy_mark: int) -> set[str]:
    """The files the rows hold outside the listing (sources of another kind) that are no
    longer the file their row describes, or that are racy."""
    changed = set()
    for path in cache.rows.others:
        now = stat_source(path)
        if now is None or now.meta is None or now.meta != cache.rows.stat(path) or max(now.meta[1:3]) >= racy_mark:
            changed.add(path)
    return changed


def _affected(index: Index, changed: Set[str], declaring: Collection[str]) -> set[str]:
    """The derived files to compare again: ``declaring``, the changed files that were derived,
    their children, and those with a missing source (its content may have moved)."""
    found = set(declaring)
    found.update(edge.derived for edge in index.declared_by(changed))
    for path in changed:
        found.update(index.children.get(path, ()))
    found.update(edge.derived for edge in index.broken if edge.status is EdgeStatus.MISSING)
    return found


def _declared(path: str, row: list[Any]) -> Declared:
    """What an unchanged file declared at the last scan, from its row."""
    declaration, rest = row[5], row[6:]
    if not declaration or not rest:
        return (), None
    sources = rest[0][0]
    derived_at = declaration[1]
    if not all(type(source) is str for source in sources) or not (derived_at is None or type(derived_at) is str):
        raise ValueError(f"the cache's row of {path} is not a declaration")
    return tuple(sources), derived_at


def _source_states(
    rows: Mapping[str, list[Any]], rescan: Rereading, compared: Mapping[str, Declared], changed: Set[str]
) -> dict[str, SourceState] | None:
    """The sources of the compared files: hashed again when they changed or were never
    hashed, else as their rows hold them.  None when one cannot be read or is refused."""
    states = {}
    for source in sorted({source for found, _ in compared.values() for source in found}):
        state = None if source in changed else _known_source(rows.get(source))
        state = state or rescan.source(source)
        if state is None:
            return None
        states[source] = state
    return states


def _known_source(row: list[Any] | None) -> SourceState | None:
    """A source's state as its trusted row holds it, or None when it was never hashed."""
    if row is None or row[4] is None:
        return None
    sha256, meaning = hashes_of(row)
    if type(sha256) is not str or type(row[1]) is not int:
        raise ValueError("a cached hash is not text")
    return SourceState(sha256, row[1] / 1e9, meaning)


def _contents(rows: Mapping[str, list[Any]], rescan: Rereading, changed: Set[str]) -> dict[str, tuple[str, ...]] | None:
    """Memory files by content hash (``Snapshot.contents``), from the rows where they hold
    it; None when one cannot be hashed (the full scan answers)."""
    hashes = []
    for path in sorted(rescan.listing):
        state = None if path in changed else _known_source(rows[path])
        state = state or rescan.source(path)
        if state is None or state.sha256 is None:
            return None
        hashes.append((path, state.sha256, state.meaning))
    return by_content(hashes)


def _joined(before: Sequence[Edge], compared: Collection[str], new_edges: tuple[Edge, ...]) -> EdgeTable:
    """The last result's edges (sorted by derived file, then source) with those of the
    compared files replaced, in the same order: the columns are filtered and each new edge
    inserted where its derived file sorts, so that no other edge is made or compared."""
    keep = [derived not in compared for derived in column(before, "derived")]
    columns = [list(compress(column(before, name), keep)) for name in EDGE_COLUMNS]
    derived = columns[1]
    for edge in sorted(new_edges, key=_order, reverse=True):  # the same derived file: inserted before the last
        at = bisect_left(derived, edge.derived)
        for kept, value in zip(columns, _COLUMNS_OF(edge), strict=True):
            kept.insert(at, value)
    return EdgeTable(*columns)


def _still_declared(problem: Problem, rows: Mapping[str, list[Any]], changed: Set[str]) -> bool:
    """Whether a problem of the last scan is one an unchanged file's row holds (of its
    declaration, or an entry refused), so that a full scan would find it again."""
    row = rows.get(problem.path)
    if row is None or problem.path in changed or not row[5]:
        return False
    found = [problem.kind.value, problem.detail]
    return found in row[5][2] or (len(row) > 6 and found in row[6][1])


_order = attrgetter("derived", "source")
_COLUMNS_OF = attrgetter(*EDGE_COLUMNS)
_problem_order = attrgetter("row")


def _pairs(edges: Collection[Edge]) -> set[tuple[str, str]]:
    return {(edge.source, edge.derived) for edge in edges}


class LockLines:
    """The lock's lines (header, then one sorted line per edge) as the bytes read: a derived
    file's lines are found by binary search, and only those a change reaches are decoded
    and rewritten."""

    def __init__(self, data: bytes, canonical: bool) -> None:
        self.data = data
        self.start = records_start(data)  # after the header and its options line
        self.canonical = canonical  # known to be what ``encode_lock`` writes, else checked before a replace

    @classmethod
    def of(cls, data: bytes | None, canonical: bool) -> LockLines | None:
        """None when ``data`` is not one header then whole lines."""
        if data is None:
            return cls(HEADER_BYTES, True)
        if not data.startswith(HEADER_BYTES) or (len(data) > len(HEADER_BYTES) and not data.endswith(b"\n")):
            return None
        return cls(data, canonical)

    def _first_at_or_after(self, prefix: bytes) -> int:
        """Where the first line not sorted before ``prefix`` starts (the end when none)."""
        data = self.data
        low, high = self.start, len(data)
        while low < high:
            middle = (low + high) // 2
            start = max(low, data.rfind(b"\n", low, middle) + 1)
            end = data.find(b"\n", start) + 1
            if data[start : end - 1] < prefix:
                low = end
            else:
                high = start
        return low

    def _block(self, derived: str) -> tuple[int, int]:
        """Where ``derived``'s lines are: sorted lines sharing a beginning are consecutive."""
        prefix = b"[" + orjson.dumps(derived) + b","
        start = end = self._first_at_or_after(prefix)
        while self.data.startswith(prefix, end):
            end = self.data.find(b"\n", end) + 1
        return start, end

    def has(self, derived: str) -> bool:
        start, end = self._block(derived)
        return end > start

    def derivations(self, paths: Collection[str]) -> dict[str, Derivation] | None:
        """The stamps of ``paths`` (those the lock holds), read as ``decode_stamps`` reads a lock."""
        chunks = [self.data[: self.start]]
        for path in sorted(paths):
            start, end = self._block(path)
            chunks.append(self.data[start:end])
        table = decode_stamps(b"".join(chunks))
        if table is None:
            return None
        return {derived: Derivation(at, stamps) for derived, (at, stamps) in table.items()}

    def replaced(self, paths: Collection[str], updated: Mapping[str, Derivation]) -> list[bytes | memoryview] | None:
        """The lock with the lines of every file in ``paths`` replaced by its stamps in
        ``updated`` (none when it is not there); None when the lines are not exactly
        what ``encode_lock`` writes, which a full scan then rewrites.  In pieces: the lines
        kept are slices of the bytes read, not copies."""
        if not (self.canonical or self._is_canonical()):
            return None
        data = memoryview(self.data)
        chunks: list[bytes | memoryview] = []
        position = 0
        for path in sorted(paths, key=lambda path: (self._block(path), orjson.dumps(path))):
            start, end = self._block(path)
            derivation = updated.get(path)
            records = [] if derivation is None else _records(path, derivation)
            chunks += (data[position:start], encode_lock(records)[len(HEADER_BYTES) :])
            position = end
        chunks.append(data[position:])
        return chunks

    def _is_canonical(self) -> bool:
        """Sorted, as orjson writes them, one ``derived_at`` per file: as ``encode_lock`` writes."""
        lines = self.data[self.start :].split(b"\n")[:-1]
        if lines != sorted(lines):
            return False
        joined = b"[" + b",".join(lines) + b"]"
        try:
            rows = orjson.loads(joined)
        except orjson.JSONDecodeError:
            return False
        if orjson.dumps(rows) != joined:
            return False
        derived_at: dict[str, object] = {}
        return all(derived_at.setdefault(row[0], row[5]) == row[5] for row in rows)


def _records(derived: str, derivation: Derivation) -> list[Record]:
    return [Record(derived, source, stamp, derivation.derived_at) for source, stamp in derivation.stamps.items()]
