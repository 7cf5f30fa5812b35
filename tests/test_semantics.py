"""Stamps, change, dates and propagation (SPEC 2-3) through ``Memory`` with an explicit clock."""

from __future__ import annotations

import contextlib
import os
import random
import signal
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from provgraph import EdgeStatus, Memory, NotDerived, ProblemKind, Report

CHANGED, MISSING, CLEAN = EdgeStatus.CHANGED, EdgeStatus.MISSING, EdgeStatus.CLEAN


def stale(report: Report) -> dict[str, list[tuple[str, EdgeStatus, tuple[str, ...]]]]:
    """Each stale file with its causes as (origin, kind, via)."""
    return {entry.path: [(c.source, c.kind, c.via) for c in entry.causes] for entry in report.stale}


def edge(report: Report, source: str, derived: str):
    (found,) = [e for e in report.edges if e.source == source and e.derived == derived]
    return found


@pytest.fixture
def chain(memory):
    """facts.md -> profile.md -> digest.md -> brief.md, adopted at the start of the clock."""
    memory.write("facts.md", "The user lives in Lyon.\n")
    memory.write("profile.md", "Lives in Lyon.\n", derived_from="facts.md")
    memory.write("digest.md", "Profile digest.\n", derived_from="[Profile](profile.md)")
    memory.write("brief.md", "Brief.\n", derived_from=["digest.md"])
    return memory


# -- adoption and change -------------------------------------------------------------------


def test_first_sight_adopts_what_sources_hold_now(chain, clock) -> None:
    report = chain.open().refresh(now=clock.now)
    assert report.stale == ()
    assert [(e.source, e.derived, e.status, e.stamped_at) for e in report.edges] == [
        ("digest.md", "brief.md", CLEAN, clock.epoch),
        ("profile.md", "digest.md", CLEAN, clock.epoch),
        ("facts.md", "profile.md", CLEAN, clock.epoch),
    ]


def test_a_changed_source_marks_every_descendant_with_its_root_cause(chain, clock) -> None:
    memory = chain.open()
    memory.refresh(now=clock.now)
    chain.write("facts.md", "The user moved to Nantes.\n")
    report = memory.refresh(now=clock.advance(days=2))
    assert stale(report) == {
        "profile.md": [("facts.md", CHANGED, ("facts.md", "profile.md"))],
        "digest.md": [("facts.md", CHANGED, ("facts.md", "profile.md", "digest.md"))],
        "brief.md": [("facts.md", CHANGED, ("facts.md", "profile.md", "digest.md", "brief.md"))],
    }
    assert [(e.path, e.direct, e.since) for e in report.stale] == [
        ("brief.md", False, clock.epoch),
        ("digest.md", False, clock.epoch),
        ("profile.md", True, clock.epoch),
    ]


def test_via_is_a_shortest_chain(memory, clock) -> None:
    memory.write("facts.md", "v1")
    memory.write("long1.md", derived_from="facts.md")
    memory.write("long2.md", derived_from="long1.md")
    memory.write("short.md", derived_from="facts.md")
    memory.write("top.md", derived_from="long2.md, short.md")
    api = memory.open()
    api.refresh(now=clock.now)
    memory.write("facts.md", "v2")
    report = api.refresh(now=clock.advance(days=1))
    assert stale(report)["top.md"] == [("facts.md", CHANGED, ("facts.md", "short.md", "top.md"))]


def test_every_origin_is_a_separate_cause(memory, clock) -> None:
    memory.write("a.md", "a")
    memory.write("b.md", "b")
    memory.write("p.md", derived_from="a.md")
    memory.write("q.md", derived_from="b.md")
    memory.write("top.md", derived_from="q.md, p.md")
    api = memory.open()
    api.refresh(now=clock.now)
    memory.write("b.md", "b2")
    api.refresh(now=clock.advance(days=1))
    (memory.root / "a.md").unlink()
    report = api.refresh(now=clock.advance(days=2))
    entry = report.entry("top.md")
    assert entry is not None and not entry.direct
    assert [(c.source, c.kind, c.since) for c in entry.causes] == [
        ("a.md", MISSING, clock.epoch),
        ("b.md", CHANGED, (clock.now - timedelta(days=2)).timestamp()),
    ]
    assert entry.since == (clock.now - timedelta(days=2)).timestamp()


def test_touch_changes_nothing(chain, clock) -> None:
    memory = chain.open()
    memory.refresh(now=clock.now)
    chain.set_mtime("facts.md", clock.now + timedelta(hours=1))
    assert memory.refresh(now=clock.advance(days=1)).stale == ()
    data = chain.path("facts.md").read_bytes()
    chain.path("facts.md").unlink()
    chain.write_bytes("facts.md", data)  # a copy: new inode, new times, same content
    assert memory.refresh(now=clock.advance(days=1)).stale == ()


def test_an_edit_that_keeps_the_mtime_is_still_a_change(chain, clock) -> None:
    memory = chain.open()
    memory.refresh(now=clock.now)
    path = chain.path("facts.md")
    before = path.stat()
    path.write_bytes(path.read_bytes().replace(b"Lyon", b"Nice"))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_mtime_ns == before.st_mtime_ns and path.stat().st_size == before.st_size
    assert sorted(stale(memory.refresh(now=clock.advance(days=1)))) == ["brief.md", "digest.md", "profile.md"]


def test_reverting_the_source_clears_and_a_later_change_gets_a_new_date(chain, clock) -> None:
    memory = chain.open()
    memory.refresh(now=clock.now)
    original = chain.path("facts.md").read_bytes()
    chain.write("facts.md", "draft")
    assert memory.refresh(now=clock.advance(days=1)).stale
    chain.write_bytes("facts.md", original)
    assert memory.refresh(now=clock.advance(days=1)).stale == ()
    chain.write("facts.md", "final")
    report = memory.refresh(now=clock.advance(days=1))
    assert {entry.since for entry in report.stale} == {clock.epoch}


# -- missing sources -----------------------------------------------------------------------


def test_a_deleted_source_is_missing_from_the_first_scan_that_sees_it(chain, clock) -> None:
    memory = chain.open()
    memory.refresh(now=clock.now)
    chain.path("facts.md").unlink()
    first = memory.refresh(now=clock.advance(days=1))
    memory.refresh(now=clock.advance(days=5))
    report = memory.refresh(now=clock.advance(days=5))
    assert first.stale == report.stale
    assert stale(report)["digest.md"] == [("facts.md", MISSING, ("facts.md", "profile.md", "digest.md"))]
    assert {entry.since for entry in report.stale} == {(clock.now - timedelta(days=10)).timestamp()}


def test_a_renamed_source_is_missing(chain, clock) -> None:
    memory = chain.open()
    memory.refresh(now=clock.now)
    chain.path("facts.md").rename(chain.path("facts-old.md"))
    report = memory.refresh(now=clock.advance(days=1))
    assert edge(report, "facts.md", "profile.md").status is MISSING
    assert sorted(stale(report)) == ["brief.md", "digest.md", "profile.md"]


def test_a_source_that_never_existed_is_missing(memory, clock) -> None:
    memory.write("profile.md", derived_from="facts.md")
    report = memory.open().refresh(now=clock.now)
    assert stale(report) == {"profile.md": [("facts.md", MISSING, ("facts.md", "profile.md"))]}
    assert report.stale[0].since == clock.epoch


def test_a_missing_source_that_appears_is_adopted_when_the_file_is_restamped(memory, clock) -> None:
    memory.write("profile.md", derived_from="facts.md")
    api = memory.open()
    api.refresh(now=clock.now)
    memory.write("facts.md", "now it exists")
    assert stale(api.refresh(now=clock.advance(days=1))) == {
        "profile.md": [("facts.md", CHANGED, ("facts.md", "profile.md"))]
    }
    assert api.stamp(["profile.md"], now=clock.advance(days=1)).stale == ()


def test_a_root_relative_absolute_path_is_read_inside_the_root(memory, clock) -> None:
    memory.write("profile.md", derived_from="/etc/passwd")
    report = memory.open().refresh(now=clock.now)
    assert [(e.source, e.status) for e in report.edges] == [("etc/passwd", MISSING)]


# -- originating change dates --------------------------------------------------------------


def test_the_change_date_is_the_source_mtime_when_it_lies_between_stamp_and_scan(chain, clock) -> None:
    memory = chain.open()
    memory.refresh(now=clock.now)
    edited = clock.now + timedelta(days=1, hours=3)
    chain.write("facts.md", "moved", mtime=edited)
    report = memory.refresh(now=clock.advance(days=4))
    assert {entry.since for entry in report.stale} == {edited.timestamp()}
    assert edge(report, "facts.md", "profile.md").since == edited.timestamp()


@pytest.mark.parametrize("offset", [timedelta(days=-30), timedelta(days=400)], ids=["before-stamp", "after-scan"])
def test_an_implausible_mtime_gives_the_scan_time(chain, clock, offset) -> None:
    memory = chain.open()
    memory.refresh(now=clock.now)
    chain.write("facts.md", "moved", mtime=clock.now + offset)
    report = memory.refresh(now=clock.advance(days=4))
    assert {entry.since for entry in report.stale} == {clock.epoch}


def test_the_change_date_does_not_move_on_a_second_edit(chain, clock) -> None:
    memory = chain.open()
    memory.refresh(now=clock.now)
    first = clock.now + timedelta(days=1)
    chain.write("facts.md", "first edit", mtime=first)
    memory.refresh(now=clock.advance(days=2))
    chain.write("facts.md", "second edit", mtime=clock.now + timedelta(days=1))
    report = memory.refresh(now=clock.advance(days=3))
    assert {entry.since for entry in report.stale} == {first.timestamp()}


# -- re-derivation -------------------------------------------------------------------------


def test_stamp_records_a_rederivation(chain, clock) -> None:
    memory = chain.open()
    memory.refresh(now=clock.now)
    chain.write("facts.md", "moved")
    memory.refresh(now=clock.advance(days=1))
    report = memory.stamp(["profile.md"], now=clock.advance(days=1))
    assert report.stale == ()
    assert edge(report, "facts.md", "profile.md").stamped_at == clock.epoch
    assert memory.refresh(now=clock.advance(days=1)).stale == ()


def test_stamping_a_file_that_declares_nothing_is_refused_and_stamps_nothing(chain, clock) -> None:
    memory = chain.open()
    memory.refresh(now=clock.now)
    chain.write("facts.md", "moved")
    with pytest.raises(NotDerived) as raised:
        memory.stamp(["profile.md", "facts.md", "nowhere.md"], now=clock.advance(days=1))
    assert raised.value.paths == ("facts.md", "nowhere.md")
    assert "profile.md" in stale(memory.refresh(now=clock.advance(days=1)))


def test_a_new_derived_at_restamps(chain, clock) -> None:
    memory = chain.open()
    memory.refresh(now=clock.now)
    chain.write("facts.md", "moved")
    assert "profile.md" in stale(memory.refresh(now=clock.advance(days=1)))
    chain.write("profile.md", "Lives in Lyon.\n", derived_from="facts.md", derived_at="2024-03-03")
    report = memory.refresh(now=clock.advance(days=1))
    assert edge(report, "facts.md", "profile.md").status is CLEAN
    assert stale(report)["digest.md"] == [("profile.md", CHANGED, ("profile.md", "digest.md"))]
    chain.write("facts.md", "moved again")
    assert "profile.md" in stale(memory.refresh(now=clock.advance(days=1)))
    chain.write("profile.md", "Lives in Lyon.\n", derived_from="facts.md", derived_at="2024-03-05")
    assert "profile.md" not in stale(memory.refresh(now=clock.advance(days=1)))


def test_editing_the_derived_file_itself_never_restamps(memory, clock) -> None:
    memory.write("facts.md", "v1")
    memory.write("profile.md", "v1", derived_from="facts.md", derived_at="2024-03-01")
    api = memory.open()
    api.refresh(now=clock.now)
    memory.write("facts.md", "v2")
    api.refresh(now=clock.advance(days=1))
    memory.write("profile.md", "cosmetic edit", derived_from="[Facts](facts.md)", derived_at="2024-03-01")
    assert "profile.md" in stale(api.refresh(now=clock.advance(days=1)))
    path = memory.path("profile.md")
    path.write_text("---\nname: Profile\nderived_at: 2024-03-01\nderived_from: facts.md\n---\nnew body\n")
    assert "profile.md" in stale(api.refresh(now=clock.advance(days=1)))


def test_removing_a_source_forgets_its_stamp_and_declaring_it_again_adopts(memory, clock) -> None:
    memory.write("a.md", "a1")
    memory.write("b.md", "b1")
    memory.write("p.md", derived_from="a.md, b.md")
    api = memory.open()
    api.refresh(now=clock.now)
    memory.write("b.md", "b2")
    assert "p.md" in stale(api.refresh(now=clock.advance(days=1)))
    memory.write("p.md", derived_from="a.md")
    assert api.refresh(now=clock.advance(days=1)).stale == ()
    memory.write("b.md", "b3")
    memory.write("p.md", derived_from="a.md, b.md")
    report = api.refresh(now=clock.advance(days=1))
    assert report.stale == ()
    assert edge(report, "b.md", "p.md").stamped_at == clock.epoch
    assert edge(report, "a.md", "p.md").stamped_at == (clock.now - timedelta(days=3)).timestamp()


def test_a_file_that_stops_declaring_is_forgotten(memory, clock) -> None:
    memory.write("a.md", "a1")
    memory.write("p.md", derived_from="a.md")
    api = memory.open()
    api.refresh(now=clock.now)
    memory.write("p.md", "no more frontmatter")
    memory.write("a.md", "a2")
    assert api.refresh(now=clock.advance(days=1)).edges == ()
    memory.write("p.md", derived_from="a.md")
    assert api.refresh(now=clock.advance(days=1)).stale == ()


# -- early cutoff --------------------------------------------------------------------------


@pytest.fixture
def cutoff(memory, clock):
    """a.md -> x.md -> y.md, and b.md -> y.md; a.md then changes."""
    memory.write("a.md", "a1")
    memory.write("b.md", "b1")
    memory.write("x.md", "x1", derived_from="a.md")
    memory.write("y.md", "y1", derived_from="x.md, b.md")
    api = memory.open()
    api.refresh(now=clock.now)
    memory.write("a.md", "a2")
    assert sorted(stale(api.refresh(now=clock.advance(days=1)))) == ["x.md", "y.md"]
    return api


def test_restamping_an_unchanged_intermediate_clears_its_descendants(cutoff, clock) -> None:
    assert cutoff.stamp(["x.md"], now=clock.advance(days=1)).stale == ()


def test_another_cause_keeps_a_descendant_stale_after_the_cutoff(cutoff, memory, clock) -> None:
    memory.write("b.md", "b2")
    report = cutoff.stamp(["x.md"], now=clock.advance(days=1))
    assert stale(report) == {"y.md": [("b.md", CHANGED, ("b.md", "y.md"))]}


def test_a_rewritten_intermediate_becomes_the_origin(cutoff, memory, clock) -> None:
    memory.write("x.md", "x2 rewritten from a2", derived_from="a.md")
    report = cutoff.stamp(["x.md"], now=clock.advance(days=1))
    assert stale(report) == {"y.md": [("x.md", CHANGED, ("x.md", "y.md"))]}
    assert report.stale[0].since == clock.epoch


# -- cycles --------------------------------------------------------------------------------


def rotations(cycle: tuple[str, ...]) -> set[tuple[str, ...]]:
    return {cycle[index:] + cycle[:index] for index in range(len(cycle))}


def test_cycles_are_reported_in_derivation_order(memory, clock) -> None:
    memory.write("a.md", derived_from="c.md")  # c -> a -> b -> c
    memory.write("b.md", derived_from="a.md")
    memory.write("c.md", derived_from="b.md")
    memory.write("self.md", derived_from="self.md")
    memory.write("free.md", derived_from="a.md")
    report = memory.open().refresh(now=clock.now)
    cycles = set(report.cycles)
    assert ("self.md",) in cycles
    (three,) = cycles - {("self.md",)}
    assert three in rotations(("c.md", "a.md", "b.md"))
    assert report.stale == ()


def test_staleness_flows_into_through_and_out_of_a_cycle(memory, clock) -> None:
    memory.write("x.md", "x1")
    memory.write("a.md", derived_from="x.md, b.md")
    memory.write("b.md", derived_from="a.md")
    memory.write("out.md", derived_from="b.md")
    api = memory.open()
    api.refresh(now=clock.now)
    memory.write("x.md", "x2")
    report = api.refresh(now=clock.advance(days=1))
    assert report.cycles == (("a.md", "b.md"),)
    assert stale(report) == {
        "a.md": [("x.md", CHANGED, ("x.md", "a.md"))],
        "b.md": [("x.md", CHANGED, ("x.md", "a.md", "b.md"))],
        "out.md": [("x.md", CHANGED, ("x.md", "a.md", "b.md", "out.md"))],
    }


def test_a_change_inside_a_cycle_goes_all_the_way_round(memory, clock) -> None:
    memory.write("a.md", "a1", derived_from="b.md")
    memory.write("b.md", "b1", derived_from="a.md")
    memory.write("self.md", "s1", derived_from="self.md")
    api = memory.open()
    api.refresh(now=clock.now)
    memory.write("a.md", "a2", derived_from="b.md")
    memory.write("self.md", "s2", derived_from="self.md")
    report = api.refresh(now=clock.advance(days=1))
    assert stale(report) == {
        "a.md": [("a.md", CHANGED, ("a.md", "b.md", "a.md"))],
        "b.md": [("a.md", CHANGED, ("a.md", "b.md"))],
        "self.md": [("self.md", CHANGED, ("self.md", "self.md"))],
    }


def test_a_ten_thousand_deep_chain_works(memory, clock) -> None:
    depth = 10_000
    memory.write("n00000.md", "root")
    for index in range(1, depth):
        memory.write(f"n{index:05d}.md", derived_from=f"n{index - 1:05d}.md")
    api = memory.open()
    assert api.refresh(now=clock.now).stale == ()
    middle = depth - 2_000
    memory.write(f"n{middle:05d}.md", "rewritten", derived_from=f"n{middle - 1:05d}.md")
    report = api.refresh(now=clock.advance(days=1))
    assert len(report.stale) == depth - 1 - middle
    deepest = report.entry(f"n{depth - 1:05d}.md")
    assert deepest is not None
    (cause,) = deepest.causes
    assert cause.source == f"n{middle:05d}.md"
    assert cause.via == tuple(f"n{index:05d}.md" for index in range(middle, depth))
    assert report.cycles == ()


# -- what counts as a file -----------------------------------------------------------------


def test_sources_need_not_be_markdown_and_may_live_in_subfolders(memory, clock) -> None:
    memory.write_bytes("data/prices.csv", b"apple,1\n")
    memory.write("topics/facts.md", "facts")
    memory.write("topics/summaries/prices.md", derived_from="../../data/prices.csv, ../facts.md")
    memory.write("digest.md", derived_from="/topics/summaries/prices.md")
    api = memory.open()
    first = api.refresh(now=clock.now)
    assert first.file_count == 3
    memory.write_bytes("data/prices.csv", b"apple,2\n")
    report = api.refresh(now=clock.advance(days=1))
    assert stale(report) == {
        "digest.md": [("data/prices.csv", CHANGED, ("data/prices.csv", "topics/summaries/prices.md", "digest.md"))],
        "topics/summaries/prices.md": [("data/prices.csv", CHANGED, ("data/prices.csv", "topics/summaries/prices.md"))],
    }


@pytest.fixture
def opened(monkeypatch) -> list[str]:
    """Every path that ``os.open`` is asked to open during the test, resolved (a name in a
    folder's descriptor, in the folder the spy saw opened with that descriptor)."""
    calls: list[str] = []
    folders: dict[int, str] = {}
    real_open = os.open

    def spy(path, *args, dir_fd=None, **kwargs):
        calls.append(os.path.realpath(os.path.join(folders[dir_fd], path) if dir_fd in folders else path))
        descriptor = real_open(path, *args, dir_fd=dir_fd, **kwargs)
        folders[descriptor] = calls[-1]
        return descriptor

    monkeypatch.setattr(os, "open", spy)
    return calls


def test_a_symlink_leaving_the_root_is_refused_and_never_opened(memory, clock, tmp_path, opened) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("---\nderived_from: secret.md\n---\nsecret\n")
    (memory.root / "secret.md").symlink_to(outside / "secret.md")
    (memory.root / "elsewhere").symlink_to(outside, target_is_directory=True)
    memory.write("p.md", derived_from="secret.md")
    memory.write("q.md", derived_from="elsewhere/secret.md")
    report = memory.open().refresh(now=clock.now)
    assert report.edges == ()
    assert {(p.path, p.kind) for p in report.problems} >= {
        ("p.md", ProblemKind.OUTSIDE_ROOT),
        ("q.md", ProblemKind.OUTSIDE_ROOT),
    }
    assert os.path.realpath(memory.root / "p.md") in opened  # the spy sees what is read
    assert not [path for path in opened if path.startswith(os.fspath(outside))]


def test_a_symlink_inside_the_root_is_followed(memory, clock) -> None:
    memory.write("real.md", "v1")
    (memory.root / "alias.md").symlink_to("real.md")
    memory.write("p.md", derived_from="alias.md")
    api = memory.open()
    api.refresh(now=clock.now)
    memory.write("real.md", "v2")
    assert stale(api.refresh(now=clock.advance(days=1))) == {"p.md": [("alias.md", CHANGED, ("alias.md", "p.md"))]}


@contextlib.contextmanager
def deadline(seconds: int) -> Iterator[None]:
    """Fail instead of hanging when a blocking open is attempted."""

    def expire(signum, frame):
        raise TimeoutError(f"still running after {seconds}s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_a_fifo_is_skipped_without_hanging(memory, clock, opened) -> None:
    os.mkfifo(memory.root / "pipe.md")
    os.mkfifo(memory.root / "feed.csv")
    memory.write("p.md", derived_from="pipe.md, feed.csv")
    memory.write("a.md", "a")
    memory.write("q.md", derived_from="a.md")
    with deadline(10):
        report = memory.open().refresh(now=clock.now)
    assert report.file_count == 3
    assert report.derived == ("q.md",)
    assert {(p.path, p.kind) for p in report.problems} == {("p.md", ProblemKind.BAD_ENTRY)}
    fifos = {os.path.realpath(memory.root / name) for name in ("pipe.md", "feed.csv")}
    assert os.path.realpath(memory.root / "a.md") in opened
    assert not fifos & set(opened)


# -- provgraph only reads ------------------------------------------------------------------


def snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    return {
        path.relative_to(root).as_posix(): (path.read_bytes(), path.stat().st_mtime_ns)
        for path in root.rglob("*")
        if path.is_file() and ".provgraph" not in path.parts and path != root / "provgraph.lock"
    }


def test_memory_files_are_never_written(chain, clock) -> None:
    chain.write_bytes("data.csv", b"1,2\n")
    chain.write("uses-data.md", derived_from="data.csv, missing.md, ../outside.md")
    for path in chain.root.rglob("*"):
        os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    api = chain.open()
    api.refresh(now=clock.now)
    chain.write("facts.md", "changed", mtime=clock.now + timedelta(hours=1))
    before = snapshot(chain.root)
    api.refresh(now=clock.advance(days=1))
    report = api.stamp(["profile.md", "uses-data.md"], now=clock.advance(days=1))
    api.explain("digest.md", report)
    api.graph(report)
    assert snapshot(chain.root) == before


# -- determinism ---------------------------------------------------------------------------

FILES = {
    "facts.md": ("f1", None),
    "prefs.md": ("p1", None),
    "topics/a.md": ("a", "../facts.md, ../prefs.md, /gone.md"),
    "topics/b.md": ("b", "a.md, ../facts.md"),
    "digest.md": ("d", "topics/b.md, topics/a.md, loop.md"),
    "loop.md": ("l", "digest.md"),
    "bad.md": ("x", "../../etc/passwd, https://example.com"),
}


def build(memory, order: list[str], reverse_entries: bool) -> Memory:
    for path in order:
        body, sources = FILES[path]
        if sources is not None and reverse_entries:
            sources = ", ".join(reversed(sources.split(", ")))
        memory.write(path, body, derived_from=sources)
    return memory.open()


def outcome(report: Report) -> tuple:
    return report.stale, report.cycles, report.problems, report.edges, report.file_count


def test_results_do_not_depend_on_creation_or_entry_order(memory, tmp_path, clock) -> None:
    results = set()
    shuffler = random.Random(7)
    for attempt in range(4):
        order = list(FILES)
        shuffler.shuffle(order)
        folder = type(memory)(tmp_path / f"m{attempt}")
        folder.root.mkdir()
        api = build(folder, order, reverse_entries=attempt % 2 == 1)
        api.refresh(now=clock.now)
        folder.write("facts.md", "f2")
        folder.path("prefs.md").unlink()
        report = api.refresh(now=clock.now + timedelta(days=1))
        results.add(outcome(report))
    assert len(results) == 1
    (stale_entries, cycles, _, _, _) = results.pop()
    assert cycles == (("digest.md", "loop.md"),)
    assert [entry.path for entry in stale_entries] == ["digest.md", "loop.md", "topics/a.md", "topics/b.md"]
