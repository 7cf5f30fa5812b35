"""Compare what each derived file stamped with what its sources hold now.

Pure: records and a snapshot in, new records and the edges out.  This is
where the contract's rules about stamps live: adoption on first sight,
re-derivation (an explicit stamp or a new ``derived_at``), forgetting a
source that is no longer declared, and the originating change date that is
fixed at the first scan that sees a mismatch.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass

from .model import Edge, EdgeStatus, Stamp
from .scan import Snapshot, SourceState

__all__ = ["Derivation", "reconcile"]


@dataclass(frozen=True, slots=True)
class Derivation:
    """What provgraph remembers about one derived file."""

    derived_at: str | None
    """The ``derived_at`` value last seen; a new value means the file was re-derived."""
    stamps: Mapping[str, Stamp]


def reconcile(
    records: Mapping[str, Derivation],
    snapshot: Snapshot,
    now: float,
    restamp: Set[str] = frozenset(),
) -> tuple[dict[str, Derivation], tuple[Edge, ...]]:
    """Stamp what needs stamping, then compare every edge with its stamp.

    Records of files that no longer declare anything are dropped; a file that
    declares again later is adopted anew.
    """
    updated: dict[str, Derivation] = {}
    edges: list[Edge] = []
    for path, sources in snapshot.declarations.items():
        derivation = _stamped(records.get(path), path, sources, snapshot, now, path in restamp)
        compared = {}
        for source in sources:
            state = snapshot.sources[source]
            stamp, edge = _compare(source, path, derivation.stamps[source], state, now, snapshot.contents)
            compared[source] = stamp
            edges.append(edge)
        updated[path] = Derivation(derivation.derived_at, compared)
    edges.sort(key=lambda edge: (edge.derived, edge.source))
    return updated, tuple(edges)


def _stamped(
    old: Derivation | None, path: str, sources: tuple[str, ...], snapshot: Snapshot, now: float, restamp: bool
) -> Derivation:
    derived_at = snapshot.derived_at.get(path)
    rederived = restamp or (old is not None and derived_at is not None and derived_at != old.derived_at)
    kept = {} if old is None or rederived else old.stamps
    stamps = {source: kept.get(source) or Stamp(snapshot.sources[source].sha256, now) for source in sources}
    return Derivation(derived_at, stamps)


def _compare(
    source: str, derived: str, stamp: Stamp, state: SourceState, now: float, contents: Mapping[str, tuple[str, ...]]
) -> tuple[Stamp, Edge]:
    if state.sha256 is None:
        status = EdgeStatus.MISSING
    elif state.sha256 == stamp.sha256:
        status = EdgeStatus.CLEAN
    else:
        status = EdgeStatus.CHANGED
    if status is EdgeStatus.CLEAN:
        since = None
    elif stamp.mismatch_since is not None:
        since = stamp.mismatch_since
    else:
        since = _first_observed(status, stamp, state, now)
    if stamp.mismatch_since != since:
        stamp = Stamp(stamp.sha256, stamp.stamped_at, since)
    moved_to = _moved_to(stamp, contents) if status is EdgeStatus.MISSING else None
    return stamp, Edge(source, derived, status, stamp.stamped_at, since, moved_to)


def _moved_to(stamp: Stamp, contents: Mapping[str, tuple[str, ...]]) -> str | None:
    """The first memory file (by path) that holds exactly what was stamped."""
    holders = contents.get(stamp.sha256, ()) if stamp.sha256 is not None else ()
    return holders[0] if holders else None


def _first_observed(status: EdgeStatus, stamp: Stamp, state: SourceState, now: float) -> float:
    """The source's mtime when it is plausible (after the stamp, not in the future), else now."""
    if status is EdgeStatus.CHANGED and state.mtime is not None and stamp.stamped_at <= state.mtime <= now:
        return state.mtime
    return now
