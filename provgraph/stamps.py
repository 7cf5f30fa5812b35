"""Compare what each derived file stamped with what its sources hold now.

Pure: records and a snapshot in, new records and the edges out.  The contract's rules
about stamps live here: adoption, re-derivation, forgetting, and the change date.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from operator import itemgetter
from typing import NamedTuple

from .model import Edge, EdgeStatus, EdgeTable, HashRule, Snapshot, SourceState, Stamp

__all__ = ["Derivation", "first_observed", "reconcile", "reconcile_as_table"]


class Derivation(NamedTuple):
    """What provgraph remembers about one derived file."""

    derived_at: str | None
    """The ``derived_at`` value last seen; a new value means the file was re-derived."""
    stamps: Mapping[str, Stamp]


def reconcile(
    records: Mapping[str, Derivation],
    snapshot: Snapshot[object],
    now: float,
    restamp: Set[str] = frozenset(),
) -> tuple[dict[str, Derivation], tuple[Edge, ...]]:
    """``reconcile_as_table`` with the edges as a tuple."""
    updated, edges = reconcile_as_table(records, snapshot, now, restamp)
    return updated, tuple(edges)


def reconcile_as_table(
    records: Mapping[str, Derivation],
    snapshot: Snapshot[object],
    now: float,
    restamp: Set[str] = frozenset(),
) -> tuple[dict[str, Derivation], EdgeTable]:
    """Stamp what needs stamping, then compare every edge (sorted by derived file, then
    source) with its stamp.

    A stamp is forgotten only by a re-derivation or by a readable declaration that no
    longer names its source, never because a scan could not see a file: an unreadable
    derived file keeps its last declaration, a refused source keeps its stamp (and counts
    as missing), and the records of a vanished derived file stay dormant.
    """
    updated: dict[str, Derivation] = {}
    edges: list[_Row] = []
    present = frozenset(snapshot.files)
    adopting = _Adopting(snapshot.sources, now)
    for path in sorted(records.keys() | snapshot.declarations.keys() | snapshot.withheld.keys()):
        old = records.get(path)
        adopted = _adopted(path, snapshot, adopting) if old is None else None
        if adopted is not None:  # a first sight: every file of a first scan
            updated[path], found = adopted
            edges += found
            continue
        declared = _declared(path, old, snapshot)
        if declared is None:
            if old is not None and path not in present:
                updated[path] = old  # dormant: the file is gone, maybe for a moment
            continue
        derivation = _stamped(old, declared, snapshot, now, path in restamp)
        compared = {}
        for source, stamp in derivation.stamps.items():
            state = snapshot.sources.get(source, _ABSENT)
            compared[source], edge = _compare(source, path, stamp, state, now, snapshot.contents)
            edges.append(edge)
        if compared:
            updated[path] = (
                derivation if _same(compared, derivation.stamps) else Derivation(derivation.derived_at, compared)
            )
    edges.sort(key=_BY_DERIVED)
    return updated, _table(edges)


_Row = tuple[str, str, EdgeStatus, float | None, float | None, str | None]  # in ``EDGE_COLUMNS`` order
_BY_DERIVED = itemgetter(1, 0)


def _table(rows: list[_Row]) -> EdgeTable:
    if not rows:
        return EdgeTable([], [], [], [], [], [])
    return EdgeTable(*map(list, zip(*rows, strict=True)))


_ABSENT = SourceState(None)  # a source refused for now compares as missing, its stamp kept


class _Declared(NamedTuple):
    """What a derived file declares in this scan, as far as it can be read."""

    sources: tuple[str, ...]
    """Sources to stamp on adoption."""
    withheld: tuple[str, ...]
    """Declared sources refused for now: compared only while a stamp is kept."""
    derived_at: str | None
    readable: bool


def _declared(path: str, old: Derivation | None, snapshot: Snapshot[object]) -> _Declared | None:
    """None when the file declares nothing now: its stamps are forgotten (or dormant)."""
    if path in snapshot.unsettled and old is not None:
        return _Declared((), tuple(old.stamps), old.derived_at, readable=False)
    sources = snapshot.declarations.get(path, ())
    withheld = snapshot.withheld.get(path, ())
    if not sources and not withheld:
        return None
    return _Declared(sources, withheld, snapshot.derived_at.get(path), readable=True)


def _same(compared: Mapping[str, Stamp], stamps: Mapping[str, Stamp]) -> bool:
    return all(stamp is stamps[source] for source, stamp in compared.items())


def _stamped(
    old: Derivation | None, declared: _Declared, snapshot: Snapshot[object], now: float, restamp: bool
) -> Derivation:
    derived_at = declared.derived_at
    if old is not None and not restamp and _as_before(old, declared):
        return old  # nothing to adopt, forget or re-derive: most files after a change
    rederived = restamp or (
        declared.readable and old is not None and derived_at is not None and derived_at != old.derived_at
    )
    kept = {} if old is None or rederived else old.stamps
    stamps = {source: kept.get(source) or _new_stamp(snapshot.sources[source], now) for source in declared.sources}
    stamps.update((source, kept[source]) for source in declared.withheld if source in kept)
    return Derivation(derived_at, dict(sorted(stamps.items())))


class _Adopting:
    """What adoption stamps each source with now: one ``Stamp`` per source, shared by every
    file adopted in this scan that names it (equal values, and immutable), so that a
    first scan makes one per source rather than one per edge."""

    def __init__(self, sources: Mapping[str, SourceState], now: float) -> None:
        self.sources, self.now = sources, now
        self._made: dict[str, Stamp] = {}

    def stamp(self, source: str) -> Stamp | None:
        """The stamp of ``source`` as it is now; None when it is missing or refused."""
        made = self._made.get(source)
        if made is None:
            state = self.sources.get(source)
            if state is None or state.sha256 is None:
                return None
            made = self._made[source] = _new_stamp(state, self.now)
        return made


def _new_stamp(state: SourceState, now: float) -> Stamp:
    """A new stamp of a source: of its meaning, so that an edit of a volatile field alone never
    marks what derives from it.  (Stamps of its bytes are the ones made before that rule.)"""
    return Stamp(state.meaning or state.sha256, now, None, HashRule.MEANING)


def _adopted(path: str, snapshot: Snapshot[object], adopting: _Adopting) -> tuple[Derivation, list[_Row]] | None:
    """A derived file seen for the first time whose declared sources all exist: each one
    stamped with what it holds now, every edge clean (what ``_stamped`` and ``_compare``
    give it, without comparing new stamps with the hashes they were made from).  None for
    anything else (no source, a missing or refused one): they decide."""
    sources = snapshot.declarations.get(path)
    if not sources or path in snapshot.withheld:
        return None
    stamps = {}
    for source in sorted(sources):
        stamp = adopting.stamp(source)
        if stamp is None:
            return None
        stamps[source] = stamp
    now = adopting.now
    rows: list[_Row] = [(source, path, EdgeStatus.CLEAN, now, None, None) for source in stamps]
    return Derivation(snapshot.derived_at.get(path), stamps), rows


def _as_before(old: Derivation, declared: _Declared) -> bool:
    """Whether the file declares, readably, exactly the sources it stamped, with the same
    ``derived_at``: its derivation then stands as it was."""
    return (
        declared.readable
        and not declared.withheld
        and declared.derived_at == old.derived_at
        and declared.sources == tuple(old.stamps)
    )


def _compare(
    source: str, derived: str, stamp: Stamp, state: SourceState, now: float, contents: Mapping[str, tuple[str, ...]]
) -> tuple[Stamp, _Row]:
    since: float | None = None
    if state.sha256 is not None and state.hashed(stamp.rule) == stamp.sha256:
        status = EdgeStatus.CLEAN
    else:
        status = EdgeStatus.MISSING if state.sha256 is None else EdgeStatus.CHANGED
        since = stamp.mismatch_since
        if since is None:
            since = first_observed(status is EdgeStatus.CHANGED, stamp.stamped_at, state.mtime, now)
    if stamp.mismatch_since != since:
        stamp = Stamp(stamp.sha256, stamp.stamped_at, since, stamp.rule)
    moved_to = _moved_to(stamp, contents) if status is EdgeStatus.MISSING else None
    return stamp, (source, derived, status, stamp.stamped_at, since, moved_to)


def _moved_to(stamp: Stamp, contents: Mapping[str, tuple[str, ...]]) -> str | None:
    """The first memory file (by path) that holds what was stamped (its bytes or its meaning)."""
    holders = contents.get(stamp.sha256, ()) if stamp.sha256 is not None else ()
    return holders[0] if holders else None


def first_observed(changed: bool, stamped_at: float, mtime: float | None, now: float) -> float:
    """The originating date of a difference first seen ``now``: the changed file's mtime
    when it is plausible (after the stamp, not in the future), else now."""
    if changed and mtime is not None and stamped_at <= mtime <= now:
        return mtime
    return now
