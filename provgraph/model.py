"""The vocabulary of provgraph: one small frozen type per concept.

Everything here is plain data.  What users handle (``Report``, ``Edge``, ``Cause``, ...)
are frozen dataclasses; the values only the stages pass each other are ``NamedTuple``s
or ``Frozen`` classes, because every full run creates each of these classes, and a
dataclass costs half a millisecond to create where a ``NamedTuple`` costs a quarter of
that or less (less again on this module's own ``NamedTuple`` base, which skips the check
of each annotation).  The pipeline stages (scan, declarations, stamps, lineage, render) pass
these values to each other; nothing in this module touches the disk or the clock.
"""

from __future__ import annotations

import enum
from collections import namedtuple
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from itertools import compress, repeat
from operator import attrgetter, is_not
from reprlib import recursive_repr

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Generic, NamedTuple, TypeVar, overload

    Handled = TypeVar("Handled", bound=type[Any])

__all__ = [
    "EDGE_COLUMNS",
    "Cause",
    "Edge",
    "EdgeTable",
    "EdgeStatus",
    "FileMeta",
    "Frozen",
    "KnownEdges",
    "NamedTuple",
    "NodeStatus",
    "Problem",
    "ProblemKind",
    "Report",
    "Snapshot",
    "SourceState",
    "StaleEntry",
    "Stamp",
    "broken_edges",
    "children_known",
    "column",
    "derived_count",
]

if not TYPE_CHECKING:

    class _NamedTupleType(type):
        """Makes of a class body what ``typing.NamedTuple`` makes of it (a ``namedtuple`` with
        the body's defaults, methods, properties and docstring), without checking each
        annotation: ``typing`` compiles every annotation written as text (all of them, under
        ``from __future__ import annotations``), about 15 µs each, and a full run creates some
        eighty.  Type checkers see ``typing.NamedTuple`` itself, and check what it checks."""

        def __new__(cls, name: str, bases: tuple[type, ...], namespace: dict[str, Any]) -> type:
            if not bases:
                return super().__new__(cls, name, bases, namespace)
            fields = namespace.get("__annotations__", {})
            defaults = [namespace[field] for field in fields if field in namespace]
            made = namedtuple(name, fields, defaults=defaults, module=namespace["__module__"])
            for key, value in namespace.items():
                if key not in fields and key not in ("__module__", "__qualname__"):
                    setattr(made, key, value)
            return made

    class NamedTuple(metaclass=_NamedTupleType):
        """The base of provgraph's named tuples, ``class Stamp(NamedTuple)`` as with ``typing``'s."""


def _compared_and_shown(cls: Handled) -> Handled:
    """A frozen dataclass made with ``eq=False, repr=False`` given the ``__eq__``, ``__hash__``
    and ``__repr__`` that ``@dataclass`` writes, from the same fields (those compared, those
    hashed, those shown), as closures.  Why: ``dataclass`` compiles each method it writes (an
    ``exec`` each, six for a frozen class), and every full run creates the five classes users
    handle; these three of the six cost it about 1.3 ms less.  The classes stay dataclasses,
    frozen (``fields``, ``replace``, ``asdict``, pickling), and a test holds each to a twin
    that ``dataclass`` writes in full."""
    compared = _fields_getter([f.name for f in fields(cls) if f.compare])
    hashed = _fields_getter([f.name for f in fields(cls) if (f.compare if f.hash is None else f.hash)])
    shown = [f.name for f in fields(cls) if f.repr]

    def __eq__(self: object, other: object) -> bool:
        if other.__class__ is self.__class__:
            return compared(self) == compared(other)
        return NotImplemented

    def __hash__(self: object) -> int:
        return hash(hashed(self))

    @recursive_repr()
    def __repr__(self: object) -> str:
        values = ", ".join([f"{name}={getattr(self, name)!r}" for name in shown])
        return f"{self.__class__.__qualname__}({values})"

    for method in (__eq__, __hash__, __repr__):
        method.__qualname__ = f"{cls.__qualname__}.{method.__name__}"
        setattr(cls, method.__name__, method)
    return cls


def _fields_getter(names: list[str]) -> Callable[[object], tuple[Any, ...]]:
    """The values of ``names`` as a tuple, as ``dataclass`` compares and hashes them
    (``attrgetter`` of one name alone would give the value itself)."""
    getter = attrgetter(*names)
    return getter if len(names) > 1 else lambda value: (getter(value),)


class ProblemKind(enum.StrEnum):
    """Why a declaration or a file could not be honoured.  Never fatal."""

    BAD_FRONTMATTER = "bad-frontmatter"
    """``derived_from`` is neither a string nor a list of strings, or the
    frontmatter block never closes; the file is treated as declaring nothing."""
    BAD_ENTRY = "bad-entry"
    """One entry is empty, a URL, a folder or otherwise not a file path; it is ignored."""
    OUTSIDE_ROOT = "outside-root"
    """An entry or a link resolves outside the memory root; it is refused and never opened."""
    UNREADABLE = "unreadable"
    """A file or folder could not be read (permissions, invalid UTF-8, vanished, not a regular file)."""


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
    """What a stat call says about a file: enough to tell that it was not rewritten.

    ctime is part of it because every write moves ctime, even an edit that
    carefully restores the mtime.  A tuple, not a dataclass: a scan makes one
    per file and compares thousands of them.
    """

    size: int
    mtime_ns: int
    ctime_ns: int
    inode: int

    @property
    def mtime(self) -> float:
        return self.mtime_ns / 1e9


@_compared_and_shown
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Problem:
    """A declaration or file that could not be honoured, with the file it is about."""

    path: str
    kind: ProblemKind
    detail: str

    @property
    def row(self) -> tuple[str, str, str]:
        """Path, kind and detail as text: the order problems are listed in, and how the
        no-change rule records and compares the walk's problems."""
        return self.path, self.kind.value, self.detail


class Stamp(NamedTuple):
    """What a derived file recorded about one source when it was derived.

    ``sha256`` is None when the source did not exist at derivation.
    ``mismatch_since`` is the originating change date of the edge: set the
    first time a scan sees the source differ from the stamp, kept while it
    differs, dropped when it matches again.  A ``NamedTuple``, not a dataclass:
    ~0.1 ms to create against ~0.6, on every full run.
    """

    sha256: str | None
    stamped_at: float
    mismatch_since: float | None = None


class SourceState(NamedTuple):
    """A declared source as it is now; ``sha256`` None means it does not exist.  A
    ``NamedTuple``, not a dataclass: ~0.1 ms to create against ~0.5, on every full run."""

    sha256: str | None
    mtime: float | None = None


class Frozen:
    """A value set once and then only read, equal only to itself and shown by its address:
    the base of what a run makes once and passes along (a scan's ``Snapshot``), which
    nothing compares or prints.

    Not a dataclass: a class on this base costs about 10 µs to create, a frozen dataclass
    300 to 600 µs, and every full run creates them.  Subclasses list their fields in
    ``__slots__`` (unless they cache a property) and pass them to ``__init__`` by name."""

    __slots__ = ()

    def __init__(self, **fields: object) -> None:
        for name, value in fields.items():
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen: cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen: cannot delete {name!r}")


if TYPE_CHECKING:
    CacheRow = TypeVar("CacheRow", covariant=True)
    """What a scan remembers about one file for the next scan (``scan.Seen``).  The
    pure stages never read it, so its type stays the scanner's business."""
else:
    CacheRow = "CacheRow"

    class Generic:
        """``typing.Generic`` as a run sees it: a parameter only the type checker reads
        (``Snapshot[Seen]`` is ``Snapshot``), without importing ``typing`` (3 ms, on every
        full run, for a name)."""

        __slots__ = ()

        def __class_getitem__(cls, parameter: object) -> type:
            return cls


class Snapshot(Frozen, Generic[CacheRow]):
    """The memory folder as one scan saw it.

    Equal only to itself, and shown by its address: a scan makes one, and nothing compares
    two or prints one.  A ``Frozen`` class, not a dataclass: ~0.6 ms less to create on
    every full run."""

    __slots__ = (
        "files",
        "declarations",
        "derived_at",
        "sources",
        "problems",
        "seen",
        "refused",
        "contents",
        "withheld",
        "unsettled",
    )
    files: tuple[str, ...]
    declarations: Mapping[str, tuple[str, ...]]
    """Derived file -> its resolved sources (sorted, never empty)."""
    derived_at: Mapping[str, str | None]
    sources: Mapping[str, SourceState]
    problems: tuple[Problem, ...]
    seen: Mapping[str, CacheRow]
    refused: Mapping[str, ProblemKind]
    """Declared sources that must not be opened, with the kind of problem each is."""
    contents: Mapping[str, tuple[str, ...]]
    """sha256 -> the memory files holding that content; filled only when some
    source is missing, to tell where a renamed source went."""
    withheld: Mapping[str, tuple[str, ...]]
    """Derived file -> the sources it declares that were refused by this scan
    (a folder, a FIFO, a link out of the root for now): their stamps are kept."""
    unsettled: Mapping[str, tuple[str, ...]]
    """A remembered derived file whose declaration cannot be read now (unreadable,
    empty, broken frontmatter) -> the sources it last declared, which were hashed."""

    def __init__(
        self,
        files: tuple[str, ...],
        declarations: Mapping[str, tuple[str, ...]],
        derived_at: Mapping[str, str | None],
        sources: Mapping[str, SourceState],
        problems: tuple[Problem, ...],
        seen: Mapping[str, CacheRow],
        refused: Mapping[str, ProblemKind] | None = None,
        contents: Mapping[str, tuple[str, ...]] | None = None,
        withheld: Mapping[str, tuple[str, ...]] | None = None,
        unsettled: Mapping[str, tuple[str, ...]] | None = None,
    ) -> None:
        super().__init__(
            files=files,
            declarations=declarations,
            derived_at=derived_at,
            sources=sources,
            problems=problems,
            seen=seen,
            refused={} if refused is None else refused,
            contents={} if contents is None else contents,
            withheld={} if withheld is None else withheld,
            unsettled={} if unsettled is None else unsettled,
        )


@_compared_and_shown
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Edge:
    """One declared derivation, source -> derived, as it compares now."""

    source: str
    derived: str
    status: EdgeStatus
    stamped_at: float | None
    since: float | None
    """Originating change date (epoch seconds) while the edge is not clean."""
    moved_to: str | None = None
    """For a missing source: a memory file that now holds exactly the stamped
    content (the source was probably renamed there).  A hint, never applied."""
    did_you_mean: str | None = None
    """For a missing source: a memory file its name probably meant (``facts`` for
    ``facts.md``, another case, the one file of that name elsewhere).  A hint, never applied."""


class KnownEdges(NamedTuple):
    """What a table of edges read from the cache says before any of its batches is parsed:
    enough for a refresh after a small change, which reaches a handful of edges, to report
    on a hundred thousand without reading them (``EdgeTable.deferred``).  A ``NamedTuple``,
    not a dataclass: ~0.5 ms less to create on every full run."""

    length: int
    derived: int
    """How many files declare at least one source."""
    broken: tuple[Edge, ...]
    """The edges that are not clean, in the table's order."""
    children: Mapping[str, list[str]]
    """Source -> the files derived from it, sorted (``lineage.children_of``)."""
    load: Callable[[], tuple[list[Any], ...]]
    """The table's columns, in ``EDGE_COLUMNS`` order, parsed when first asked for."""


class EdgeTable(Sequence[Edge]):
    """Edges kept as columns, one list per field of ``Edge`` (``did_you_mean`` aside, which
    is never stored), an ``Edge`` made only for one asked for.

    Why: a refresh after a small change reads the last result's edges, a hundred thousand
    in a large folder, and looks at most of them only through a field or two (which
    sources changed, which are missing, which files are derived), in loops that run in C
    over a column.  An object for each would cost more than the rest of the refresh.
    A table may also be *deferred* (``KnownEdges``): its columns are parsed only when one
    is first read, and until then its length, its broken edges and what derives from
    each file are known without them.  Equal to the tuple of the same edges, and hashed like it."""

    __slots__ = ("source", "derived", "status", "stamped_at", "since", "moved_to", "_made", "_known")

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
        self._known: KnownEdges | None = None

    @classmethod
    def deferred(cls, known: KnownEdges) -> EdgeTable:
        """A table whose columns are ``known.load()``, called when a column is first read."""
        table = cls.__new__(cls)
        table._made, table._known = None, known
        return table

    def __getattr__(self, name: str) -> Any:
        """A column of a deferred table not read yet (slots not set): all are read now."""
        known = self._known if name in EDGE_COLUMNS else None
        if known is None:
            raise AttributeError(name)
        for column_name, values in zip(EDGE_COLUMNS, known.load(), strict=True):
            setattr(self, column_name, values)
        return getattr(self, name)

    @classmethod
    def joined(cls, parts: Iterable[Sequence[Edge]]) -> EdgeTable:
        """The edges of ``parts`` one after the other: a table's columns are copied as
        they are, other edges are taken apart into them."""
        table = cls([], [], [], [], [], [])
        for part in parts:
            for name in EDGE_COLUMNS:
                getattr(table, name).extend(column(part, name))
        return table

    def __len__(self) -> int:
        return self._known.length if self._known is not None else len(self.source)

    if TYPE_CHECKING:

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
    column as it is, else the field of each edge, in a loop that runs in C."""
    return getattr(edges, name) if type(edges) is EdgeTable else map(attrgetter(name), edges)


def _known(edges: Sequence[Edge]) -> KnownEdges | None:
    return edges._known if type(edges) is EdgeTable else None


def derived_count(edges: Sequence[Edge]) -> int:
    """How many files declare at least one source (a deferred table knows it unread)."""
    known = _known(edges)
    return known.derived if known is not None else len(set(column(edges, "derived")))


def broken_edges(edges: Sequence[Edge]) -> tuple[Edge, ...]:
    """The edges that are not clean, in order: an edge is made only where one is broken."""
    known = _known(edges)
    if known is not None:
        return known.broken
    at = compress(range(len(edges)), map(is_not, column(edges, "status"), repeat(EdgeStatus.CLEAN)))
    return tuple(map(edges.__getitem__, at))


def children_known(edges: Sequence[Edge]) -> Mapping[str, list[str]] | None:
    """What derives from each file, when the table knows it unread (deferred), else None."""
    known = _known(edges)
    return None if known is None else known.children


@_compared_and_shown
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Cause:
    """Why a stale file is stale: a changed or missing origin and the chain from it.

    The chain is not stored: every cause of one origin shares the parent links of
    one walk, and ``via`` follows them only when asked.  So a report holds one
    small object per cause however deep the chains, and only what is printed is
    ever spelt out in full.
    """

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
    """Shared by the causes of one origin: each file reached -> its parent, None for
    a file whose own edge from the origin is broken."""

    @property
    def via(self) -> tuple[str, ...]:
        """A shortest derivation chain ``(origin, ..., stale file)``, spelt out now."""
        chain = [self.path]
        parent = self.links.get(self.path)
        while parent is not None:
            chain.append(parent)
            parent = self.links[parent]
        chain.append(self.source)
        return tuple(reversed(chain))


@_compared_and_shown
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class StaleEntry:
    """A derived file that may be wrong, with every root cause that reaches it."""

    path: str
    since: float
    direct: bool
    causes: tuple[Cause, ...]


@_compared_and_shown
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Report:
    """The outcome of one scan: what is stale, why, and what could not be read."""

    root: str
    scanned_at: datetime
    file_count: int
    """How many memory files the scan listed."""
    edges: Sequence[Edge]
    """A tuple, or after a refresh that patched the last result an ``EdgeTable``."""
    stale: tuple[StaleEntry, ...]
    cycles: tuple[tuple[str, ...], ...]
    problems: tuple[Problem, ...]

    @property
    def derived(self) -> tuple[str, ...]:
        """Paths of the files that declare at least one source, sorted."""
        return tuple(sorted(set(column(self.edges, "derived"))))

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
