"""The lineage graph: cycles, and how staleness flows from changed edges.

Pure: edges in, stale entries and cycles out.  Walks are iterative (no
recursion limit on a deep chain) and visit neighbours in sorted order, so the
chains reported never depend on the order of files on disk.  networkx is
loaded only to analyse cycles once a cheap check found one, and to hand out
the graph itself (``to_networkx``).
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from .model import Cause, Edge, EdgeStatus, NodeStatus, StaleEntry, broken_edges, children_known, column

if TYPE_CHECKING:  # networkx is heavy: imported where a graph is built
    import networkx as nx

__all__ = ["children_of", "find_cycles", "node_statuses", "propagate", "to_networkx"]


def children_of(edges: Sequence[Edge]) -> dict[str, list[str]]:
    """Source -> sorted derived files, read from the columns of sources and derived files
    (no edge is made of an ``EdgeTable``)."""
    children: dict[str, list[str]] = {}
    for source, derived in zip(column(edges, "source"), column(edges, "derived"), strict=True):
        children.setdefault(source, []).append(derived)
    return {source: sorted(set(kids)) if len(kids) > 1 else kids for source, kids in children.items()}


def propagate(edges: Sequence[Edge], children: Mapping[str, list[str]] | None = None) -> tuple[StaleEntry, ...]:
    """Every file reachable from a changed or missing edge, with its root causes.

    Causes are grouped by (origin, kind): one BFS from all the targets of the
    origin's broken edges gives the shortest chains, as parent links that every
    cause of the group shares, and a second pass in order of date gives each
    file the earliest originating change that reaches it.  Time and memory go
    with the number of causes, never with the length of their chains.  ``children`` is
    ``children_of(edges)`` when the caller has it.
    """
    groups: dict[tuple[str, EdgeStatus], list[Edge]] = defaultdict(list)
    broken = broken_edges(edges)  # an edge made only where one is broken
    for edge in broken:
        groups[(edge.source, edge.status)].append(edge)
    if not groups:
        return ()
    if children is None:
        known = children_known(edges)
        children = _Children(edges) if known is None else known
    causes: dict[str, list[Cause]] = defaultdict(list)
    for (origin, kind), group in sorted(groups.items(), key=lambda item: (item[0][0], item[0][1].value)):
        parents, depths = _shortest_parents(children, sorted(edge.derived for edge in group))
        earliest = _earliest(children, group)
        moved_to = next((edge.moved_to for edge in group if edge.moved_to is not None), None)
        for path, parent in parents.items():
            hop = origin if parent is None else parent
            causes[path].append(
                Cause(origin, kind, earliest[path], hop, depths[path], moved_to, path=path, links=parents)
            )
    direct = {edge.derived for edge in broken}
    return tuple(
        StaleEntry(path, min(cause.since for cause in found), path in direct, tuple(found))
        for path, found in sorted(causes.items())
    )


_LOOKUPS = 64
"""Children looked up one by one before ``_Children`` indexes them all: a lookup scans the
list of sources, a whole index loops over every edge."""


class _Children(Mapping[str, list[str]]):
    """``children_of(edges)``, found for each file when first asked for while few are: a
    change deep in a large lineage reaches a handful of files."""

    def __init__(self, edges: Sequence[Edge]) -> None:
        self._edges = edges
        self._sources: list[str] | None = None
        self._found: dict[str, list[str]] = {}
        self._all: dict[str, list[str]] | None = None

    def __getitem__(self, source: str) -> list[str]:
        if self._all is None and len(self._found) >= _LOOKUPS:
            self._all = children_of(self._edges)
        if self._all is not None:
            return self._all[source]
        kids = self._found.get(source)
        if kids is None:
            kids = self._found[source] = self._scanned(source)
        if not kids:
            raise KeyError(source)
        return kids

    def _scanned(self, source: str) -> list[str]:
        """The derived files of ``source``'s edges, sorted, each once."""
        if self._sources is None:
            self._sources = list(column(self._edges, "source"))
        sources, at = self._sources, -1
        found: set[str] = set()
        while True:
            try:
                at = sources.index(source, at + 1)
            except ValueError:
                return sorted(found)
            found.add(self._edges[at].derived)

    def __iter__(self) -> Iterator[str]:
        self._all = self._all or children_of(self._edges)
        return iter(self._all)

    def __len__(self) -> int:
        self._all = self._all or children_of(self._edges)
        return len(self._all)


def _shortest_parents(
    children: Mapping[str, list[str]], starts: list[str]
) -> tuple[dict[str, str | None], dict[str, int]]:
    """Each file reached from ``starts`` -> its parent on a shortest path (None for a
    start), and -> its distance in edges from the origin (1 for a start)."""
    parents: dict[str, str | None] = dict.fromkeys(starts)
    depths = dict.fromkeys(starts, 1)
    queue = deque(starts)
    while queue:
        node = queue.popleft()
        for child in children.get(node, ()):
            if child not in parents:
                parents[child] = node
                depths[child] = depths[node] + 1
                queue.append(child)
    return parents, depths


def _earliest(children: Mapping[str, list[str]], broken: list[Edge]) -> dict[str, float]:
    earliest: dict[str, float] = {}
    for edge in sorted(broken, key=lambda edge: (edge.since or 0.0, edge.derived)):
        if edge.derived in earliest:
            continue
        since = edge.since or 0.0
        earliest[edge.derived] = since
        queue = deque([edge.derived])
        while queue:
            for child in children.get(queue.popleft(), ()):
                if child not in earliest:
                    earliest[child] = since
                    queue.append(child)
    return earliest


def find_cycles(edges: Sequence[Edge], children: Mapping[str, list[str]] | None = None) -> tuple[tuple[str, ...], ...]:
    """One cycle per knot of mutually derived files, in derivation order.

    Each cycle starts at its alphabetically first file and is the shortest
    way back to it, so the report is small, real and deterministic.  A file
    naming itself is a cycle of one.  ``children`` is ``children_of(edges)`` when
    the caller has it.
    """
    children = children_of(edges) if children is None else children
    knotted = _not_peelable(children)
    if not knotted:
        return ()
    import networkx as nx  # heavy: only for a graph that holds a cycle

    graph = nx.DiGraph()
    graph.add_edges_from((source, child) for source, kids in children.items() for child in kids)
    cycles = []
    for component in nx.strongly_connected_components(graph.subgraph(knotted)):
        start = min(component)
        if len(component) > 1 or graph.has_edge(start, start):
            cycles.append(_shortest_cycle(children, component, start))
    return tuple(sorted(cycles))


def _not_peelable(children: Mapping[str, list[str]]) -> set[str]:
    """Nodes left after repeatedly removing nodes without incoming edges (Kahn):
    empty exactly when the graph is acyclic."""
    indegree: dict[str, int] = defaultdict(int)
    for source, kids in children.items():
        indegree.setdefault(source, 0)
        for child in kids:
            indegree[child] += 1
    queue = deque(node for node, degree in indegree.items() if degree == 0)
    while queue:
        node = queue.popleft()
        del indegree[node]
        for child in children.get(node, ()):
            indegree[child] -= 1
            if indegree[child] == 0:
                queue.append(child)
    return set(indegree)


def _shortest_cycle(children: Mapping[str, list[str]], component: set[str], start: str) -> tuple[str, ...]:
    parents: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for child in children.get(node, ()):
            if child == start:
                chain = [node]
                while chain[-1] != start:
                    chain.append(parents[chain[-1]])
                return tuple(reversed(chain))
            if child in component and child not in parents:
                parents[child] = node
                queue.append(child)
    raise AssertionError("a strongly connected component always closes a cycle")


def node_statuses(edges: Sequence[Edge], stale: Iterable[StaleEntry]) -> dict[str, NodeStatus]:
    """Each file in the lineage: missing, stale, fresh (derived) or source."""
    stale_paths = {entry.path for entry in stale}
    statuses: dict[str, NodeStatus] = {}
    for edge in edges:
        statuses[edge.derived] = NodeStatus.STALE if edge.derived in stale_paths else NodeStatus.FRESH
    for edge in edges:
        if edge.source not in statuses:
            statuses[edge.source] = NodeStatus.MISSING if edge.status is EdgeStatus.MISSING else NodeStatus.SOURCE
    return dict(sorted(statuses.items()))


def to_networkx(
    edges: Sequence[Edge], stale: tuple[StaleEntry, ...], cycles: tuple[tuple[str, ...], ...]
) -> nx.DiGraph:
    """The lineage as a networkx DiGraph, source -> derived, with attributes.

    Nodes carry ``status`` (a ``NodeStatus`` value), ``since`` (epoch seconds
    or None), ``in_cycle`` and ``changed`` (the origin of a broken edge);
    edges carry ``status``, ``stamped_at`` and ``since``.
    """
    import networkx as nx  # heavy: only when the graph itself is asked for

    graph = nx.DiGraph()
    since = {entry.path: entry.since for entry in stale}
    in_cycle = {path for cycle in cycles for path in cycle}
    changed = {edge.source for edge in edges if edge.status is not EdgeStatus.CLEAN}
    for path, status in node_statuses(edges, stale).items():
        graph.add_node(
            path, status=status.value, since=since.get(path), in_cycle=path in in_cycle, changed=path in changed
        )
    for edge in edges:
        graph.add_edge(
            edge.source, edge.derived, status=edge.status.value, stamped_at=edge.stamped_at, since=edge.since
        )
    return graph
