"""The lineage graph: cycles, and how staleness flows from changed edges.

Pure: edges in, stale entries and cycles out.  Walks are iterative and visit neighbours in
sorted order, so the chains reported never depend on the order of files on disk.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections import defaultdict, deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from functools import partial
from itertools import islice
from operator import attrgetter
from typing import TYPE_CHECKING, NamedTuple, overload

from .model import Cause, Edge, EdgeStatus, NodeStatus, StaleEntry, broken_edges, column

if TYPE_CHECKING:  # networkx is heavy: imported where a graph is built
    import networkx as nx

__all__ = ["Causes", "Children", "children_of", "find_cycles", "from_origin", "hinted", "nearest", "node_statuses"]
__all__ += ["propagate", "to_networkx", "typo_hint"]


def children_of(edges: Sequence[Edge]) -> dict[str, list[str]]:
    """Source -> sorted derived files, read from the columns of sources and derived files
    (no edge is made of an ``EdgeTable``)."""
    children: dict[str, list[str]] = {}
    for source, derived in zip(column(edges, "source"), column(edges, "derived"), strict=True):
        children.setdefault(source, []).append(derived)
    return {source: sorted(set(kids)) if len(kids) > 1 else kids for source, kids in children.items()}


def propagate(edges: Sequence[Edge], children: Mapping[str, list[str]] | None = None) -> tuple[StaleEntry, ...]:
    """Every file reachable from a changed or missing edge, with its root causes.

    The (origin, kind) groups whose broken edges lead to the same files share one BFS
    (``_Tree``), and each file's causes are made only when asked for (``Causes``): a file
    below a hub of many missing sources costs one entry per tree, not one per source.
    ``children`` is ``children_of(edges)`` when the caller has it.
    """
    groups: dict[tuple[str, EdgeStatus], list[Edge]] = defaultdict(list)
    broken = broken_edges(edges)  # an edge made only where one is broken
    for edge in broken:
        groups[(edge.source, edge.status)].append(edge)
    if not groups:
        return ()
    if children is None:
        children = Children(edges)
    trees: dict[tuple[str, ...], _Tree] = {}
    reached: dict[str, list[_Tree]] = defaultdict(list)
    for (origin, kind), group in sorted(groups.items(), key=lambda item: (item[0][0], item[0][1].value)):
        starts = tuple(sorted({edge.derived for edge in group}))
        tree = trees.get(starts)
        if tree is None:
            tree = trees[starts] = _Tree(*_shortest_parents(children, list(starts)), [])
            for path in tree.links:
                reached[path].append(tree)
        tree.origins.append(_Origin(origin, kind, group, children))
    since = _earliest(children, list(broken))
    direct = {edge.derived for edge in broken}
    return tuple(
        StaleEntry(path, since[path], path in direct, Causes(path, found)) for path, found in sorted(reached.items())
    )


class _Origin:
    """One changed or missing origin with its broken edges, and the date its change reached
    each file (worked out when first asked for, and only for an origin of several edges)."""

    __slots__ = ("_children", "_earliest", "edges", "kind", "moved_to", "source")

    def __init__(self, source: str, kind: EdgeStatus, edges: list[Edge], children: Mapping[str, list[str]]) -> None:
        self.source, self.kind, self.edges, self._children = source, kind, edges, children
        self.moved_to = next((edge.moved_to for edge in edges if edge.moved_to is not None), None)
        self._earliest: dict[str, float] | None = None

    def since(self, path: str) -> float:
        if len(self.edges) == 1:
            return self.edges[0].since or 0.0
        if self._earliest is None:
            self._earliest = _earliest(self._children, self.edges)
        return self._earliest[path]


class _Tree(NamedTuple):
    """The shortest chains from one set of files whose own sources broke, shared by the
    origins (sorted by source and kind) whose broken edges lead to exactly those files."""

    links: dict[str, str | None]
    depths: dict[str, int]
    origins: list[_Origin]


def _order(cause: Cause) -> tuple[str, str]:
    return cause.source, cause.kind.value


class Causes(Sequence[Cause]):
    """The root causes of one stale file, in order of source and kind, each made when asked
    for: a text shows the first few and their number, whatever the number of sources."""

    __slots__ = ("_hints", "_trees", "nearest", "path")

    def __init__(self, path: str, trees: list[_Tree], hints: Mapping[str, str | None] | None = None) -> None:
        self.path, self._trees, self._hints = path, trees, hints or {}
        self.nearest = min(tree.depths[path] for tree in trees)  # edges on the shortest chain

    def hinted(self, hints: Mapping[str, str | None]) -> Causes:
        """The same causes, a missing origin with the typo hint of ``hints`` unless its rename hint names that file."""
        return Causes(self.path, self._trees, hints)

    def from_origin(self, source: str) -> list[Cause]:
        """The causes whose origin is ``source`` (one per kind)."""
        found = []
        for tree in self._trees:
            at = bisect_left(tree.origins, source, key=attrgetter("source"))
            while at < len(tree.origins) and tree.origins[at].source == source:
                found.append(self._made(tree, tree.origins[at]))
                at += 1
        return sorted(found, key=_order)

    def _made(self, tree: _Tree, origin: _Origin) -> Cause:
        parent = tree.links[self.path]
        return Cause(
            origin.source,
            origin.kind,
            origin.since(self.path),
            origin.source if parent is None else parent,
            tree.depths[self.path],
            origin.moved_to,
            typo_hint(self._hints, origin.source, origin.moved_to),
            path=self.path,
            links=tree.links,
        )

    def __len__(self) -> int:
        return sum(len(tree.origins) for tree in self._trees)

    def __iter__(self) -> Iterator[Cause]:
        made = [map(partial(self._made, tree), tree.origins) for tree in self._trees]
        return made[0] if len(made) == 1 else heapq.merge(*made, key=_order)

    @overload
    def __getitem__(self, index: int) -> Cause: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[Cause, ...]: ...

    def __getitem__(self, index: int | slice) -> Cause | tuple[Cause, ...]:
        if isinstance(index, slice) and index.step is None and min(index.start or 0, index.stop or 0) >= 0:
            return tuple(islice(self, index.start, index.stop))
        return tuple(self)[index]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Causes | tuple) and tuple(self) == tuple(other)

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"Causes({tuple(self)!r})"


def nearest(causes: Sequence[Cause]) -> int:
    """Edges on the shortest chain among ``causes`` (1 when there is none)."""
    return causes.nearest if isinstance(causes, Causes) else min((cause.depth for cause in causes), default=1)


def hinted(causes: Sequence[Cause], hints: Mapping[str, str | None]) -> Sequence[Cause]:
    """``causes``, a missing origin with the typo hint of ``hints`` unless its rename hint names that file."""
    if isinstance(causes, Causes):
        return causes.hinted(hints)
    return tuple(replace(cause, did_you_mean=typo_hint(hints, cause.source, cause.moved_to)) for cause in causes)


def typo_hint(hints: Mapping[str, str | None], source: str, moved_to: str | None) -> str | None:
    """The typo hint of a missing source, unless its rename hint already names that file."""
    hint = hints.get(source)
    return None if hint == moved_to else hint


def from_origin(causes: Sequence[Cause], source: str) -> list[Cause]:
    """The causes among ``causes`` whose origin is ``source``."""
    if isinstance(causes, Causes):
        return causes.from_origin(source)
    return [cause for cause in causes if cause.source == source]


_LOOKUPS = 64  # lookups before ``Children`` indexes every edge rather than scan the sources


class Children(Mapping[str, list[str]]):
    """``children_of(edges)``, found for each file when first asked for while few are: a
    change deep in a large lineage reaches a handful of files."""

    def __init__(self, edges: Sequence[Edge]) -> None:
        self._edges = edges
        self._sources: list[str] | None = None
        self._found: dict[str, list[str]] = {}
        self._all: dict[str, list[str]] | None = None

    def __getitem__(self, source: str) -> list[str]:
        if self._all is not None or len(self._found) >= _LOOKUPS:
            return self._every()[source]
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

    def _every(self) -> dict[str, list[str]]:
        self._all = self._all or children_of(self._edges)
        return self._all

    def __iter__(self) -> Iterator[str]:
        return iter(self._every())

    def __len__(self) -> int:
        return len(self._every())


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
    """One cycle per knot of mutually derived files, in derivation order: from its
    alphabetically first file, the shortest way back to it.  A file naming itself is a
    cycle of one.  ``children`` is ``children_of(edges)`` when the caller has it."""
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
    """The lineage as a networkx DiGraph, source -> derived.  Nodes carry ``status``,
    ``since``, ``in_cycle`` and ``changed``; edges ``status``, ``stamped_at`` and ``since``."""
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
