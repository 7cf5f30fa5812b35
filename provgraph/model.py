"""The vocabulary of provgraph, one small type per concept: what users handle is a frozen
slotted dataclass, a row the stages pass each other a ``NamedTuple``, a kind a ``StrEnum``
(its values appear in JSON).  Nothing here touches the disk or the clock."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from itertools import compress, repeat
from operator import attrgetter, is_not
from typing import Any, Generic, NamedTuple, TypeVar, overload

VERSION = "0.3.0"
"""provgraph's version: the package's ``__version__``, the build's, and part of the key of
the cache (``store.cache``), which another version never trusts."""


def is_utf8(path: str) -> bool:
    """False for a name holding bytes that are not UTF-8 (lone surrogates), which JSON cannot hold."""
    try:
        path.encode()
    except UnicodeEncodeError:
        return False
    return True


def day(timestamp: float) -> str:
    """``YYYY-MM-DD`` in the local time zone, as every date provgraph shows."""
    return datetime.fromtimestamp(timestamp).date().isoformat()


def as_text(path: str) -> str:
    """``path`` as JSON can hold it: itself, or, when the system gave bytes that are not
    UTF-8 (held as lone surrogates), with each such byte written ``\\xNN``."""
    if is_utf8(path):
        return path
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


class ProblemKind(enum.StrEnum):
    """Why a declaration or a file could not be honoured.  Never fatal."""

    BAD_FRONTMATTER = "bad-frontmatter"
    """``derived_from`` is not a string or a list of strings, or the block never closes."""
    BAD_ENTRY = "bad-entry"
    """One entry is empty, a URL, a folder or otherwise not a file path; it is ignored."""
    OUTSIDE_ROOT = "outside-root"
    """An entry or a link resolves outside the memory root; it is refused and never opened."""
    UNREADABLE = "unreadable"
    """A file or folder could not be read (permissions, invalid UTF-8, vanished, not a regular file)."""
    DANGLING_ENTRY = "dangling-entry"
    """An index line links a memory file that does not exist."""
    ORPHAN = "orphan"
    """A memory file that no line of an index links."""
    OUTDATED_ENTRY = "outdated-entry"
    """The name, description or type of a file changed since its index line was stamped."""
    DUPLICATE_ENTRY = "duplicate-entry"
    """An index links one file on several lines."""


INDEX_KINDS = (ProblemKind.DANGLING_ENTRY, ProblemKind.ORPHAN, ProblemKind.OUTDATED_ENTRY, ProblemKind.DUPLICATE_ENTRY)
"""The problems of a memory index, in the order to repair them."""


class EdgeStatus(enum.StrEnum):
    """How a source compares with what its derived file stamped."""

    CLEAN = "clean"
    """The source holds the content that was stamped."""
    CHANGED = "changed"
    """The source exists and its content differs from the stamp."""
    MISSING = "missing"
    """The source does not exist (deleted, renamed, never existed)."""


class NodeStatus(enum.StrEnum):
    """What a file is in the lineage graph."""

    SOURCE = "source"
    """Derived from nothing; other files are derived from it."""
    FRESH = "fresh"
    """Derived, and every source still holds what was stamped."""
    STALE = "stale"
    """Derived, and some source changed since, directly or further up."""
    MISSING = "missing"
    """Declared as a source but does not exist."""


class FileMeta(NamedTuple):
    """What a stat call says about a file: enough to tell that it was not rewritten
    (ctime is part of it: every write moves ctime, even one that restores the mtime)."""

    size: int
    mtime_ns: int
    ctime_ns: int
    inode: int

    @property
    def mtime(self) -> float:
        return self.mtime_ns / 1e9


@dataclass(frozen=True, slots=True)
class Problem:
    """A declaration or file that could not be honoured, with the file it is about."""

    path: str
    kind: ProblemKind
    detail: str

    @property
    def row(self) -> tuple[str, str, str]:
        """Path, kind and detail as text: the order problems are listed in, and how they are compared."""
        return self.path, self.kind.value, self.detail


class HashRule(enum.StrEnum):
    """What a stamp's sha256 was taken of: a stamp is compared under the rule it was made with,
    so that a stamp recorded before a rule existed keeps its meaning."""

    BYTES = "bytes"
    """The file's bytes, exactly."""
    MEANING = "meaning"
    """Its meaning: the bytes without volatile frontmatter fields (``updated:``), trailing
    whitespace, trailing blank lines, or the difference between ``\\r\\n`` and ``\\n``."""


class Stamp(NamedTuple):
    """What a derived file recorded about one source when it was derived.

    ``sha256`` is None when the source did not exist at derivation.  ``mismatch_since``
    is the originating change date of the edge: set the first time a scan sees the source
    differ from the stamp, kept while it differs, dropped when it matches again.  ``rule``
    says what the hash was taken of."""

    sha256: str | None
    stamped_at: float
    mismatch_since: float | None = None
    rule: HashRule = HashRule.BYTES


LATEST_DATE = 253402214399.0
"""9999-12-30 23:59:59 UTC, the last second still in year 9999 in every time zone (they run
to UTC+14): a later (or negative) date read from a file cannot be shown as a local date, so
it is damage."""


class SourceState(NamedTuple):
    """A declared source as it is now; ``sha256`` None means it does not exist.  ``meaning``
    is its hash under ``HashRule.MEANING``, None when that is its ``sha256`` (nothing to leave out)."""

    sha256: str | None
    mtime: float | None = None
    meaning: str | None = None

    def hashed(self, rule: HashRule) -> str | None:
        """Its hash under ``rule``: what a stamp made under that rule is compared with."""
        return self.meaning or self.sha256 if rule is HashRule.MEANING else self.sha256


CacheRow = TypeVar("CacheRow", covariant=True)
"""What a scan remembers about one file for the next scan; the pure stages never read it."""


class Snapshot(NamedTuple, Generic[CacheRow]):
    """The memory folder as one scan saw it."""

    files: tuple[str, ...]
    declarations: Mapping[str, tuple[str, ...]]
    """Derived file -> its resolved sources (sorted, never empty)."""
    derived_at: Mapping[str, str | None]
    sources: Mapping[str, SourceState]
    problems: tuple[Problem, ...]
    seen: Mapping[str, CacheRow]
    refused: Mapping[str, ProblemKind] = {}
    """Declared sources that must not be opened, with the kind of problem each is."""
    contents: Mapping[str, tuple[str, ...]] = {}
    """A hash (of the bytes, or of the meaning where that differs) -> the memory files holding it;
    filled when a source is missing, to tell where it went."""
    withheld: Mapping[str, tuple[str, ...]] = {}
    """Derived file -> the sources it declares that this scan refused: their stamps are kept."""
    unsettled: Mapping[str, tuple[str, ...]] = {}
    lineage_like: Mapping[str, int] = {}
    """Lineage written in forms provgraph does not read (``sources:``, ``## Sources``) ->
    how many files write it; looked for only while no stamp is recorded."""
    """A remembered derived file whose declaration cannot be read now -> the sources it last declared."""


def by_content(hashes: Iterable[tuple[str, str, str | None]]) -> dict[str, tuple[str, ...]]:
    """``Snapshot.contents`` of ``(path, sha256, meaning)``: each file under its sha256 and,
    where it differs (not None), its meaning's, so that a stamp of either rule finds it."""
    holders: dict[str, list[str]] = {}
    for path, sha256, meaning in hashes:
        for held in (sha256,) if meaning is None else (sha256, meaning):
            holders.setdefault(held, []).append(path)
    return {held: tuple(paths) for held, paths in holders.items()}


@dataclass(frozen=True, slots=True)
class Edge:
    """One declared derivation, source -> derived, as it compares now."""

    source: str
    derived: str
    status: EdgeStatus
    stamped_at: float | None
    since: float | None
    """Originating change date (epoch seconds) while the edge is not clean."""
    moved_to: str | None = None
    """For a missing source: a memory file that holds exactly the stamped content now (a rename?)."""
    did_you_mean: str | None = None
    """For a missing source: a memory file its name probably meant (``facts.md`` for ``facts``)."""


class EdgeTable(Sequence[Edge]):
    """Edges kept as columns, one list per field of ``Edge`` (but ``did_you_mean``, never
    stored), an ``Edge`` made only for one asked for: most questions about a large folder
    look at a field or two of every edge.  Equal to the tuple of the same edges, hashed like it."""

    __slots__ = ("source", "derived", "status", "stamped_at", "since", "moved_to", "_made")

    def __init__(
        self,
        source: list[str],
        derived: list[str],
        status: list[EdgeStatus],
        stamped_at: list[float | None],
        since: list[float | None],
        moved_to: list[str | None],
    ) -> None:
        self.source, self.derived, self.status = source, derived, status
        self.stamped_at, self.since, self.moved_to = stamped_at, since, moved_to
        self._made: tuple[Edge, ...] | None = None

    def __len__(self) -> int:
        return len(self.source)

    @overload
    def __getitem__(self, index: int) -> Edge: ...

    @overload
    def __getitem__(self, index: slice) -> EdgeTable: ...

    def __getitem__(self, index: int | slice) -> Edge | EdgeTable:
        if isinstance(index, slice):
            return EdgeTable(*(getattr(self, name)[index] for name in EDGE_COLUMNS))
        if self._made is not None:
            return self._made[index]
        return Edge(*(getattr(self, name)[index] for name in EDGE_COLUMNS))

    def __iter__(self) -> Iterator[Edge]:
        """Every edge, made once and then kept: who reads them all reads them again."""
        if self._made is None:
            self._made = tuple(map(Edge, *(getattr(self, name) for name in EDGE_COLUMNS)))
        return iter(self._made)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, EdgeTable):
            return all(getattr(self, name) == getattr(other, name) for name in EDGE_COLUMNS)
        return isinstance(other, tuple) and len(other) == len(self) and tuple(self) == other

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"EdgeTable({tuple(self)!r})"


EDGE_COLUMNS = ("source", "derived", "status", "stamped_at", "since", "moved_to")
"""The fields of ``Edge`` an ``EdgeTable`` keeps, in the order the cache stores them."""


def column(edges: Sequence[Edge], name: str) -> Iterable[Any]:
    """One field of every edge (``source``, ``derived``, ``status``, ...): an ``EdgeTable``'s
    column as it is, else the field of each edge."""
    return getattr(edges, name) if type(edges) is EdgeTable else map(attrgetter(name), edges)


def derived_count(edges: Sequence[Edge]) -> int:
    """How many files declare at least one source."""
    return len(set(column(edges, "derived")))


def broken_edges(edges: Sequence[Edge]) -> tuple[Edge, ...]:
    """The edges that are not clean, in order: an edge is made only where one is broken."""
    at = compress(range(len(edges)), map(is_not, column(edges, "status"), repeat(EdgeStatus.CLEAN)))
    return tuple(map(edges.__getitem__, at))


@dataclass(frozen=True, slots=True)
class Cause:
    """Why a stale file is stale: a changed or missing origin and the chain from it (not
    stored: the causes of one origin share the parent links that ``via`` follows)."""

    source: str
    kind: EdgeStatus
    since: float
    hop: str
    """The next file upstream on the chain: the origin itself when the broken edge is the file's own."""
    depth: int
    """Edges on the chain, from the origin to the stale file (1 for the file's own edge)."""
    moved_to: str | None = None
    """For a missing origin: where its stamped content is now (see ``Edge.moved_to``)."""
    did_you_mean: str | None = None
    """For a missing origin: the file its name probably meant (see ``Edge.did_you_mean``)."""
    path: str = field(default="", compare=False, repr=False)
    """The stale file this cause belongs to."""
    links: Mapping[str, str | None] = field(default_factory=dict, compare=False, repr=False)
    """Shared by the causes of one origin: each file reached -> its parent (None: its own edge broke)."""

    @property
    def via(self) -> tuple[str, ...]:
        """A shortest derivation chain ``(origin, ..., stale file)``."""
        chain = [self.path]
        parent = self.links.get(self.path)
        while parent is not None:
            chain.append(parent)
            parent = self.links[parent]
        chain.append(self.source)
        return tuple(reversed(chain))


@dataclass(frozen=True, slots=True)
class StaleEntry:
    """A derived file that may be wrong, with every root cause that reaches it."""

    path: str
    since: float
    direct: bool
    causes: Sequence[Cause]
    """In order of source and kind; ``propagate`` makes each when asked for (``lineage.Causes``)."""


@dataclass(frozen=True, slots=True)
class Report:
    """The outcome of one scan: what is stale, why, and what could not be read."""

    root: str
    scanned_at: datetime
    file_count: int
    """How many memory files the scan listed."""
    edges: Sequence[Edge]
    """A tuple, or an ``EdgeTable``."""
    stale: tuple[StaleEntry, ...]
    cycles: tuple[tuple[str, ...], ...]
    problems: tuple[Problem, ...]
    hints: tuple[str, ...] = ()
    """When nothing is declared: which form or option would read the lineage the folder
    writes in other words."""

    @property
    def derived(self) -> tuple[str, ...]:
        """Paths of the files that declare at least one source, sorted."""
        return tuple(sorted(set(column(self.edges, "derived"))))

    @property
    def index_problems(self) -> tuple[Problem, ...]:
        """The problems of the memory indexes, in the order to repair them."""
        return tuple(problem for problem in self.problems if problem.kind in INDEX_KINDS)

    @property
    def ok(self) -> bool:
        """True when nothing is stale and there is no cycle (what ``check`` asks)."""
        return not self.stale and not self.cycles

    def entry(self, path: str) -> StaleEntry | None:
        """The stale entry of ``path``, or None when it is not stale."""
        for stale in self.stale:
            if stale.path == path:
                return stale
        return None


@dataclass(frozen=True, slots=True)
class Explanation:
    """Everything ``why`` says about one file."""

    path: str
    status: NodeStatus | None
    """None when the file takes no part in any derivation."""
    sources: tuple[Edge, ...]
    """The file's own declared sources, as they compare now."""
    stale: StaleEntry | None
    stale_sources: tuple[str, ...]
    """Sources of this file that are themselves stale (staleness flowing through)."""
    derived_from_it: tuple[str, ...]
    """Files that declare this file as a source."""
    in_cycles: tuple[tuple[str, ...], ...]
    problems: tuple[Problem, ...] = ()
    """What could not be honoured in its declaration: why it may declare fewer sources than it says."""


@dataclass(frozen=True, slots=True)
class Relative:
    """A file related to the one asked about, and how."""

    path: str
    status: NodeStatus
    chain: tuple[str, ...]
    """A shortest derivation chain, always written upstream first: ``(source, ..., derived)``."""

    @property
    def distance(self) -> int:
        """1 for a direct source or derived file, 2 through one file, and so on."""
        return len(self.chain) - 1


@dataclass(frozen=True, slots=True)
class FileLineage:
    """Everything ``provgraph lineage`` and an agent's lineage tool say about one file:
    its own explanation, then what derives from it (what an edit of it will affect)."""

    explanation: Explanation
    descendants: tuple[Relative, ...]
    """Every file derived from it, directly or through others, nearest first."""
    stale: Mapping[str, StaleEntry]
    """The stale entry of each stale descendant, by path."""
    exists: bool
    """False when the file is not there and nothing names it as a source."""
