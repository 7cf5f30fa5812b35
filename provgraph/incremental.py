"""A refresh after a small change: the last result patched where the change reaches.

Pure: the last scan as the cache holds it (its per-file rows left undecoded, its
edges, cycles and problems), the lock's lines, the listing and what was read again
in; the next result, the rows to keep and the lock's lines out.  A file whose
metadata is unchanged (and not racy) is trusted as a full scan trusts it, so only
the derived files that declare differently now, or whose sources were written,
are compared with their stamps again; every other edge is the last scan's, and
the lock keeps every other line byte for byte.

It handles the common case only: the same memory files as before (none added,
removed or renamed, so every wiki link resolves as it did), no refused source,
nothing unreadable.  Anything else returns None, and the full scan answers; so
does a lock that is not exactly as provgraph writes it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence, Set
from datetime import datetime
from itertools import compress, repeat
from operator import ge

import orjson

from .lineage import find_cycles, propagate
from .store.lock import HEADER, Record, decode_stamps, encode_lock
from .model import (
    Edge,
    EdgeStatus,
    EdgeTable,
    FileMeta,
    KnownEdges,
    NamedTuple,
    Problem,
    Report,
    Snapshot,
    SourceState,
    broken_edges,
)
from .stamps import Derivation, reconcile

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Protocol
else:
    Protocol = object  # a protocol is the type checker's: a run need not import ``typing`` for it

__all__ = [
    "Declared",
    "LockLines",
    "MemoryFiles",
    "Patch",
    "Previous",
    "affected",
    "changed_files",
    "patch_report",
]

Row = list["Any"]  # "Any" as text: the run imports no ``typing``
"""A file's row as the cache holds it: size, mtime_ns, ctime_ns, inode, sha256,
declaration, and the declaration resolved (see ``codec``)."""

Declared = tuple[tuple[str, ...], str | None]
"""What a derived file declares: its resolved sources (empty: it declares none) and ``derived_at``."""

_HEADER = HEADER.encode()


class MemoryFiles(NamedTuple):
    """The memory files of a scan in path order, as digests that compare as text: of their
    paths, and of their metadata a part of ``FILES_PER_PART`` files at a time.  The cache
    keeps those of the last scan, so a refresh finds the parts where some file's metadata
    moved by comparing a few short strings, and looks at the files of those parts only,
    against their rows, without a tuple for each of the files that did not move.  A
    ``NamedTuple``, not a dataclass: ~0.5 ms less to create on every full run."""

    paths: str
    """The sha256 of the count and the paths, in order (the beginning of ``numbers_bytes``)."""
    listing_key: str
    """``nochange.listing_key`` of the same files, from the same bytes."""
    parts: tuple[str, ...]
    """The sha256 of each part's metadata, as ``nochange.numbers_bytes`` writes its numbers."""
    racy: tuple[str, ...] = ()
    """The files, sorted, whose mtime or ctime is at or after the racy mark of the scan that
    recorded them (``RACY_WINDOW_NS`` before its start): the next refresh reads them again
    even with the same metadata.  A file not named here had, with the metadata recorded,
    times before that mark, so it is racy at no later scan while its metadata stays: the
    next refresh need not look at every file's times again."""


FILES_PER_PART = 64
"""Files whose metadata one digest of ``MemoryFiles.parts`` covers: a change makes a refresh
compare the rows of that many files; a large folder records a digest for each part."""


class Batches(Protocol):
    """A result's edges in the batches the cache writes them in (``codec.EdgeBatches``)."""

    @property
    def size(self) -> int:
        """How many edges."""

    @property
    def derived(self) -> int:
        """How many files they derive."""

    def columns(self) -> tuple[list[Any], ...]:
        """Every edge's fields, in ``model.EDGE_COLUMNS`` order (``EdgeTable``'s columns)."""


class StoredEdges(Protocol):
    """The last result's edges as the cache holds them (``codec.StoredEdges``): one file's
    edges found, parsed, when asked for."""

    def edges_of(self, path: str) -> EdgeTable:
        """The edges of the derived file ``path`` (none when it declares nothing)."""

    def replaced(self, edges: Mapping[str, Sequence[Edge]]) -> Batches:
        """The edges with those of each file in ``edges`` replaced by those given."""


class Previous(NamedTuple):
    """The last scan, as much of it as a patch needs, read without decoding every row.  A
    ``NamedTuple``, not a dataclass: ~0.7 ms less to create on every full run."""

    root: str
    rows: Mapping[str, Row]
    """Each file's row, parsed when asked for (``codec.RowTable``)."""
    memory_files: MemoryFiles
    others: tuple[str, ...]
    """The files the rows hold that are not memory files (sources of another kind)."""
    edges: StoredEdges
    """The last result's edges, sorted by derived file then source, in batches parsed when asked for."""
    broken: tuple[Edge, ...]
    """Those of them that are not clean, in the same order."""
    children: Mapping[str, list[str]]
    """Source -> the files derived from it, sorted (``lineage.children_of`` of the edges)."""
    cycles: tuple[tuple[str, ...], ...]
    problems: tuple[Problem, ...]
    walk_problems: tuple[Problem, ...]
    scan_started_ns: int
    lock: LockLines


class LockData(Protocol):
    """The lock's bytes as ``LockLines`` reads them: ``bytes``, or the open file read where
    it is looked at (``state``), so that a lock of megabytes is not read whole for the few
    lines a change reaches.  ``find`` and ``rfind`` look for one byte."""

    def __len__(self) -> int: ...

    def __getitem__(self, where: slice, /) -> bytes: ...

    def find(self, byte: bytes, start: int, /) -> int: ...

    def rfind(self, byte: bytes, start: int, end: int, /) -> int: ...

    def startswith(self, prefix: bytes, start: int = 0, /) -> bool: ...


class LockLines:
    """The lock's lines as provgraph writes them (header, then one sorted line per edge),
    kept as the bytes read (or the open file, read where it is looked at): a derived
    file's lines are found by the beginning they share (a binary search over the bytes),
    decoded only for the files a change reaches, and the others are written back as they
    were."""

    def __init__(self, data: LockData, canonical: bool) -> None:
        self.data = data
        self.canonical = canonical
        """Whether the lines are known to be exactly what ``encode_lock`` makes of their
        stamps; else they are checked before any line is replaced."""

    @classmethod
    def of(cls, data: LockData, canonical: bool) -> LockLines | None:
        """None when ``data`` is not one header then whole lines."""
        if not data.startswith(_HEADER) or (len(data) > len(_HEADER) and data[len(data) - 1 :] != b"\n"):
            return None
        return cls(data, canonical)

    def _first_at_or_after(self, prefix: bytes) -> int:
        """Where the first line not sorted before ``prefix`` starts (the end when none)."""
        data = self.data
        low, high = len(_HEADER), len(data)
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
        chunks = [_HEADER]
        for path in sorted(paths):
            start, end = self._block(path)
            chunks.append(self.data[start:end])
        table = decode_stamps(b"".join(chunks))
        if table is None:
            return None
        return {derived: Derivation(at, stamps) for derived, (at, stamps) in table.items()}

    def replaced(self, paths: Collection[str], updated: Mapping[str, Derivation]) -> bytes | None:
        """The lock with the lines of every file in ``paths`` replaced by its stamps in
        ``updated`` (none when it is not there); None when the lines are not exactly
        what ``encode_lock`` writes, which a full scan then rewrites.  A file's new lines
        go where its old ones were, or would be: they share its beginning."""
        if not (self.canonical or self._is_canonical()):
            return None
        chunks: list[bytes] = []
        position = 0
        for path in sorted(paths, key=lambda path: (self._block(path), orjson.dumps(path))):
            start, end = self._block(path)
            derivation = updated.get(path)
            records = [] if derivation is None else _records(path, derivation)
            chunks += (self.data[position:start], encode_lock(records)[len(_HEADER) :])
            position = end
        chunks.append(self.data[position:])
        return b"".join(chunks)

    def _is_canonical(self) -> bool:
        """Sorted, each line as orjson writes its values, and each file's ``derived_at``
        the same on all its lines (as ``encode_lock`` writes them)."""
        lines = self.data[len(_HEADER) :].split(b"\n")[:-1]
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


def changed_files(
    before: MemoryFiles,
    now: MemoryFiles,
    paths: Sequence[str],
    listing: Mapping[str, FileMeta],
    rows: Mapping[str, Row],
) -> set[str] | None:
    """The memory files (``paths``, those of ``now``, with their metadata in ``listing``)
    whose metadata moved since ``before`` (the record of the scan that wrote ``rows``), or
    that are racy (written too close to that scan for their metadata to vouch for them:
    ``before.racy``); None when the memory files are not the ones of ``before``."""
    if before.paths != now.paths or len(before.parts) != len(now.parts):
        return None
    changed = set(before.racy)
    for index, (old, new) in enumerate(zip(before.parts, now.parts, strict=True)):
        if old != new:
            part = paths[index * FILES_PER_PART : (index + 1) * FILES_PER_PART]
            changed.update(path for path in part if _moved(rows.get(path), listing[path]))
    return changed


def _moved(row: Row | None, meta: FileMeta) -> bool:
    """Whether a file's metadata is not the one its row holds (no row: it moved)."""
    return row is None or row[:4] != list(meta)


def racy_files(paths: Sequence[str], numbers: Sequence[int], racy_from_ns: int) -> tuple[str, ...]:
    """Those of ``paths`` whose mtime or ctime (``numbers``, four a file as ``MemoryFiles``
    packs them) is at or after ``racy_from_ns``, in order: loops in C, and only when one is."""
    mtimes, ctimes = numbers[1::4], numbers[2::4]
    if not mtimes or max(max(mtimes), max(ctimes)) < racy_from_ns:
        return ()
    return tuple(compress(paths, map(ge, map(max, mtimes, ctimes), repeat(racy_from_ns))))


def still_racy(read: Collection[str], listing: Mapping[str, FileMeta], racy_from_ns: int) -> tuple[str, ...]:
    """``racy_files`` of a listing whose files a patch ``read`` again where ``changed_files``
    said so (every file whose metadata moved, every racy one): any other file has the
    metadata of the last record, whose times were before the last racy mark, and the marks
    only move on."""
    candidates = listing.keys() & read
    return tuple(sorted(path for path in candidates if max(listing[path][1:3]) >= racy_from_ns))


def affected(previous: Previous, changed: Set[str], declaring: Collection[str]) -> set[str]:
    """The derived files to compare again: those among ``declaring`` (changed files that
    declare now or held stamps), the changed files that were derived, those derived from
    a changed file, and those with a missing source (where its content went may be a file
    that changed).  Looked up in the last result's index (``Previous.children``, its broken
    edges): a large folder has a hundred thousand edges, of which a change reaches a handful."""
    found = set(declaring)
    found.update(path for path in changed if previous.edges.edges_of(path))
    for path in changed:
        found.update(previous.children.get(path, ()))
    found.update(edge.derived for edge in previous.broken if edge.status is EdgeStatus.MISSING)
    return found


def declared(path: str, row: Row) -> Declared:
    """What an unchanged file declared at the last scan, from its row."""
    declaration, rest = row[5], row[6:]
    if not declaration or not rest:
        return (), None
    sources = rest[0][0]
    derived_at = declaration[1]
    if not all(type(source) is str for source in sources) or not (derived_at is None or type(derived_at) is str):
        raise ValueError(f"the cache's row of {path} is not a declaration")
    return tuple(sources), derived_at


def known_source(row: Row | None) -> SourceState | None:
    """A source's state as its trusted row holds it, or None when it was never hashed."""
    if row is None or row[4] is None:
        return None
    if type(row[4]) is not str or type(row[1]) is not int:
        raise ValueError("a cached hash is not text")
    return SourceState(row[4], row[1] / 1e9)


class Patch(NamedTuple):
    """The next result and what changed in the stamps.  A ``NamedTuple``, not a
    dataclass: ~0.5 ms less to create on every full run."""

    report: Report
    derivations: dict[str, Derivation]
    """The stamps of every compared file now (one left out declares nothing any more)."""
    lock_changed: bool
    batches: Batches
    """``report.edges`` in batches: the last result's, those the change reached replaced."""
    children: Children
    """What derives from each file now: the last result's, with the changes."""


def patch_report(
    previous: Previous,
    compared: Mapping[str, Declared],
    sources: Mapping[str, SourceState],
    listing: Mapping[str, FileMeta],
    problems: Collection[Problem],
    changed: Set[str],
    now: datetime,
    contents: Mapping[str, tuple[str, ...]],
) -> Patch | None:
    """Compare the files in ``compared`` with their stamps again (``stamps.reconcile``),
    keep every other edge, and propagate.  ``problems`` are those found reading the
    ``changed`` files again; theirs from the last scan are dropped.  ``contents`` tells
    where a missing source's stamped content is now (see ``Snapshot.contents``).  None
    when the lock cannot be read."""
    records = previous.lock.derivations(compared)
    if records is None:
        return None
    declarations = {path: sources for path, (sources, _) in compared.items() if sources}
    snapshot: Snapshot[object] = Snapshot(
        files=tuple(path for path in compared if path in listing),  # reconcile asks about no other file
        declarations=declarations,
        derived_at={path: compared[path][1] for path in declarations},
        sources=sources,
        problems=(),
        seen={},
        contents=contents,
    )
    updated, new_edges = reconcile(records, snapshot, now.timestamp())
    old_edges = [edge for path in sorted(compared) for edge in previous.edges.edges_of(path)]
    batches = previous.edges.replaced(_by_derived(new_edges, compared))
    children = Children(previous.children, _children_changed(previous.children, compared, old_edges, new_edges))
    broken = _broken(previous.broken, compared, new_edges)
    known = KnownEdges(batches.size, batches.derived, broken, children, batches.columns)
    edges = EdgeTable.deferred(known)
    cycles = previous.cycles if _pairs(old_edges) == _pairs(new_edges) else find_cycles(edges)
    kept = (problem for problem in previous.problems if _still_declared(problem, previous.rows, changed))
    report = Report(
        root=previous.root,
        scanned_at=now,
        file_count=len(listing),
        edges=edges,
        stale=propagate(edges),
        cycles=cycles,
        problems=tuple(sorted({*kept, *problems, *previous.walk_problems}, key=_problem_order)),
    )
    return Patch(report, updated, updated != records, batches, children)


def _still_declared(problem: Problem, rows: Mapping[str, Row], changed: Set[str]) -> bool:
    """Whether a problem of the last scan is one an unchanged file's row holds (of its
    declaration, or an entry refused): a full scan finds it again.  The others (a source
    that could not be read) a full scan reports only if it meets them again."""
    row = rows.get(problem.path)
    if row is None or problem.path in changed or not row[5]:
        return False
    found = [problem.kind.value, problem.detail]
    return found in row[5][2] or (len(row) > 6 and found in row[6][1])


def _by_derived(edges: tuple[Edge, ...], compared: Collection[str]) -> dict[str, tuple[Edge, ...]]:
    """Each compared file's edges, in order (none for one that declares nothing now):
    grouped in one pass, since a change that touched many files compares them all."""
    grouped: dict[str, list[Edge]] = {path: [] for path in compared}
    for edge in edges:
        if edge.derived in grouped:
            grouped[edge.derived].append(edge)
    return {path: tuple(found) for path, found in grouped.items()}


def _broken(before: tuple[Edge, ...], compared: Collection[str], new_edges: tuple[Edge, ...]) -> tuple[Edge, ...]:
    """The edges that are not clean once the compared files' edges are ``new_edges``, in the
    result's order (by derived file, then source)."""
    kept = [edge for edge in before if edge.derived not in compared]
    kept += broken_edges(new_edges)
    return tuple(sorted(kept, key=_order))


def _order(edge: Edge) -> tuple[str, str]:
    return edge.derived, edge.source


def _children_changed(
    children: Mapping[str, list[str]], compared: Collection[str], old_edges: list[Edge], new_edges: tuple[Edge, ...]
) -> dict[str, list[str] | None]:
    """What derives from each source of the compared files' old or new edges, where that
    changed (None: nothing any more)."""
    added: dict[str, set[str]] = {}
    for edge in new_edges:
        added.setdefault(edge.source, set()).add(edge.derived)
    changed: dict[str, list[str] | None] = {}
    for source in sorted({edge.source for edge in old_edges} | added.keys()):
        before = list(children.get(source, ()))
        now = sorted({path for path in before if path not in compared} | added.get(source, set()))
        if now != before:
            changed[source] = now or None
    return changed


class Children(Mapping[str, list[str]]):
    """What derives from each file: the last result's table with the changes of a patch
    (None: a file nothing derives from any more), each looked up when asked for."""

    def __init__(self, before: Mapping[str, list[str]], changed: dict[str, list[str] | None]) -> None:
        self.before = before
        self.changed = changed

    def __getitem__(self, source: str) -> list[str]:
        if source in self.changed:
            now = self.changed[source]
            if now is None:
                raise KeyError(source)
            return now
        return self.before[source]

    def __iter__(self) -> Iterator[str]:
        now = {path for path, kids in self.changed.items() if kids is not None}
        return iter(sorted(now | (self.before.keys() - self.changed.keys())))

    def __len__(self) -> int:
        return sum(1 for _ in self)


def _problem_order(problem: Problem) -> tuple[str, str, str]:
    return problem.row


def _pairs(edges: Collection[Edge]) -> set[tuple[str, str]]:
    return {(edge.source, edge.derived) for edge in edges}
