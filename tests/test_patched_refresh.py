"""A refresh after a small change patches the last result, and it is the full scan's result.

When the memory files are the ones the last scan saw, a refresh reads only the files
written since and compares with their stamps only the derived files they touch
(``provgraph.incremental``).  The property below drives one folder through random
edits with two state folders side by side: one refreshed as usual, the other always
by the full scan.  After every step both give the same report, the same lock bytes and
the same cache (read back), whatever the edits: a source edited and edited back to
the content it was stamped with, a file only touched, declarations rewritten so that
cycles form and break, files added, deleted and renamed, a source that is not a
memory file, stamps.  The cache's tables are written in batches, and a patch writes
back the batches it leaves alone as it read them: the property runs with batches of
one and two rows as well, so that every way a change can fall among batches is met.
"""

from __future__ import annotations

import enum
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson
import pytest
import test_incremental as incremental_tests
from depth import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from test_fast_paths import Counting
from test_incremental import Form, trusted_cache

import provgraph.incremental
import provgraph.state
from provgraph import Memory, Report, codec, model, render, stamps
from provgraph.declarations import NOTHING
from provgraph.model import EdgeStatus, FileMeta
from provgraph.nochange import listing_key
from provgraph.scan import Seen
from provgraph.state import StateStore, memory_files, memory_files_read

T0 = datetime(2024, 3, 1, 12, 0, tzinfo=UTC)
DAY = timedelta(days=1)
NAMES = ("alpha", "bravo", "charlie")
PATHS = (*(f"{folder}{name}.md" for folder in ("", "notes/") for name in NAMES), "notes/table.csv")


class Step(enum.Enum):
    EDIT = "edit"
    """Append a line (the file is created when there is none)."""
    REVERT = "revert"
    """Write back the content the file had before its last write."""
    TOUCH = "touch"
    """A new mtime, the same content."""
    DECLARE = "declare"
    DELETE = "delete"
    RENAME = "rename"
    STAMP = "stamp"


_ENTRIES = st.lists(st.tuples(st.sampled_from(PATHS), st.sampled_from(Form)), max_size=3)
_STEPS = st.lists(
    st.tuples(st.sampled_from(Step), st.sampled_from(PATHS), _ENTRIES, st.sampled_from(PATHS)), min_size=1, max_size=8
)


class Folder(incremental_tests.Folder):
    """A memory folder whose every write gets a new mtime, remembering each file's
    content before its last write."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.before: dict[str, bytes] = {}

    def write(self, path: str, data: bytes, when: datetime) -> None:
        if (self.root / path).is_file():
            self.before[path] = (self.root / path).read_bytes()
        super().write(path, data, when)

    def apply(self, step: Step, path: str, entries: list[tuple[str, Form]], other: str, when: datetime) -> None:
        if step is Step.REVERT:
            if path in self.before:
                self.write(path, self.before[path], when)
        elif step is Step.TOUCH:
            if (self.root / path).is_file():
                self.tick += 1
                seconds = int((when - timedelta(hours=1)).timestamp()) + self.tick
                os.utime(self.root / path, ns=(seconds * 10**9, seconds * 10**9))
        else:
            super().apply(incremental_tests.Step(step.value), path, entries, other, when)


@contextmanager
def full_scans_only() -> Iterator[None]:
    """Every refresh in the block scans in full, as before there was a patched path."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(StateStore, "previous", lambda *args: None)
        yield


def _answer(memory: Memory, step: Step, path: str, when: datetime) -> Report | str:
    """A stamp for a stamp step, else a refresh."""
    stamps = step is Step.STAMP
    return incremental_tests._answer(
        memory, incremental_tests.Step.STAMP if stamps else incremental_tests.Step.EDIT, path, when
    )


def _kept(state_folder: Path, root: Path) -> tuple[object, ...]:
    """What a state folder holds, read back: the stamps, the cache's rows and the last result,
    what the no-change rule watches, and what only a patch reads (the broken edges, what
    derives from each file, whether a patch may build on them)."""
    store = StateStore(root, state_folder)
    with store.locked():
        state, last, recall = store.load(), store.last_report(), store.recall()
    lock = state_folder / "provgraph.lock"
    assert recall is not None
    watched = recall.conditions.watched, recall.conditions.listing, recall.conditions.walk_problems
    document = orjson.loads((state_folder / "cache.json").read_bytes())
    index = document["broken"], document["children"], document["edge_batches"] is None
    return state._replace(scan_started_ns=0), last, lock.read_bytes() if lock.exists() else None, watched, index


@settings(max_examples=examples(40), deadline=None)
@given(_STEPS, _STEPS, st.booleans(), st.sampled_from((1, 2, None)))
def test_a_patched_refresh_gives_the_full_scans_report_lock_and_cache(setup, steps, trusting, batch) -> None:
    with tempfile.TemporaryDirectory(prefix="provgraph-patched-") as base, _cache(trusting), _batches_of(batch):
        folder = Folder(Path(base) / "memory")
        folder.root.mkdir()
        for number, (step, path, entries, other) in enumerate(setup):
            folder.apply(Step.DECLARE if step is Step.STAMP else step, path, entries, other, T0 - number * DAY)
        patched, full = Path(base) / "patched", Path(base) / "full"
        Memory(folder.root, state=patched).refresh(now=T0)
        with full_scans_only():
            Memory(folder.root, state=full).refresh(now=T0)
        for number, (step, path, entries, other) in enumerate(steps, start=1):
            when = T0 + number * DAY
            folder.apply(step, path, entries, other, when)
            answer = _answer(Memory(folder.root, state=patched), step, path, when)
            with full_scans_only():
                expected = _answer(Memory(folder.root, state=full), step, path, when)
            assert answer == expected, (step, path)
            assert _kept(patched, folder.root) == _kept(full, folder.root), (step, path)


@contextmanager
def _batches_of(rows: int | None) -> Iterator[None]:
    """The cache's tables written ``rows`` rows (and edges) to a batch; None: as shipped."""
    with pytest.MonkeyPatch.context() as patch:
        if rows is not None:
            patch.setattr(codec, "_BATCH", rows)
        yield


@contextmanager
def _cache(trusting: bool) -> Iterator[None]:
    """Files as old as the racy window allows (their metadata vouches for them), or as
    young as a test's files are (every file is read again, and still patched in)."""
    if trusting:
        with trusted_cache():
            yield
    else:
        yield


def test_a_refresh_after_one_edit_reads_that_file_alone_and_compares_only_what_derives_from_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "memory"
    root.mkdir()
    folder = Folder(root)
    for number in range(30):
        folder.write(f"fact-{number}.md", f"Fact {number}.\n".encode(), T0 - DAY)
    for number in range(10):
        sources = ", ".join(f"fact-{source}.md" for source in (number, number + 10))
        folder.write(f"summary-{number}.md", f"---\nderived_from: {sources}\n---\nA summary.\n".encode(), T0 - DAY)
    compared = []

    def reconcile(records, snapshot, now, restamp=frozenset()):
        compared.append(sorted(snapshot.declarations))
        return stamps.reconcile(records, snapshot, now, restamp)

    monkeypatch.setattr(provgraph.incremental, "reconcile", reconcile)
    with trusted_cache():
        Memory(root).refresh(now=T0)
        folder.write("fact-3.md", b"Fact 3, corrected.\n", T0 + DAY)
        files = Counting(root)
        report = Memory(root, files=files).refresh(now=T0 + DAY)
    assert (sorted(set(files.opened)), compared) == (["fact-3.md"], [["summary-3.md"]])
    assert [(entry.path, [cause.source for cause in entry.causes]) for entry in report.stale] == [
        ("summary-3.md", ["fact-3.md"])
    ]
    assert report.file_count == 40 and len(report.edges) == 20


def test_a_file_added_is_seen_by_the_wiki_links_that_now_name_two_files(tmp_path: Path) -> None:
    folder = Folder(tmp_path)
    folder.write("notes/fact.md", b"A fact.\n", T0 - DAY)
    folder.write("summary.md", b"---\nderived_from: [[fact]]\n---\n", T0 - DAY)
    with trusted_cache():
        Memory(tmp_path).refresh(now=T0)
        folder.write("topics/fact.md", b"Another fact of the same name.\n", T0 + DAY)
        report = Memory(tmp_path).refresh(now=T0 + DAY)
    assert [(problem.path, problem.kind.value) for problem in report.problems] == [("summary.md", "bad-entry")]
    assert report.edges == ()


def _folder_of_facts(root: Path, count: int) -> Folder:
    """``count`` fact files and one summary of every tenth, all a day old."""
    folder = Folder(root)
    for number in range(count):
        folder.write(f"facts/fact-{number:04d}.md", f"Fact {number}.\n".encode(), T0 - DAY)
    for number in range(0, count, 10):
        declaration = f"---\nderived_from: ../facts/fact-{number:04d}.md\n---\nA summary.\n"
        folder.write(f"summaries/summary-{number:04d}.md", declaration.encode(), T0 - DAY)
    return folder


def _batches(cache: bytes) -> set[bytes]:
    """Every batch of rows or edges in the cache, as bytes."""
    return set(cache.split(codec.BATCH_BREAK))


def test_a_patched_refresh_writes_back_the_batches_it_leaves_alone_as_they_were(tmp_path: Path) -> None:
    root = tmp_path / "memory"
    folder = _folder_of_facts(root, 1200)
    cache = root / ".provgraph" / "cache.json"
    with trusted_cache(), _batches_of(50):
        Memory(root).refresh(now=T0)
        with full_scans_only():
            Memory(root, state=tmp_path / "full").refresh(now=T0)
        before = cache.read_bytes()
        folder.write("facts/fact-0500.md", b"Fact 500, corrected.\n", T0 + DAY)
        report = Memory(root).refresh(now=T0 + DAY)
        after = cache.read_bytes()
        with full_scans_only():
            assert Memory(root, state=tmp_path / "full").refresh(now=T0 + DAY) == report
    kept = _batches(before) & _batches(after)
    assert [entry.path for entry in report.stale] == ["summaries/summary-0500.md"]
    # new: the head (with the first batch of edges), the tail (with the last batch of rows),
    # and the batch of rows and the batch of edges that the change falls in
    assert len(_batches(after) - kept) <= 4
    assert len(kept) >= len(_batches(before)) - 4 >= 25


_VERSION_2 = ("children", "edge_batches", "edge_sizes", "broken", "children_batches", "children_sizes", "index_check")
"""What version 2 of the cache added: what a patch reads instead of the last result's edges."""


@pytest.mark.parametrize(
    "removed, version",
    [
        (_VERSION_2, 1),
        ((*_VERSION_2, "row_batches", "memory_files", "others"), 1),
        ((), 1),
        (_VERSION_2[1:], 2),
        ((), 2),
    ],
    ids=["version 1", "version 1 before patches", "version 1 numbered", "version 2 without its index", "version 2"],
)
def test_a_cache_of_an_earlier_layout_is_read_by_a_full_scan_then_patched(
    tmp_path: Path, removed: tuple[str, ...], version: int, logged
) -> None:
    """An earlier cache is as good as this one for the full scan (its rows spare reading every
    file again), and is never set aside nor warned about: the full scan writes it anew."""
    root = tmp_path / "memory"
    folder = _folder_of_facts(root, 30)
    cache = root / ".provgraph" / "cache.json"
    with trusted_cache():
        Memory(root).refresh(now=T0)
        earlier = orjson.loads(cache.read_bytes())
        for key in removed:
            del earlier[key]
        earlier["version"] = version
        cache.write_bytes(orjson.dumps(earlier))
        folder.write("facts/fact-0010.md", b"Fact 10, corrected.\n", T0 + DAY)
        scans = []
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(provgraph.incremental, "reconcile", _counting(scans))
            first = Memory(root).refresh(now=T0 + DAY)
            folder.write("facts/fact-0020.md", b"Fact 20, corrected.\n", T0 + 2 * DAY)
            second = Memory(root).refresh(now=T0 + 2 * DAY)
    assert [entry.path for entry in first.stale] == ["summaries/summary-0010.md"]
    assert [entry.path for entry in second.stale] == ["summaries/summary-0010.md", "summaries/summary-0020.md"]
    assert scans == [["summaries/summary-0020.md"]]  # the first refresh scanned in full, the second patched
    assert sorted(path.name for path in (root / ".provgraph").iterdir()) == ["cache.json", "flock"]
    assert logged.take() == []
    assert orjson.loads(cache.read_bytes())["version"] == codec.VERSION


def _counting(compared: list[list[str]]):  # type: ignore[no-untyped-def]
    """``stamps.reconcile`` as the patch calls it, noting which derived files it compares."""

    def reconcile(records, snapshot, now, restamp=frozenset()):  # type: ignore[no-untyped-def]
        compared.append(sorted(snapshot.declarations))
        return stamps.reconcile(records, snapshot, now, restamp)

    return reconcile


def test_the_memory_files_are_recorded_with_the_no_change_rules_listing_key(tmp_path: Path) -> None:
    listing = {
        f"notes/{name}.md": FileMeta(size, size * 7, size * 11, size * 13)
        for size, name in enumerate(("b", "a", "é", "c"), 1)
    }
    found = memory_files(listing)
    assert found is not None
    paths, files = found
    assert paths == sorted(listing)
    assert files.listing_key == listing_key(listing)
    huge = {**listing, "huge.md": FileMeta(1, 2, 3, 2**64 - 1)}  # more than 64 bits: recorded all the same
    assert memory_files(huge)[1].listing_key == listing_key(huge)


_WORDS = st.text(st.characters(blacklist_characters="\0/"), min_size=1, max_size=6)
_NUMBERS = st.integers(0, 2**63 - 1)


@given(
    st.dictionaries(
        st.lists(_WORDS, min_size=1, max_size=3).map("/".join),
        st.tuples(_NUMBERS, _NUMBERS, _NUMBERS, _NUMBERS).map(lambda numbers: FileMeta(*numbers)),
        max_size=8,
    )
)
def test_any_listing_is_recorded_with_the_no_change_rules_listing_key(listing: dict[str, FileMeta]) -> None:
    """A refresh trusts the recorded key where the quick answer computes its own: any paths
    (a lone surrogate, a name of any script) and any numbers that fit give the same."""
    found = memory_files(dict(reversed(list(listing.items()))))
    assert found is not None
    assert found[0] == sorted(listing)
    assert found[1].listing_key == listing_key(listing)


_LISTINGS = st.dictionaries(
    st.sampled_from(["a.md", "b.md", "c/d.md"]),
    st.tuples(*[st.integers(0, 2)] * 4).map(lambda numbers: FileMeta(*numbers)),
    max_size=3,
)


@settings(max_examples=examples(400), deadline=None)
@given(_LISTINGS, _LISTINGS, _LISTINGS)
def test_the_files_read_are_those_listed_exactly_when_their_listing_keys_agree(
    listing: dict[str, FileMeta], read: dict[str, FileMeta], others: dict[str, FileMeta]
) -> None:
    """A full scan keeps its no-change record only while the files it read are the listing;
    it compares the two instead of digesting the listing again, which must tell the same."""
    seen = {path: Seen(meta, None, NOTHING) for path, meta in read.items()}
    seen |= {"x/" + path: Seen(meta) for path, meta in others.items()}  # sources: not memory files read
    recorded = memory_files(read)[1].listing_key
    assert (memory_files_read(seen) == listing) == (listing_key(listing) == recorded)


_TIMES = st.integers(0, 9)


@given(st.lists(st.tuples(_TIMES, _TIMES, st.booleans()), min_size=1, max_size=12), _TIMES)
def test_a_refresh_reads_again_exactly_the_files_whose_metadata_moved_or_that_are_racy(
    files: list[tuple[int, int, bool]], racy_from_ns: int
) -> None:
    """A file whose metadata moved was written; one written at or after the racy mark may
    have been written again within the same tick: both are read again, no other.  The last
    scan's record is compared as the cache holds it (its metadata in base64, undecoded)."""
    before = {f"f{index:02d}.md": FileMeta(1, mtime, ctime, index) for index, (mtime, ctime, _) in enumerate(files)}
    now = {
        f"f{index:02d}.md": FileMeta(1 + moved, mtime, ctime, index)
        for index, (mtime, ctime, moved) in enumerate(files)
    }
    old, new = memory_files(before, racy_from_ns), memory_files(now)
    assert old is not None and new is not None
    changed = provgraph.incremental.changed_files(_read_back(old[1]), new[1], new[0], now, _rows(before))
    expected = {
        path
        for path, (mtime, ctime, moved) in zip(before, files, strict=True)
        if moved or mtime >= racy_from_ns or ctime >= racy_from_ns
    }
    assert changed == expected


@given(
    st.lists(st.tuples(_TIMES, _TIMES), min_size=1, max_size=12),
    st.dictionaries(st.integers(0, 11), st.tuples(_TIMES, _TIMES), max_size=12),
    _TIMES,
    st.integers(0, 3),
)
def test_the_files_racy_at_the_next_scan_are_found_among_the_few_a_patch_reads(
    files: list[tuple[int, int]], written: dict[int, tuple[int, int]], racy_from_ns: int, later: int
) -> None:
    """A patch looks at the times of the files it read again (those whose metadata moved,
    and those the last record named racy), no other, and finds the same files racy at the
    next scan as a look at every file's times: a file whose metadata did not move had its
    times before the last mark."""
    paths = [f"f{index:02d}.md" for index in range(len(files))]
    before = {
        path: FileMeta(1, mtime, ctime, index)
        for index, (path, (mtime, ctime)) in enumerate(zip(paths, files, strict=True))
    }
    now = dict(before)
    for index, (mtime, ctime) in written.items():
        if index < len(paths):
            now[paths[index]] = FileMeta(2, mtime, ctime, index)
    old, new = memory_files(before, racy_from_ns), memory_files(now, racy_from_ns + later)
    assert old is not None and new is not None
    read = provgraph.incremental.changed_files(_read_back(old[1]), new[1], new[0], now, _rows(before))
    assert read is not None
    found = provgraph.incremental.still_racy(read, now, racy_from_ns + later)
    assert found == new[1].racy
    assert set(found) == {
        path for path, meta in now.items() if max(meta.mtime_ns, meta.ctime_ns) >= racy_from_ns + later
    }


def _rows(listing: dict[str, FileMeta]) -> dict[str, list[object]]:
    """The rows a scan of ``listing`` writes, as far as a refresh compares them (metadata first)."""
    return {path: [*meta, None, None] for path, meta in listing.items()}


def _read_back(files: provgraph.incremental.MemoryFiles) -> provgraph.incremental.MemoryFiles:
    """The record as a refresh reads it back from the cache."""
    encoded = orjson.loads(orjson.dumps(provgraph.state._encode_memory_files(files)))
    return provgraph.state._decode_memory_files(encoded, files.listing_key)


@given(st.integers(1, 400), st.sets(st.integers(0, 399), max_size=8))
def test_in_a_large_folder_the_files_read_again_are_found_across_every_compared_chunk(
    count: int, moved: set[int]
) -> None:
    """The records are compared a part at a time (a digest of 64 files' metadata), and the
    files of a part that differs against their rows: a file whose metadata moved is found
    wherever it falls, first or last of a part, or in the last one, and no other."""
    before = {f"f{index:03d}.md": FileMeta(1, 0, 0, index) for index in range(count)}
    now = {path: meta._replace(size=2) if index in moved else meta for index, (path, meta) in enumerate(before.items())}
    old, new = memory_files(before, 1), memory_files(now)
    assert old is not None and new is not None
    changed = provgraph.incremental.changed_files(_read_back(old[1]), new[1], new[0], now, _rows(before))
    assert changed == {f"f{index:03d}.md" for index in moved if index < count}
    assert new[1].listing_key == listing_key(now)  # the numbers of many parts, digested as one


_PAYLOADS = st.lists(st.binary(min_size=1, max_size=6).filter(lambda data: b",\n" not in data), max_size=6)


@given(_PAYLOADS, st.sampled_from((1, 2, 3, 5, 1 << 20)), st.binary(max_size=3))
def test_the_batches_of_a_table_are_found_however_the_file_is_read_in_chunks(payloads, chunk, before) -> None:
    """A patched refresh finds where each batch of the cache's tables is by reading the file
    a chunk at a time: a break between batches may straddle two chunks."""
    table = b"[" + codec.BATCH_BREAK.join(payloads) + b"]"
    data = before + table
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(codec, "_SCAN", chunk)
        spans = codec._spans(lambda low, high: data[low:high], len(before), len(data), b"[", b"]")
    assert [data[start:stop] for start, stop in spans] == payloads


def test_a_patched_refresh_makes_an_edge_only_for_the_edges_the_change_reaches(tmp_path: Path) -> None:
    """The last result's edges are read as columns (``EdgeTable``): a change reaches a few of
    them, and the status is printed (and the cache written) without an object per edge."""
    root = tmp_path / "memory"
    folder = _folder_of_facts(root, 2000)
    made: list[object] = []

    class CountedEdge(model.Edge):
        __slots__ = ()

        def __init__(self, *fields: object) -> None:
            made.append(fields)
            super().__init__(*fields)  # type: ignore[arg-type]

    with trusted_cache():
        Memory(root).refresh(now=T0)
        folder.write("facts/fact-0500.md", b"Fact 500, corrected.\n", T0 + DAY)
        with pytest.MonkeyPatch.context() as patch:
            for module in (model, codec, stamps):
                patch.setattr(module, "Edge", CountedEdge)
            report = Memory(root).refresh(now=T0 + DAY)
            shown = render.status_json(report)
    assert len(report.edges) == 200 and isinstance(report.edges, model.EdgeTable)
    assert [entry.path for entry in report.stale] == ["summaries/summary-0500.md"]
    assert orjson.loads(shown)["counts"]["derived"] == 200
    assert len(made) <= 3, made  # the changed edge as compared, as it was, and as it is propagated


_DATE = st.one_of(st.none(), st.floats(0, 253402300799.0), st.integers(0, 2**31))
_EDGE_ROW = st.tuples(
    st.sampled_from(PATHS),
    st.sampled_from(PATHS),
    st.sampled_from([status.value for status in EdgeStatus]),
    _DATE,
    _DATE,
    st.one_of(st.none(), st.sampled_from(PATHS)),
)


@given(st.lists(st.lists(_EDGE_ROW, max_size=4), max_size=4))
def test_edges_read_as_columns_are_the_edges_read_one_by_one(batches) -> None:
    """Each batch's columns are checked as a whole: what they hold is what ``decode_edges``
    makes of each row (whole-number dates included), and the table equals that tuple."""
    tables = [codec.decode_edge_rows(orjson.dumps(batch)[1:-1]) for batch in batches if batch]
    edges = model.EdgeTable.joined(tables)
    expected = codec.decode_edges([list(row) for batch in batches for row in batch])
    assert edges == expected and expected == edges and hash(edges) == hash(expected)
    assert tuple(edges[index] for index in range(len(edges))) == expected == tuple(edges)
    assert edges[1:3] == expected[1:3] and model.EdgeTable.joined([edges[:1], expected[1:]]) == expected
    assert list(map(len, tables)) == [len(batch) for batch in batches if batch]


@pytest.mark.parametrize(
    "row",
    [
        ["a.md", "b.md", "clean", 1.0, None],
        ["a.md", 2, "clean", 1.0, None, None],
        ["a.md", "b.md", "fresh", 1.0, None, None],
        ["a.md", "b.md", "clean", -1.0, None, None],
        ["a.md", "b.md", "changed", 1.0, 1e12, None],
        ["a.md", "b.md", "missing", 1.0, 2.0, 3],
        "a.md",
    ],
)
def test_a_damaged_edge_in_the_cache_is_refused_as_a_whole_batch(row: object) -> None:
    good = ["c.md", "d.md", "clean", 1.0, None, None]
    with pytest.raises((codec.Corrupt, KeyError, TypeError, ValueError)):
        codec.decode_edge_rows(orjson.dumps([good, row])[1:-1])


@given(_PAYLOADS, st.binary(max_size=3))
def test_the_batches_of_a_table_are_where_the_sizes_written_beside_it_say(payloads, before) -> None:
    """The cache records the size of each part its per-file table was written in: a patched
    refresh finds the batches from them, as it would by searching the table."""
    sizes: list[int] = []
    table = b"".join(codec.sized(codec._in_batches(b"{", iter(payloads), b"}"), sizes))
    data = before + table
    spans = codec.sized_spans(len(before), len(data), sizes)
    assert spans == codec._spans(lambda low, high: data[low:high], len(before), len(data), b"{", b"}")
    assert codec.sized_spans(len(before), len(data) + 1, sizes) is None
    assert codec.sized_spans(len(before), len(data), [*sizes[:-1], "1"]) is None


def test_a_patched_refresh_parses_only_the_batches_it_reaches_and_searches_no_table(tmp_path: Path) -> None:
    """The last result's edges and the per-file rows are in batches whose sizes the cache
    records: a change to one source parses the batch of edges where that file would be (it
    is derived from nothing) and the batch of the one file derived from it, no table is
    searched for its batches, the status is printed from the index of the edges, and
    every other batch is written back unparsed."""
    root = tmp_path / "memory"
    folder = _folder_of_facts(root, 1200)
    searched: list[bytes] = []
    parsed: list[int] = []
    search, decode = codec._spans, codec.decode_edge_rows

    def spans(read, start, end, opening, closing):  # type: ignore[no-untyped-def]
        searched.append(opening)
        return search(read, start, end, opening, closing)

    def counted(rows):  # type: ignore[no-untyped-def]
        table = decode(rows)
        parsed.append(len(table))
        return table

    with trusted_cache(), _batches_of(10):
        Memory(root).refresh(now=T0)
        with full_scans_only():
            Memory(root, state=tmp_path / "full").refresh(now=T0)
        folder.write("facts/fact-0500.md", b"Fact 500, corrected.\n", T0 + DAY)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(codec, "_spans", spans)
            patch.setattr(codec, "decode_edge_rows", counted)
            report = Memory(root).refresh(now=T0 + DAY)
            shown = orjson.loads(render.status_json(report))
        batches = len(orjson.loads((root / ".provgraph" / "cache.json").read_bytes())["edge_batches"])
        with full_scans_only():
            assert Memory(root, state=tmp_path / "full").refresh(now=T0 + DAY) == report
    assert [entry.path for entry in report.stale] == ["summaries/summary-0500.md"]
    assert shown["counts"] == {"files": 1320, "derived": 120, "stale": 1, "cycles": 0, "problems": 0}
    assert searched == [] and batches == 12 and len(parsed) <= 2, parsed


def test_a_damaged_index_of_the_cache_batches_is_answered_by_the_full_scan(tmp_path: Path) -> None:
    """The cache's first path of a batch replaced by another value: a patched refresh that
    meets it while writing gives way to the full scan, before it has written anything."""
    root = tmp_path / "memory"
    root.mkdir()
    folder = Folder(root)
    for name in ("a", "c", "d"):
        folder.write(f"{name}.md", f"---\nderived_from: b.md, gone.md\n---\n{name}.\n".encode(), T0 - DAY)
    folder.write("b.md", b"B.\n", T0 - DAY)
    Memory(root).refresh(now=T0)
    cache = root / ".provgraph" / "cache.json"
    document = orjson.loads(cache.read_bytes())
    document["row_batches"][0] = "h"
    cache.write_bytes(orjson.dumps(document))
    report = Memory(root).refresh(now=T0 + DAY)  # the files are young: each is read again
    assert sorted(entry.path for entry in report.stale) == ["a.md", "c.md", "d.md"]
    assert orjson.loads(cache.read_bytes())["row_batches"][0] == "a.md"


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)


def _a_lineage(root: Path) -> Folder:
    """A folder with every kind of edge: stale through a chain, a missing source, a cycle, a
    source that is not a memory file, and more edges than fit in one batch (of two)."""
    folder = Folder(root)
    folder.write("a.md", b"A.\n", T0 - DAY)
    folder.write("table.csv", b"x,y\n", T0 - DAY)
    declarations = {
        "b.md": "a.md, gone.md",
        "c.md": "b.md, table.csv",
        "d.md": "c.md, e.md",
        "e.md": "d.md",
        "f.md": "a.md",
    }
    for path, sources in declarations.items():
        folder.write(path, f"---\nderived_from: {sources}\n---\n{path}\n".encode(), T0 - DAY)
    return folder


def _damaged(cache: bytes, document: dict[str, object], data: st.DataObject) -> bytes:
    """The cache with one value of a part only a patch reads replaced, in place (the rest of
    the bytes as written): a top-level entry (the sizes of the batches of rows too, which
    say where what derives from each file starts), a row of what derives from a file, an edge."""
    where = data.draw(st.sampled_from([*_VERSION_2, "row_sizes", *["children row", "edge"] * 4]))  # many of those
    if where == "children row":
        children = document["children"]
        assert isinstance(children, dict)
        source = data.draw(st.sampled_from(sorted(children)))
        old = orjson.dumps({source: children[source]})[1:-1]
        kids = st.lists(st.sampled_from([*PATHS, "b.md", "f.md"]), max_size=3)
        new = orjson.dumps({source: data.draw(st.one_of(kids, _JSON))})[1:-1]
    elif where == "edge":
        edges = document["report"]["edges"]  # type: ignore[index]
        row = data.draw(st.sampled_from(edges))
        column = data.draw(st.integers(0, 5))
        old = orjson.dumps(row)
        value = st.one_of(st.sampled_from(["clean", "changed", "missing", "a.md", "b.md", 0.0, 1e9]), _JSON)
        new = orjson.dumps([*row[:column], data.draw(value), *row[column + 1 :]])
    elif where == "children":  # the whole table, written a batch to a line
        start = cache.index(b',"children":')
        old = cache[start : cache.index(b',"refused":', start)]
        new = b',"children":' + orjson.dumps(data.draw(_JSON))
    else:
        old = b'"' + where.encode() + b'":' + orjson.dumps(document[where])
        new = b'"' + where.encode() + b'":' + orjson.dumps(data.draw(_JSON))
    assert cache.count(old) >= 1
    return cache.replace(old, new, 1)


def _spoiled_then_changed(spoil: Callable[[bytes], bytes]) -> None:
    """A lineage refreshed with the state in one folder and by the full scan with the state
    in another; the first one's cache replaced by ``spoil`` of its bytes; then two changes
    (sources, then a file in a chain and a cycle), each refreshed alike: the same answers."""
    with tempfile.TemporaryDirectory(prefix="provgraph-spoiled-") as base, trusted_cache(), _batches_of(2):
        folder = _a_lineage(Path(base) / "memory")
        patched, full = Path(base) / "patched", Path(base) / "full"
        Memory(folder.root, state=patched).refresh(now=T0)
        with full_scans_only():
            Memory(folder.root, state=full).refresh(now=T0)
        (patched / "cache.json").write_bytes(spoil((patched / "cache.json").read_bytes()))
        for number, edited in enumerate((("a.md", "table.csv"), ("c.md",)), 1):
            for path in edited:
                folder.apply(Step.EDIT, path, [], path, T0 + number * DAY)
            answer = Memory(folder.root, state=patched, warn=lambda _: None).refresh(now=T0 + number * DAY)
            with full_scans_only():
                assert answer == Memory(folder.root, state=full).refresh(now=T0 + number * DAY)


@settings(max_examples=examples(100), deadline=None)
@given(st.data())
def test_damage_to_what_only_a_patch_reads_gives_the_full_scans_answer(data: st.DataObject) -> None:
    """Any one value of the parts of the cache that a patch reads instead of the last
    result's edges (their index, the broken edges, what derives from each file, their
    checksum), or of an edge itself, replaced by any JSON value: the next refresh after a
    change answers as the full scan does, and so does the one after it."""
    _spoiled_then_changed(lambda cache: _damaged(cache, orjson.loads(cache), data))


@settings(max_examples=examples(100), deadline=None)
@given(st.data())
def test_a_cache_torn_by_a_crash_of_the_machine_gives_the_full_scans_answer(data: st.DataObject) -> None:
    """The cache is not synced to the disk (it is derived again from the files and the
    lock), so a crash of the machine may leave it cut short, or with pages of zeros where
    the new bytes had not reached the disk: either is detected, and the next refreshes
    answer as the full scan does."""

    def torn(cache: bytes) -> bytes:
        start = data.draw(st.integers(0, len(cache) - 1))
        if data.draw(st.booleans()):
            return cache[:start]
        end = min(len(cache), start + data.draw(st.integers(1, 4096)))
        return cache[:start] + bytes(end - start) + cache[end:]

    _spoiled_then_changed(torn)


@given(st.binary(max_size=40), st.sampled_from((1, 2, 3, 5, 1 << 20)))
def test_the_tail_of_the_cache_is_found_however_the_file_is_read_in_chunks(data: bytes, chunk: int) -> None:
    """A patch reads the small entries after the cache's tables from the end of the file, a
    growing chunk at a time: it finds the last mark, even one split between two chunks."""
    mark = b',"r":'
    data = data.replace(b"\0", b",")[: len(data) // 2] + mark + data[len(data) // 2 :]
    with tempfile.TemporaryFile() as handle, pytest.MonkeyPatch.context() as patch:
        handle.write(data)
        handle.flush()
        patch.setattr(provgraph.state, "_TAIL_CHUNK", chunk)
        found = provgraph.state._read_tail(handle.fileno(), mark)
        missing = provgraph.state._read_tail(handle.fileno(), b"no such mark")
    at = data.rfind(mark)
    assert found == (at, data[at:])
    assert missing is None


_LOCK_PATHS = st.lists(
    st.sampled_from(["a.md", "b.md", "b/c.md", "d é.md", "e.md"]), min_size=1, max_size=3, unique=True
)


@settings(max_examples=examples(60), deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["a.md", "b.md", "b/c.md", "d é.md"]),
        st.dictionaries(
            st.sampled_from(["s.md", "t.md", "u/v.md"]),
            st.sampled_from(["a" * 64, "b" * 64, ""]),
            min_size=1,
            max_size=3,
        ),
        max_size=4,
    ),
    _LOCK_PATHS,
    st.sampled_from((1, 2, 7, 64, 4096)),
)
def test_a_lock_read_where_a_patch_looks_gives_what_its_bytes_give(
    table: dict[str, dict[str, str]], asked: list[str], block: int
) -> None:
    """A patch reads the lock's lines from the open file a block at a time, where its binary
    search looks: the stamps, the lines it replaces and the lock it writes are those the
    whole bytes give, whatever the size of the blocks."""
    derivations = {
        derived: stamps.Derivation(None, {source: model.Stamp(sha or None, 1.5) for source, sha in sources.items()})
        for derived, sources in table.items()
    }
    data = codec.lock_bytes(derivations, True)
    assert data is not None
    updated = {path: stamps.Derivation("2026-11-10", {"s.md": model.Stamp("f" * 64, 2.0)}) for path in asked[:1]}
    with tempfile.TemporaryDirectory() as folder, pytest.MonkeyPatch.context() as patch:
        patch.setattr(provgraph.state, "_LOCK_BLOCK", block)
        Path(folder, "lock").write_bytes(data)
        descriptor = os.open(Path(folder, "lock"), os.O_RDONLY)
        try:
            paged = provgraph.incremental.LockLines.of(provgraph.state._PagedLock(descriptor, len(data)), False)
            whole = provgraph.incremental.LockLines.of(data, False)
            assert paged is not None and whole is not None
            assert [paged.has(path) for path in asked] == [whole.has(path) for path in asked]
            assert (
                paged.derivations(asked)
                == whole.derivations(asked)
                == {path: derivations[path] for path in asked if path in derivations}
            )
            assert paged.replaced(asked, updated) == whole.replaced(asked, updated) is not None
        finally:
            os.close(descriptor)
