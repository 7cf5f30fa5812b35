"""A refresh after a small change patches the last result, and it is the full scan's result.

When the memory files are the ones the last scan saw, a refresh reads only the files
written since and compares with their stamps only the derived files they touch
(``provgraph.incremental``).  The property below drives one folder through random
edits with two state folders side by side: one refreshed as usual, the other always
by the full scan.  After every step both give the same report, the same lock bytes and
the same cache (read back), whatever the edits: a source edited and edited back to
the content it was stamped with, a file only touched, declarations rewritten so that
cycles form and break, files added, deleted and renamed, a source that is not a
memory file, stamps.
"""

from __future__ import annotations

import enum
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import test_incremental as incremental_tests
from cachefile import check_line, document, written
from depth import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from stress.test_faults import _paths, _replaced
from test_fast_paths import Counting
from test_incremental import Form, trusted_cache

import provgraph
import provgraph.incremental
from provgraph import Memory, Report, model, stamps
from provgraph.api import Memory as ApiMemory
from provgraph.store import cache as cache_module
from provgraph.store.cache import decode
from provgraph.store.lock import encode_rows, lock_row

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
        patch.setattr(ApiMemory, "_patched", lambda *args: None)
        yield


def _answer(memory: Memory, step: Step, path: str, when: datetime) -> Report | str:
    """A stamp for a stamp step, else a refresh."""
    stamps = step is Step.STAMP
    return incremental_tests._answer(
        memory, incremental_tests.Step.STAMP if stamps else incremental_tests.Step.EDIT, path, when
    )


def _kept(state_folder: Path, root: Path) -> tuple[object, ...]:
    """What a state folder holds, read back: the lock's bytes, and the cache's rows, last
    result, walk problems, refused and watched sources."""
    lock = state_folder / "provgraph.lock"
    memory = Memory(root, state=state_folder)
    lines = (state_folder / "cache.json").read_bytes().splitlines(keepends=True)
    cache = decode(lines, provgraph.__version__, str(root), memory._settings)
    assert cache is not None
    kept = cache.rows, cache.last, cache.walk_problems, cache.refused, cache.watched, cache.memory
    return lock.read_bytes() if lock.exists() else None, kept


@settings(max_examples=examples(40), deadline=None)
@given(_STEPS, _STEPS, st.booleans())
def test_a_patched_refresh_gives_the_full_scans_report_lock_and_cache(setup, steps, trusting) -> None:
    with tempfile.TemporaryDirectory(prefix="provgraph-patched-") as base, _cache(trusting):
        folder = Folder(Path(base) / "memory")
        folder.root.mkdir()
        folder.write(
            "MEMORY.md", b"- [A](alpha.md) \xe2\x80\x94 a\n- [[bravo]]\n- [Gone](gone.md)\n", T0 - DAY
        )  # an index too
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


def _decoded_lines(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The paths of every line of the cache's rows decoded from now on, a line of three rows."""
    decoded: list[list[str]] = []

    def checked_rests(rests, paths, others):
        decoded.append(paths)
        return checked(rests, paths, others)

    checked = cache_module._checked_rests
    monkeypatch.setattr(cache_module, "ROWS_AT_ONCE", 3)
    monkeypatch.setattr(cache_module, "_checked_rests", checked_rests)
    return decoded


def test_a_patch_decodes_only_the_rows_it_reads_however_many_other_sources(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stats of sources that are not memory files are compared without decoding their rows."""
    folder = _folder_of_facts(tmp_path, 60)
    for number in range(0, 60, 10):
        folder.write(f"facts/fact-{number:04d}.txt", b"A table.\n", T0 - DAY)
        declaration = f"---\nderived_from: [../facts/fact-{number:04d}.md, ../facts/fact-{number:04d}.txt]\n---\n"
        folder.write(f"summaries/summary-{number:04d}.md", declaration.encode(), T0 - DAY)
    decoded = _decoded_lines(monkeypatch)
    with trusted_cache():
        Memory(tmp_path).refresh(now=T0)
        folder.write("facts/fact-0020.md", b"Fact 20, corrected.\n", T0 + DAY)
        decoded.clear()
        report = Memory(tmp_path).refresh(now=T0 + DAY)
    assert [entry.path for entry in report.stale] == ["summaries/summary-0020.md"]
    assert len(decoded) <= 3 and any("facts/fact-0020.txt" in paths for paths in decoded), decoded


def test_a_patch_that_adds_or_drops_a_source_of_another_kind_keeps_the_rows_lazy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A declared table that appears, then stops being a source, changes which rows the
    cache holds: the refreshes after it still decode only the lines they read, and answer
    as the full scan."""
    root = tmp_path / "memory"
    folder = _folder_of_facts(root, 60)
    folder.write("facts/zz-table.txt", b"A table.\n", T0 - DAY)
    decoded = _decoded_lines(monkeypatch)
    memory, full = Memory(root), ApiMemory(root, state=tmp_path / "state", trust_cache=False)
    declared = b"---\nderived_from: [../facts/fact-0050.md, ../facts/zz-table.txt]\n---\n"
    with trusted_cache():
        assert memory.refresh(now=T0) == full.refresh(now=T0)
        for when, (path, data) in enumerate(
            [
                ("summaries/summary-0050.md", declared),
                ("facts/fact-0020.md", b"Fact 20, corrected.\n"),
                ("summaries/summary-0050.md", b"No longer derived.\n"),
                ("facts/fact-0030.md", b"Fact 30, corrected.\n"),
            ],
            start=1,
        ):
            folder.write(path, data, T0 + when * DAY)
            decoded.clear()
            report = memory.refresh(now=T0 + when * DAY)
            assert len(decoded) <= 4, (path, decoded)
            assert report == full.refresh(now=T0 + when * DAY)
    assert [entry.path for entry in report.stale] == ["summaries/summary-0020.md", "summaries/summary-0030.md"]


def test_the_first_patch_after_a_full_scan_in_the_same_process_encodes_only_the_rows_it_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rows the full scan encoded to write the cache are the ones the patch writes over:
    it encodes the rows of the files it read again (the one edited, the one derived from it)."""
    folder = _folder_of_facts(tmp_path, 60)
    encoded, encoded_row = [], cache_module.encode_row

    def encode_row(row):
        encoded.append(row.meta)
        return encoded_row(row)

    memory = Memory(tmp_path)
    with trusted_cache():
        memory.refresh(now=T0)
        folder.write("facts/fact-0020.md", b"Fact 20, corrected.\n", T0 + DAY)
        monkeypatch.setattr(cache_module, "encode_row", encode_row)
        monkeypatch.setattr(provgraph.incremental, "encode_row", encode_row)
        report = memory.refresh(now=T0 + DAY)
    assert [entry.path for entry in report.stale] == ["summaries/summary-0020.md"]
    assert len(encoded) <= 2


@pytest.mark.parametrize(
    "written_by",
    [
        pytest.param({"provgraph": "0.0.1"}, id="another-version"),
        pytest.param({"schema": 0}, id="another-schema"),
        pytest.param({"version": 3, "schema": None}, id="the-first-releases-layout"),
    ],
)
def test_a_cache_of_another_provgraph_is_rebuilt_by_a_full_scan_then_patched(
    tmp_path: Path, written_by: dict[str, object], logged
) -> None:
    """A cache another provgraph wrote is never read: a full scan answers, without a warning
    and without setting it aside, and the cache it writes is patched from then on."""
    root = tmp_path / "memory"
    folder = _folder_of_facts(root, 30)
    cache = root / ".provgraph" / "cache.json"
    with trusted_cache():
        Memory(root).refresh(now=T0)
        other = document(cache.read_bytes())
        other.update(written_by)
        if other.get("schema") is None:
            del other["schema"]
        cache.write_bytes(written(other))
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
    assert document(cache.read_bytes())["provgraph"] == provgraph.__version__


def _counting(compared: list[list[str]]):  # type: ignore[no-untyped-def]
    """``stamps.reconcile`` as the patch calls it, noting which derived files it compares."""

    def reconcile(records, snapshot, now, restamp=frozenset()):  # type: ignore[no-untyped-def]
        compared.append(sorted(snapshot.declarations))
        return stamps.reconcile(records, snapshot, now, restamp)

    return reconcile


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


def _damaged(cache: bytes, data: st.DataObject) -> bytes:
    """The cache with any one of its values (a key, a row, a number in a row, an edge, the
    last result, ...) replaced by any JSON value."""
    found = document(cache)
    where = data.draw(st.sampled_from(_paths(found)[1:]))
    return written(_replaced(found, where, data.draw(_JSON)), check_line(cache))


def _spoiled_then_changed(spoil: Callable[[bytes], bytes]) -> None:
    """A lineage refreshed with the state in one folder and by the full scan with the state
    in another; the first one's cache replaced by ``spoil`` of its bytes; then a refresh of
    the folder unchanged and two changes (sources, then a file in a chain and a cycle), each
    refreshed alike: the same answers."""
    with tempfile.TemporaryDirectory(prefix="provgraph-spoiled-") as base, trusted_cache():
        folder = _a_lineage(Path(base) / "memory")
        patched, full = Path(base) / "patched", Path(base) / "full"
        Memory(folder.root, state=patched).refresh(now=T0)
        with full_scans_only():
            Memory(folder.root, state=full).refresh(now=T0)
        (patched / "cache.json").write_bytes(spoil((patched / "cache.json").read_bytes()))
        for number, edited in enumerate(((), ("a.md", "table.csv"), ("c.md",)), 1):  # nothing changed first
            for path in edited:
                folder.apply(Step.EDIT, path, [], path, T0 + number * DAY)
            answer = Memory(folder.root, state=patched, warn=lambda _: None).refresh(now=T0 + number * DAY)
            with full_scans_only():
                assert answer == Memory(folder.root, state=full).refresh(now=T0 + number * DAY)


@settings(max_examples=examples(100), deadline=None)
@given(st.data())
def test_any_damage_to_the_cache_gives_the_full_scans_answer(data: st.DataObject) -> None:
    """Any one value of the cache (its key, a row or a number in it, an edge, the last
    result, the lock's record, ...) replaced by any JSON value: the next refresh after a
    change answers as the full scan does, and so does the one after it, without a traceback."""
    _spoiled_then_changed(lambda cache: _damaged(cache, data))


@settings(max_examples=examples(100), deadline=None)
@given(st.binary(max_size=200))
def test_a_cache_of_random_bytes_gives_the_full_scans_answer(noise: bytes) -> None:
    """Whatever bytes stand where the cache is, the refreshes answer as the full scan does."""
    _spoiled_then_changed(lambda cache: noise)


@settings(max_examples=examples(100), deadline=None)
@given(st.data())
def test_a_cache_torn_by_a_crash_of_the_machine_gives_the_full_scans_answer(data: st.DataObject) -> None:
    """The cache is not synced to the disk (it is derived again from the files and the
    lock), so a crash of the machine may leave it cut short, or with pages of zeros where
    the new bytes had not reached the disk: either is detected, and the next refreshes
    answer as the full scan does."""

    where, cut, zeros = (
        data.draw(st.floats(0, 1, exclude_max=True)),
        data.draw(st.booleans()),
        data.draw(st.integers(1, 4096)),
    )

    def torn(cache: bytes) -> bytes:
        start = int(where * len(cache))
        if cut:
            return cache[:start]
        end = min(len(cache), start + zeros)
        return cache[:start] + bytes(end - start) + cache[end:]

    _spoiled_then_changed(torn)


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
)
def test_the_lines_a_patch_replaces_in_the_lock_are_those_the_whole_lock_gives(
    table: dict[str, dict[str, str]], asked: list[str]
) -> None:
    """A patch finds a derived file's lines by a binary search over the lock's bytes: the
    stamps it reads and the lock it writes are those of decoding and encoding it whole."""
    derivations = {
        derived: stamps.Derivation(None, {source: model.Stamp(sha or None, 1.5) for source, sha in sources.items()})
        for derived, sources in table.items()
    }
    data = _whole_lock(derivations)
    updated = {path: stamps.Derivation("2026-11-10", {"s.md": model.Stamp("f" * 64, 2.0)}) for path in asked[:1]}
    lines = provgraph.incremental.LockLines.of(data, False)
    assert lines is not None
    assert [lines.has(path) for path in asked] == [path in derivations for path in asked]
    assert lines.derivations(asked) == {path: derivations[path] for path in asked if path in derivations}
    expected = {path: derivation for path, derivation in derivations.items() if path not in asked} | updated
    assert b"".join(lines.replaced(asked, updated) or [b"none"]) == _whole_lock(dict(sorted(expected.items())))


def _whole_lock(derivations: dict[str, stamps.Derivation]) -> bytes:
    """The lock of ``derivations``, encoded whole."""
    return encode_rows(
        lock_row(derived, source, stamp, derivation.derived_at)
        for derived, derivation in derivations.items()
        for source, stamp in derivation.stamps.items()
    )
