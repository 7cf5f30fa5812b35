"""Property tests of the lineage graph on real memory folders.

Each example builds a temporary memory folder from a random derivation graph,
refreshes it through the public API with explicit times, changes files, and
compares the report with what the contract says, computed here independently
with networkx: a derived file is stale exactly when a changed or missing
source reaches it through at least one derivation; each cause names such a
source with a shortest chain from it; and touching, reverting, re-stamping,
reloading or reordering changes the answer in no other way.

Half of the examples run with the stat cache trusting every file whose
metadata is unchanged (see ``stat_cache``), so the same properties also hold
for the cached scan and for the no-change fast path.
"""

from __future__ import annotations

import enum
import json
import os
import posixpath
import shutil
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import networkx as nx
import pytest
from depth import examples
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from scratch import scratch_folder

import provgraph
import provgraph.api
import provgraph.files
import provgraph.lineage
import provgraph.scan
import provgraph.store.state
from provgraph import EdgeStatus, Memory, Report, StaleEntry
from provgraph.files import LocalFiles
from provgraph.lineage import propagate
from provgraph.model import Edge, FileMeta
from provgraph.render import status_document
from provgraph.store.cache import decode, encode

PROPERTY = settings(max_examples=examples(40), deadline=None)

T0 = datetime(2024, 3, 1, 12, 0, tzinfo=UTC)
"""First refresh: every edge is adopted (stamped) at this time."""
MINUTE, HOUR, DAY = timedelta(minutes=1), timedelta(hours=1), timedelta(days=1)
BUILT = T0 - DAY
"""The mtime every file is built with: well before the first refresh."""
EARLY = T0 - 3 * DAY
"""An mtime before any stamp: not a plausible date for a change."""
LATE = T0 + 1000 * DAY
"""An mtime after any refresh: not a plausible date for a change either."""
EPOCH = datetime.fromtimestamp(0, UTC)
YEAR_NS = 365 * 24 * 3600 * 10**9
RACY_HOLDERS = (provgraph.files, provgraph.scan, provgraph.api, provgraph.store.state)

NAMES = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet")
FOLDERS = ("", "notes/", "notes/deep/", "people/")


class Style(enum.Enum):
    """How a file writes its ``derived_from`` value."""

    COMMA = "comma"
    INLINE = "inline"
    BLOCK = "block"


class Form(enum.Enum):
    """How one entry names its source."""

    RELATIVE = "relative"
    ROOTED = "rooted"
    LINK = "link"


class Action(enum.Enum):
    """What happens to a file between two refreshes."""

    KEEP = "keep"
    EDIT = "edit"
    DELETE = "delete"
    REVERT = "revert"


class When(enum.Enum):
    """Which mtime an edit leaves on the file."""

    INSIDE = "inside"
    """Between the stamp and the next refresh: the change date."""
    EARLY = "early"
    LATE = "late"


class Rewrite(enum.Enum):
    """How an edit that keeps size and mtime reaches the disk."""

    IN_PLACE = "in-place"
    REPLACE = "replace"


# -- random memory folders ------------------------------------------------------


@dataclass(frozen=True)
class Lineage:
    """A memory folder to build: each file and the files it declares it was derived from."""

    paths: tuple[str, ...]
    sources: Mapping[str, tuple[str, ...]]
    """Declared sources of each file, in declaration order (empty for plain files)."""
    styles: Mapping[str, Style]
    forms: Mapping[tuple[str, str], Form]

    @property
    def declared(self) -> set[tuple[str, str]]:
        return {(source, path) for path in self.paths for source in self.sources[path]}

    def reordered(self, orders: Mapping[str, tuple[str, ...]]) -> Lineage:
        return replace(self, sources={**self.sources, **orders})


@st.composite
def lineages(draw: st.DrawFn, acyclic: bool = True) -> Lineage:
    """2-8 files in a few folders; sources only from earlier files when ``acyclic``,
    else from any file, the file itself included.  Files that declare nothing may
    be plain ``.txt`` files (a source may be any file)."""
    count = draw(st.integers(2, 8))
    names = draw(st.permutations(NAMES))[:count]
    folders = [draw(st.sampled_from(FOLDERS)) for _ in range(count)]
    picked: list[list[int]] = []
    for index in range(count):
        pool = range(index) if acyclic else range(count)
        picked.append(draw(st.lists(st.sampled_from(pool), max_size=3, unique=True)) if pool else [])
    plain = [not picked[index] and draw(st.booleans()) for index in range(count)]
    paths = tuple(f"{folders[i]}{names[i]}{'.txt' if plain[i] else '.md'}" for i in range(count))
    sources = {paths[i]: tuple(paths[j] for j in picked[i]) for i in range(count)}
    styles = {path: draw(st.sampled_from(Style)) for path in paths}
    forms = {(path, source): draw(st.sampled_from(Form)) for path in paths for source in sources[path]}
    return Lineage(paths, sources, styles, forms)


@st.composite
def plans(draw: st.DrawFn, lineage: Lineage, actions=(Action.KEEP, Action.EDIT, Action.DELETE)) -> dict:
    """For each file, what happens to it and which mtime an edit leaves."""
    weighted = st.sampled_from([*actions, Action.KEEP, Action.EDIT])
    return {path: (draw(weighted), draw(st.sampled_from(When))) for path in lineage.paths}


@st.composite
def scenarios(draw: st.DrawFn, acyclic: bool = True) -> tuple[Lineage, dict, bool]:
    lineage = draw(lineages(acyclic))
    return lineage, draw(plans(lineage)), draw(st.booleans())


def entry_text(declaring: str, source: str, form: Form) -> str:
    relative = posixpath.relpath(source, posixpath.dirname(declaring) or ".")
    if form is Form.ROOTED:
        return "/" + source
    if form is Form.LINK:
        return f"[{posixpath.basename(source)}]({relative})"
    return relative


def document(lineage: Lineage, path: str) -> bytes:
    entries = [entry_text(path, source, lineage.forms[(path, source)]) for source in lineage.sources[path]]
    lines = ["---", f"name: {posixpath.basename(path)}", "description: kept for the property tests"]
    style = lineage.styles[path]
    if entries and style is Style.COMMA:
        lines.append("derived_from: " + ", ".join(entries))
    elif entries and style is Style.INLINE:
        lines.append("derived_from: [" + ", ".join(entries) + "]")
    elif entries:
        lines += ["derived_from:", *(f"  - {entry}" for entry in entries)]
    lines += ["---", "", f"Notes kept in {path}, version 0.", ""]
    return "\n".join(lines).encode()


def set_mtime(full: Path, when: datetime) -> None:
    seconds = int(when.timestamp()) * 10**9
    os.utime(full, ns=(seconds, seconds))


class Folder:
    """A memory folder on disk built from a lineage; remembers what each file first held."""

    def __init__(self, root: Path, lineage: Lineage, order: tuple[str, ...] | None = None) -> None:
        self.root = root
        self.lineage = lineage
        self.original = {path: document(lineage, path) for path in lineage.paths}
        self.mtime: dict[str, float] = {}
        self.edits: dict[str, int] = defaultdict(int)
        for path in order or lineage.paths:
            self.write(path, self.original[path], BUILT)

    def full(self, path: str) -> Path:
        return self.root.joinpath(*path.split("/"))

    def write(self, path: str, data: bytes, when: datetime) -> None:
        full = self.full(path)
        full.parent.mkdir(parents=True, exist_ok=True)
        full.write_bytes(data)
        set_mtime(full, when)
        self.mtime[path] = float(int(when.timestamp()))

    def edit(self, path: str, when: datetime) -> None:
        """Append to the body; the frontmatter, hence the declaration, stays as it was.
        Every edit of a file leaves another mtime, so its metadata always moves."""
        self.edits[path] += 1
        count = self.edits[path]
        self.write(path, self.original[path] + f"Revision {count}.\n".encode(), when + count * timedelta(seconds=1))

    def revert(self, path: str, when: datetime) -> None:
        self.write(path, self.original[path], when)

    def delete(self, path: str) -> None:
        self.full(path).unlink()

    def exists(self, path: str) -> bool:
        return self.full(path).is_file()

    def present(self) -> list[str]:
        return [path for path in self.lineage.paths if self.exists(path)]

    def altered(self) -> list[str]:
        return [
            path
            for path in self.lineage.paths
            if not self.exists(path) or self.full(path).read_bytes() != self.original[path]
        ]

    def edges(self) -> set[tuple[str, str]]:
        """The declared graph as it is now: a deleted file declares nothing."""
        return {(source, path) for path in self.present() for source in self.lineage.sources[path]}

    def broken(self) -> dict[tuple[str, str], EdgeStatus]:
        """Edges whose source no longer holds what it held when every edge was adopted."""
        altered = set(self.altered())
        return {
            (source, path): EdgeStatus.CHANGED if self.exists(source) else EdgeStatus.MISSING
            for source, path in self.edges()
            if source in altered
        }

    def rewrite_keeping_times(self, path: str, how: Rewrite) -> None:
        """Change one character: size, mtime and atime stay exactly as they were."""
        full = self.full(path)
        before = os.stat(full)
        data = bytearray(full.read_bytes())
        marker = data.rindex(b"version ") + len(b"version ")
        data[marker] = ord("0") + (data[marker] - ord("0") + 1) % 10
        if how is Rewrite.IN_PLACE:
            with open(full, "r+b") as handle:
                handle.write(data)
            os.utime(full, ns=(before.st_atime_ns, before.st_mtime_ns))
            _wait_for_new_ctime(full, before)
        else:
            temporary = full.with_name("." + full.name + ".new")
            temporary.write_bytes(data)
            os.utime(temporary, ns=(before.st_atime_ns, before.st_mtime_ns))
            os.replace(temporary, full)
        after = os.stat(full)
        assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)


def _wait_for_new_ctime(full: Path, before: os.stat_result) -> None:
    """Every write moves ctime, but only by the file system's clock granularity:
    an edit within the same tick as the last metadata change is invisible to any
    stat cache (the racy window covers that case, not this test).  Re-apply the
    kept times until the clock has ticked, so the edit is the one a user makes
    long after the scan."""
    while os.stat(full).st_ctime_ns == before.st_ctime_ns:
        os.utime(full, ns=(before.st_atime_ns, before.st_mtime_ns))


def apply(folder: Folder, plan: Mapping[str, tuple[Action, When]], window_start: datetime) -> None:
    """Carry out a plan in its own order; INSIDE edits get an mtime just after
    ``window_start``.  Times depend on the file, never on the order."""
    numbers = {path: number for number, path in enumerate(sorted(plan))}
    for path, (action, when) in plan.items():
        number = numbers[path]
        if not folder.exists(path):
            continue
        if action is Action.DELETE:
            folder.delete(path)
        elif action is Action.REVERT:
            folder.revert(path, window_start + (number + 1) * MINUTE)
        elif action is Action.EDIT:
            base = {When.INSIDE: window_start, When.EARLY: EARLY, When.LATE: LATE}[when]
            folder.edit(path, base + (number + 1) * MINUTE)


def first_seen_dates(folder: Folder, stamped: datetime, now: datetime) -> dict[tuple[str, str], float]:
    """The originating change date of each broken edge stamped at ``stamped`` and first
    seen broken at ``now``: the source's mtime when that lies between the two, else ``now``."""
    dates = {}
    for source, derived in folder.broken():
        mtime = folder.mtime[source] if folder.exists(source) else None
        plausible = mtime is not None and stamped.timestamp() <= mtime <= now.timestamp()
        dates[(source, derived)] = mtime if plausible else now.timestamp()
    return dates


# -- the independent answer -------------------------------------------------------


def expected_causes(
    edges: set[tuple[str, str]],
    broken: Mapping[tuple[str, str], EdgeStatus],
    dates: Mapping[tuple[str, str], float] | None = None,
) -> dict[str, dict[tuple[str, EdgeStatus], tuple[int, float]]]:
    """File -> {(origin, kind): (length of the shortest chain from the origin, earliest date)}.

    A chain starts with a broken edge and goes on along any declared edges, so
    its length is 1 + the networkx distance from the broken edge's target; the
    date is the earliest of the origin's broken edges that reach the file.
    """
    graph = nx.DiGraph(sorted(edges))
    found: dict[str, dict[tuple[str, EdgeStatus], tuple[int, float]]] = defaultdict(dict)
    for edge, kind in broken.items():
        date = dates[edge] if dates is not None else 0.0
        for path, distance in nx.single_source_shortest_path_length(graph, edge[1]).items():
            best = found[path].get((edge[0], kind), (distance + 1, date))
            found[path][(edge[0], kind)] = (min(best[0], distance + 1), min(best[1], date))
    return found


def check_report(
    report: Report,
    edges: set[tuple[str, str]],
    broken: Mapping[tuple[str, str], EdgeStatus],
    dates: Mapping[tuple[str, str], float] | None = None,
) -> None:
    """The report says exactly what the graph, the broken edges and their dates imply."""
    assert {(e.source, e.derived): e.status for e in report.edges} == {
        edge: broken.get(edge, EdgeStatus.CLEAN) for edge in edges
    }
    if dates is not None:
        assert {(e.source, e.derived): e.since for e in report.edges if e.since is not None} == dict(dates)
    expected = expected_causes(edges, broken, dates)
    assert [entry.path for entry in report.stale] == sorted(expected)
    for entry in report.stale:
        check_entry(entry, edges, broken, expected[entry.path], dates)


def check_entry(
    entry: StaleEntry,
    edges: set[tuple[str, str]],
    broken: Mapping[tuple[str, str], EdgeStatus],
    expected: Mapping[tuple[str, EdgeStatus], tuple[int, float]],
    dates: Mapping[tuple[str, str], float] | None,
) -> None:
    keys = [(cause.source, cause.kind) for cause in entry.causes]
    assert keys == sorted(expected, key=lambda key: (key[0], key[1].value))
    for cause in entry.causes:
        via = cause.via
        assert len(via) >= 2 and via[0] == cause.source and via[-1] == entry.path
        assert broken.get((via[0], via[1])) is cause.kind
        assert set(zip(via, via[1:], strict=False)) <= edges
        length, date = expected[(cause.source, cause.kind)]
        assert len(via) - 1 == length
        if dates is not None:
            assert cause.since == date
    assert entry.direct == any(derived == entry.path for _, derived in broken)
    assert entry.since == min(cause.since for cause in entry.causes)


def check_cycles(report: Report, edges: set[tuple[str, str]]) -> None:
    """Each reported cycle is real, and each knot of the graph is reported exactly once."""
    graph = nx.DiGraph(sorted(edges))
    knots = [
        frozenset(component)
        for component in nx.strongly_connected_components(graph)
        if len(component) > 1 or any(graph.has_edge(node, node) for node in component)
    ]
    reported = []
    for cycle in report.cycles:
        assert cycle and len(set(cycle)) == len(cycle)
        for source, derived in zip(cycle, cycle[1:] + cycle[:1], strict=True):
            assert graph.has_edge(source, derived)
        reported.append(next(knot for knot in knots if cycle[0] in knot))
        assert set(cycle) <= reported[-1]
    assert sorted(map(sorted, reported)) == sorted(map(sorted, knots))
    assert list(report.cycles) == sorted(report.cycles)


def clean(report: Report, folder: Folder) -> None:
    check_report(report, folder.edges(), {})
    assert report.stale == ()


def verdict(report: Report) -> list:
    """What is stale and why, without the dates."""
    return [(e.path, e.direct, [(c.source, c.kind, c.via) for c in e.causes]) for e in report.stale]


# -- harness --------------------------------------------------------------------------


@contextmanager
def stat_cache(trusting: bool) -> Iterator[None]:
    """When ``trusting``, make the stat cache trust every file whose metadata is unchanged.

    The scan re-reads a file whose mtime or ctime is within RACY_WINDOW_NS of the
    previous scan's start (real clock), because equal metadata proves nothing
    within the file system's timestamp granularity.  A test folder is always
    younger than that: mtimes can be backdated but ctimes cannot, so without
    this every file would be re-read and neither the cached scan nor the
    no-change fast path would ever run.  A negative window is what a refresh a
    year after the last write sees.  Modules import the constant by name, so
    each module holding it is patched.
    """
    with pytest.MonkeyPatch.context() as patch:
        if trusting:
            holders = [module for module in RACY_HOLDERS if hasattr(module, "RACY_WINDOW_NS")]
            assert holders
            for module in holders:
                patch.setattr(module, "RACY_WINDOW_NS", -YEAR_NS)
        yield


@contextmanager
def memory_folder(lineage: Lineage, order: tuple[str, ...] | None = None) -> Iterator[Folder]:
    with scratch_folder(prefix="provgraph-properties-") as folder:
        root = Path(folder) / "memory"
        root.mkdir()
        yield Folder(root, lineage, order)


@dataclass
class Spy:
    """Which files a refresh opened, and whether it scanned at all."""

    scans: int = 0
    opened: set[str] = field(default_factory=set)

    def reset(self) -> None:
        self.scans = 0
        self.opened = set()


@contextmanager
def spying() -> Iterator[Spy]:
    spy = Spy()
    real_scan, real_read, real_sha256 = provgraph.scan.scan, LocalFiles.read, LocalFiles.sha256

    def scan(*args, **kwargs):
        spy.scans += 1
        return real_scan(*args, **kwargs)

    def read(self, path, limit=None):
        spy.opened.add(path)
        return real_read(self, path, limit)

    def sha256(self, path, meaning=None):
        spy.opened.add(path)
        return real_sha256(self, path, meaning)

    class Rescan(provgraph.scan.Rescan):
        """A scan of the files a small change touched counts as a scan too."""

        def __init__(self, *args, **kwargs):
            spy.scans += 1
            super().__init__(*args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(provgraph.scan, "scan", scan)
        patch.setattr(provgraph.scan, "Rescan", Rescan)
        patch.setattr(provgraph.api, "scan", scan)
        patch.setattr(provgraph.api, "Rescan", Rescan)
        patch.setattr(LocalFiles, "read", read)
        patch.setattr(LocalFiles, "sha256", sha256)
        yield spy


# -- 1. staleness is reachability -------------------------------------------------------


@PROPERTY
@given(scenarios())
def test_stale_files_are_exactly_the_descendants_of_changed_files(scenario):
    lineage, plan, trusting = scenario
    with stat_cache(trusting), memory_folder(lineage) as folder:
        memory = Memory(folder.root)
        first = memory.refresh(now=T0)
        clean(first, folder)
        assert first.cycles == ()
        apply(folder, plan, T0)
        t1 = T0 + DAY
        report = memory.refresh(now=t1)
        edges, broken = folder.edges(), folder.broken()
        check_report(report, edges, broken, first_seen_dates(folder, T0, t1))
        graph = nx.DiGraph(sorted(edges))
        for entry in report.stale:
            for cause in entry.causes:
                assert len(cause.via) - 1 == nx.shortest_path_length(graph, cause.source, entry.path)
        assert memory.refresh(now=t1 + DAY).stale == report.stale


# -- 2. touching changes nothing -------------------------------------------------------------


@PROPERTY
@given(scenarios(acyclic=False), st.data())
def test_touching_files_marks_nothing(scenario, data):
    lineage, plan, trusting = scenario
    times = st.integers(0, 2**33).map(lambda seconds: seconds * 10**9 + 123)
    with stat_cache(trusting), memory_folder(lineage) as folder:
        memory = Memory(folder.root)
        memory.refresh(now=T0)
        for path in data.draw(st.lists(st.sampled_from(lineage.paths), unique=True)):
            os.utime(folder.full(path), ns=(data.draw(times), data.draw(times)))
        clean(memory.refresh(now=T0 + HOUR), folder)
        apply(folder, plan, T0 + HOUR)
        before = memory.refresh(now=T0 + DAY)
        present = folder.present()
        for path in data.draw(st.lists(st.sampled_from(present), unique=True)) if present else ():
            os.utime(folder.full(path), ns=(data.draw(times), data.draw(times)))
        after = memory.refresh(now=T0 + 2 * DAY)
        assert replace(after, scanned_at=before.scanned_at) == before


# -- 3. reverting clears everything ------------------------------------------------------------


@PROPERTY
@given(scenarios(acyclic=False))
def test_reverting_every_edit_clears_every_mark_and_its_date(scenario):
    lineage, plan, trusting = scenario
    t1, t2, t3, t4 = (T0 + n * DAY for n in range(1, 5))
    with stat_cache(trusting), memory_folder(lineage) as folder:
        memory = Memory(folder.root)
        memory.refresh(now=T0)
        apply(folder, plan, T0)
        dates = first_seen_dates(folder, T0, t1)
        check_report(memory.refresh(now=t1), folder.edges(), folder.broken(), dates)
        # a second edit does not move the originating change date
        apply(folder, {path: (Action.EDIT, When.INSIDE) for path in folder.altered()}, t1)
        check_report(memory.refresh(now=t2), folder.edges(), folder.broken(), dates)
        for path in folder.altered():
            folder.revert(path, t2 + HOUR)
        clean(memory.refresh(now=t3), folder)
        # a new mismatch after the revert gets a new date
        apply(folder, {path: (Action.EDIT, When.INSIDE) for path in plan if plan[path][0] is not Action.KEEP}, t3)
        check_report(memory.refresh(now=t4), folder.edges(), folder.broken(), first_seen_dates(folder, T0, t4))


# -- 4. re-stamping: early cutoff ---------------------------------------------------------------


@PROPERTY
@given(scenarios(acyclic=False), st.data())
def test_restamping_clears_what_no_other_cause_reaches(scenario, data):
    lineage, plan, trusting = scenario
    t1, t2, t3, t4 = (T0 + n * DAY for n in range(1, 5))
    with stat_cache(trusting), memory_folder(lineage) as folder:
        memory = Memory(folder.root)
        memory.refresh(now=T0)
        apply(folder, plan, T0)
        memory.refresh(now=t1)
        first_dates = first_seen_dates(folder, T0, t1)
        derived = sorted({path for _, path in folder.edges()})
        assume(derived)
        restamped = data.draw(st.sets(st.sampled_from(derived), min_size=1))
        # re-derivation stamps what each source holds now; a missing source stays missing
        broken = {
            edge: kind
            for edge, kind in folder.broken().items()
            if kind is EdgeStatus.MISSING or edge[1] not in restamped
        }
        report = memory.stamp(sorted(restamped), now=t2)
        check_report(report, folder.edges(), broken)
        assert verdict(memory.refresh(now=t3)) == verdict(report)
        # edit every changed source again: now one origin's edges carry different dates
        apply(folder, {path: (Action.EDIT, When.INSIDE) for path in folder.altered()}, t3)
        restamped_dates = first_seen_dates(folder, t2, t4)
        dates = {
            edge: first_dates[edge]
            if edge[1] not in restamped
            else t2.timestamp()
            if kind is EdgeStatus.MISSING
            else restamped_dates[edge]
            for edge, kind in folder.broken().items()
        }
        check_report(memory.refresh(now=t4), folder.edges(), folder.broken(), dates)


# -- 5. state round trip ---------------------------------------------------------------------------


@PROPERTY
@given(scenarios(acyclic=False))
def test_saved_state_loads_back_equal_and_gives_the_same_report(scenario):
    lineage, plan, trusting = scenario
    with stat_cache(trusting), memory_folder(lineage) as folder:
        memory = Memory(folder.root)
        memory.refresh(now=T0)
        apply(folder, plan, T0)
        report = memory.refresh(now=T0 + DAY)
        if not memory.state_path.exists():  # nothing was ever derived: nothing is written
            assert not report.edges and Memory(folder.root).refresh(now=T0 + DAY) == report
            return
        written = (memory.state_path / "cache.json").read_bytes()
        loaded = decode(written.splitlines(keepends=True), provgraph.__version__, str(memory.root), memory._settings)
        assert loaded is not None and b"".join(encode(loaded, provgraph.__version__)) == written
        assert loaded.last is not None and tuple(loaded.last.edges) == tuple(report.edges)
        assert Memory(folder.root).refresh(now=T0 + DAY) == report
        (memory.state_path / "cache.json").unlink()
        assert Memory(folder.root).refresh(now=T0 + DAY) == report


# -- 6. order independence ------------------------------------------------------------------------


@PROPERTY
@given(scenarios(acyclic=False), st.data())
def test_results_do_not_depend_on_creation_or_entry_order(scenario, data):
    lineage, plan, trusting = scenario
    order = tuple(data.draw(st.permutations(lineage.paths)))
    shuffled = lineage.reordered(
        {path: tuple(data.draw(st.permutations(lineage.sources[path]))) for path in lineage.paths}
    )
    shuffled_plan = dict(data.draw(st.permutations(sorted(plan.items()))))
    reports = []
    with stat_cache(trusting):
        for this_lineage, this_order, this_plan in ((lineage, None, plan), (shuffled, order, shuffled_plan)):
            with memory_folder(this_lineage, this_order) as folder:
                memory = Memory(folder.root)
                first = memory.refresh(now=T0)
                apply(folder, this_plan, T0)
                reports.append((first, memory.refresh(now=T0 + DAY)))
    for ours, theirs in zip(*reports, strict=True):
        assert replace(ours, root="") == replace(theirs, root="")
        assert {**status_document(ours), "root": ""} == {**status_document(theirs), "root": ""}


# -- 7. cycles -------------------------------------------------------------------------------------


@PROPERTY
@given(scenarios(acyclic=False))
def test_cycles_are_real_complete_and_do_not_stop_staleness(scenario):
    lineage, plan, trusting = scenario
    with stat_cache(trusting), memory_folder(lineage) as folder:
        memory = Memory(folder.root)
        first = memory.refresh(now=T0)
        clean(first, folder)
        check_cycles(first, folder.edges())
        apply(folder, plan, T0)
        report = memory.refresh(now=T0 + DAY)
        check_report(report, folder.edges(), folder.broken(), first_seen_dates(folder, T0, T0 + DAY))
        check_cycles(report, folder.edges())


# -- 8. the stat cache and the fast path -----------------------------------------------------------


def _sources_of(lineage: Lineage) -> list[str]:
    return sorted({source for source, _ in lineage.declared})


@PROPERTY
@given(lineages(acyclic=False), st.data())
def test_edit_keeping_mtime_is_detected_through_the_stat_cache(lineage, data):
    """A rewrite that keeps size, mtime and atime is found even when the cache trusts
    old files, as a refresh long after the last write does: in place, ctime moves;
    replaced by a new file, the inode does.  The other files are not read again."""
    assume(_sources_of(lineage))
    edited = data.draw(st.sets(st.sampled_from(_sources_of(lineage)), min_size=1))
    how = data.draw(st.sampled_from(Rewrite))
    with stat_cache(trusting=True), memory_folder(lineage) as folder, spying() as spy:
        memory = Memory(folder.root)
        first = memory.refresh(now=T0)
        spy.reset()
        assert memory.refresh(now=T0 + HOUR) == replace(first, scanned_at=T0 + HOUR)
        assert (spy.scans, spy.opened) == (0, set()), "an unchanged folder is answered by the fast path"
        for path in sorted(edited):
            folder.rewrite_keeping_times(path, how)
        spy.reset()
        report = memory.refresh(now=T0 + DAY)
        assert spy.scans == 1
        assert spy.opened == edited, "only the rewritten files are read again; the cache vouches for the rest"
        check_report(report, folder.edges(), folder.broken())
        spy.reset()
        assert memory.refresh(now=T0 + 2 * DAY).stale == report.stale
        assert spy.scans == 0


class WithoutChangeTime(LocalFiles):
    """A local folder whose metadata has no ctime of its own (it repeats the mtime),
    as on file systems or backends that keep only one timestamp."""

    def walk(self) -> tuple[dict[str, FileMeta], list]:
        listing, problems = super().walk()
        return {path: meta._replace(ctime_ns=meta.mtime_ns) for path, meta in listing.items()}, problems

    def stat(self, path: str) -> FileMeta | None:
        meta = super().stat(path)
        return None if meta is None else meta._replace(ctime_ns=meta.mtime_ns)


@PROPERTY
@given(lineages(acyclic=False), st.data())
def test_edit_within_the_racy_window_is_detected_with_identical_metadata(lineage, data):
    """Files written just before a scan are not trusted at the next one, even when
    nothing in their metadata moved: the real racy window, no patching."""
    assume(_sources_of(lineage))
    edited = data.draw(st.sets(st.sampled_from(_sources_of(lineage)), min_size=1))
    with memory_folder(lineage) as folder:
        files = WithoutChangeTime(folder.root)
        for path in lineage.paths:  # written now, as a file just saved
            os.utime(folder.full(path))
        memory = Memory(folder.root, files=files)
        memory.refresh(now=T0)
        before = {path: files.stat(path) for path in edited}
        for path in sorted(edited):
            folder.rewrite_keeping_times(path, Rewrite.IN_PLACE)
        assert {path: files.stat(path) for path in edited} == before
        report = memory.refresh(now=T0 + DAY)
        check_report(report, folder.edges(), folder.broken())


# -- 9. incremental runs agree ----------------------------------------------------------------------


@PROPERTY
@given(scenarios(acyclic=False), st.data())
def test_incremental_runs_through_the_same_edits_agree(scenario, data):
    lineage, plan, trusting = scenario
    t1, t2 = T0 + DAY, T0 + 2 * DAY
    with stat_cache(trusting), memory_folder(lineage) as folder:
        states = folder.root.parent
        every, twin = Memory(folder.root), Memory(folder.root, state=states / "twin.json")
        rarely = Memory(folder.root, state=states / "rarely.json")
        for memory in (every, twin, rarely):
            memory.refresh(now=T0)
        apply(folder, plan, T0)
        assert every.refresh(now=t1) == twin.refresh(now=t1)
        # no file comes back after a deletion: a returning derived file is judged by its old
        # stamps, which the oracle below does not model
        second = data.draw(plans(lineage, (Action.KEEP, Action.EDIT, Action.DELETE, Action.REVERT)))
        apply(folder, second, t1)
        report = every.refresh(now=t2)
        assert twin.refresh(now=t2) == report
        check_report(report, folder.edges(), folder.broken())
        assert verdict(rarely.refresh(now=t2)) == verdict(report)
        # a first scan adopts what sources hold now; only missing ones cannot be adopted
        fresh = Memory(folder.root, state=states / "fresh.json").refresh(now=t2)
        missing = {edge: kind for edge, kind in folder.broken().items() if kind is EdgeStatus.MISSING}
        check_report(fresh, folder.edges(), missing)


# -- determinism across hash seeds --------------------------------------------------------------------


def test_status_json_is_identical_under_different_hash_seeds(tmp_path):
    # ties (five equally short chains from the profile to the digest), a knot of
    # three with a file naming itself, and several origins: a walk in set or
    # dict order instead of sorted order shows up as a different chain or cycle
    topics = tuple(f"topics/{name}.md" for name in NAMES[:5])
    sources = {
        "facts.md": (),
        "prefs.txt": (),
        "profile.md": ("facts.md",),
        **{topic: ("profile.md", "prefs.txt") for topic in topics},
        "digest.md": topics,
        "loop/a.md": ("loop/c.md", "facts.md"),
        "loop/b.md": ("loop/a.md", "prefs.txt"),
        "loop/c.md": ("loop/b.md", "loop/c.md"),
        "summary.md": ("digest.md", "loop/b.md", *topics),
    }
    paths = tuple(sources)
    lineage = Lineage(
        paths,
        sources,
        {path: Style.COMMA for path in paths},
        {(path, source): Form.RELATIVE for path in paths for source in sources[path]},
    )
    root = tmp_path / "memory"
    root.mkdir()
    folder = Folder(root, lineage)
    environment = {**os.environ, "TZ": "UTC", "PROVGRAPH_NOW": T0.isoformat()}
    seeds = ("1", "2", "3", "4")

    def status(state: Path, seed: str) -> str:
        command = [sys.executable, "-m", "provgraph", "status", str(root), "--json", "--state", str(state)]
        result = subprocess.run(
            command, env={**environment, "PYTHONHASHSEED": seed}, capture_output=True, text=True, check=True
        )
        return result.stdout

    status(tmp_path / "state", "0")
    folder.edit("facts.md", T0)
    folder.edit("prefs.txt", T0)
    for seed in seeds:
        shutil.copytree(tmp_path / "state", tmp_path / f"state-{seed}")
    outputs = {status(tmp_path / f"state-{seed}", seed) for seed in seeds}
    assert len(outputs) == 1
    document_ = json.loads(outputs.pop())
    assert document_["counts"]["stale"] == len(sources) - 2 and document_["cycles"]


_METAS = st.tuples(
    st.integers(0, 2**40), st.integers(-(2**62), 2**62), st.integers(0, 2**62), st.integers(0, 2**64 - 1)
)
_PATHS = st.text(st.characters(blacklist_characters="\0"), min_size=1, max_size=8)
_LISTINGS = st.dictionaries(_PATHS, _METAS, max_size=6)


_NAMES = st.sampled_from([f"f{number}.md" for number in range(12)])
_EDGES = st.lists(
    st.builds(
        Edge,
        source=_NAMES,
        derived=_NAMES,
        status=st.sampled_from(EdgeStatus),
        stamped_at=st.just(1.0),
        since=st.floats(0, 100),
    ),
    max_size=40,
).map(lambda edges: tuple(sorted(edges, key=lambda edge: (edge.derived, edge.source))))


@given(_EDGES, st.sampled_from((0, 1, 3)))
def test_staleness_flows_the_same_whether_children_are_found_one_by_one_or_all_at_once(edges, lookups) -> None:
    """``propagate`` looks a file's children up one by one while few are asked for, then
    indexes every edge: where it switches never changes a stale entry, a cause or a chain."""
    expected = propagate(edges)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(provgraph.lineage, "_LOOKUPS", lookups)
        found = propagate(edges)
    assert found == expected
    assert [[cause.via for cause in entry.causes] for entry in found] == [
        [cause.via for cause in entry.causes] for entry in expected
    ]
