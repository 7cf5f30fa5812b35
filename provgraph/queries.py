"""Questions an agent or a program asks the lineage at the moment they matter.

Pure functions over a ``Report``: what a file is derived from, what derives
from it, what to re-check after editing a source.  Every answer is plain
data, sorted, with the chain that connects the two files.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Mapping

from .lineage import children_of, node_statuses
from .model import Explanation, FileLineage, Relative, Report, StaleEntry

__all__ = ["FileLineage", "Relative", "derived_from", "file_lineage", "sources_of", "stale_after_editing"]


def _parents_of(report: Report) -> dict[str, list[str]]:
    parents: dict[str, set[str]] = defaultdict(set)
    for edge in report.edges:
        parents[edge.derived].add(edge.source)
    return {path: sorted(sources) for path, sources in parents.items()}


def _walk(neighbours: Mapping[str, list[str]], start: str, transitive: bool) -> dict[str, tuple[str, ...]]:
    """Shortest paths from ``start`` (excluded) to every reachable node, start first."""
    paths: dict[str, tuple[str, ...]] = {}
    queue: deque[tuple[str, tuple[str, ...]]] = deque([(start, (start,))])
    while queue:
        node, path = queue.popleft()
        for neighbour in neighbours.get(node, ()):
            if neighbour not in paths and neighbour != start:
                paths[neighbour] = (*path, neighbour)
                if transitive:
                    queue.append((neighbour, paths[neighbour]))
    return paths


def sources_of(report: Report, path: str, *, transitive: bool = False) -> tuple[Relative, ...]:
    """What ``path`` is derived from: its declared sources, or every ancestor."""
    statuses = node_statuses(report.edges, report.stale)
    found = _walk(_parents_of(report), path, transitive)
    return tuple(
        Relative(ancestor, statuses[ancestor], tuple(reversed(chain)))
        for ancestor, chain in sorted(found.items(), key=lambda item: (len(item[1]), item[0]))
    )


def derived_from(report: Report, path: str, *, transitive: bool = False) -> tuple[Relative, ...]:
    """What is derived from ``path``: directly, or through any number of levels."""
    statuses = node_statuses(report.edges, report.stale)
    found = _walk(children_of(report.edges), path, transitive)
    return tuple(
        Relative(descendant, statuses[descendant], chain)
        for descendant, chain in sorted(found.items(), key=lambda item: (len(item[1]), item[0]))
    )


def stale_after_editing(report: Report, source: str) -> tuple[StaleEntry, ...]:
    """The stale files downstream of ``source``: what to re-check after editing it.

    Right after an edit, refresh first: the report then marks everything the
    edit reached, and this narrows it to the edited file's descendants.
    """
    downstream = {relative.path for relative in derived_from(report, source, transitive=True)}
    return tuple(entry for entry in report.stale if entry.path in downstream)


def file_lineage(report: Report, explanation: Explanation, *, exists: bool) -> FileLineage:
    """The lineage of ``explanation.path`` in ``report``.

    Whether the file exists is asked of the folder by the caller: a file that
    takes no part in any derivation is in no report.
    """
    descendants = derived_from(report, explanation.path, transitive=True)
    paths = {relative.path for relative in descendants}
    stale = {entry.path: entry for entry in report.stale if entry.path in paths}
    return FileLineage(explanation, descendants, stale, exists)
