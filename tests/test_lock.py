"""The portable lock travels: merged by git, copied by sync tools, carried to another path.

Two machines are two copies of one memory folder; each stamps with its own clock.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from unittest.mock import patch

import orjson
import pytest
from cachefile import document
from depth import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from provgraph import Memory
from provgraph.model import HashRule, Stamp
from provgraph.store import lock as lockfile
from provgraph.store.lock import Record, _decode_lines, decode_lock, decode_stamps, encode_lock


@pytest.fixture
def machines(memory, clock, tmp_path) -> tuple[Path, Path]:
    """Machine A (the ``memory`` root) and machine B (a copy of it with the lock, no cache),
    after A adopted every declaration."""
    memory.write("MEMORY.md", "- index\n")
    memory.write("facts.md", "v1")
    memory.write("prefs.md", "p1")
    memory.write("profile.md", derived_from="facts.md, prefs.md")
    memory.write("digest.md", derived_from="profile.md")
    memory.write("summary.md", derived_from="facts.md")
    memory.open().refresh(now=clock.now)
    other = tmp_path / "machine-b"
    shutil.copytree(memory.root, other, ignore=shutil.ignore_patterns(".provgraph"))
    return memory.root, other


def _stamps(root: Path) -> dict[tuple[str, str], float]:
    return {
        key: record.stamp.stamped_at
        for key, record in decode_lock((root / "provgraph.lock").read_bytes()).records.items()
    }


def _diverge(machines: tuple[Path, Path], clock) -> tuple[bytes, bytes, float, float]:
    """A stamps profile.md on day 1; B stamps profile.md and summary.md on day 2."""
    a, b = machines
    day1, day2 = clock.advance(days=1), clock.advance(days=1)
    Memory(a).stamp(["profile.md"], now=day1)
    Memory(b).stamp(["profile.md", "summary.md"], now=day2)
    return (a / "provgraph.lock").read_bytes(), (b / "provgraph.lock").read_bytes(), day1.timestamp(), day2.timestamp()


def _union(ours: bytes, theirs: bytes) -> bytes:
    """What a line-wise union merge leaves: every line of ours, then theirs' new ones interleaved."""
    mine = ours.splitlines(keepends=True)
    extra = [line for line in theirs.splitlines(keepends=True) if line not in mine]
    merged = []
    for index, line in enumerate(mine):
        merged.append(line)
        if index < len(extra):
            merged.append(extra[index])
    return b"".join(merged + extra[len(mine) :])


def test_a_union_merged_lock_loads_takes_the_newest_stamp_per_edge_and_says_so(machines, clock, logged) -> None:
    a, _ = machines
    ours, theirs, _, day2 = _diverge(machines, clock)
    (a / "provgraph.lock").write_bytes(_union(ours, theirs) + theirs)  # duplicates too
    logged.take()

    report = Memory(a).refresh(now=clock.advance(days=1))

    (warning,) = logged.take()
    assert "merged lines" in warning and "newest stamp" in warning
    assert report.stale == ()
    stamps = _stamps(a)
    assert stamps[("profile.md", "facts.md")] == stamps[("summary.md", "facts.md")] == day2
    assert decode_lock((a / "provgraph.lock").read_bytes()).merged == 0  # written back clean


def test_a_lock_with_conflict_markers_still_loads_with_the_newest_stamps(machines, clock, logged) -> None:
    a, _ = machines
    ours, theirs, _, day2 = _diverge(machines, clock)
    header, *mine = ours.splitlines(keepends=True)
    _, *other = theirs.splitlines(keepends=True)
    conflicted = b"".join([header, b"<<<<<<< HEAD\n", *mine, b"=======\n", *other, b">>>>>>> machine-b\n"])
    (a / "provgraph.lock").write_bytes(conflicted)
    logged.take()

    report = Memory(a).refresh(now=clock.advance(days=1))

    assert len(logged.take()) == 1
    assert report.stale == () and _stamps(a)[("summary.md", "facts.md")] == day2
    assert b"<<<<<<<" not in (a / "provgraph.lock").read_bytes()


def test_the_same_edge_stamped_at_the_same_time_keeps_the_earliest_originating_date(machines, clock) -> None:
    """Both machines saw facts.md change, on different days: after the merge both report
    the first sighting."""
    a, b = machines
    (a / "facts.md").write_text("v2")
    (b / "facts.md").write_text("v2")
    first = Memory(a).refresh(now=clock.advance(days=1))
    Memory(b).refresh(now=clock.advance(days=1))
    merged = _union((b / "provgraph.lock").read_bytes(), (a / "provgraph.lock").read_bytes())
    (a / "provgraph.lock").write_bytes(merged)
    (b / "provgraph.lock").write_bytes(merged)
    later = clock.advance(days=1)
    here, there = Memory(a).refresh(now=later), Memory(b).refresh(now=later)
    assert here.stale == there.stale == first.stale


def test_a_sync_conflict_copy_is_merged_and_kept_aside(machines, clock, logged) -> None:
    a, _ = machines
    ours, theirs, _, day2 = _diverge(machines, clock)
    copy = a / "provgraph.sync-conflict-20261201-101500-MACHINEB.lock"
    copy.write_bytes(theirs)
    logged.take()

    report = Memory(a).refresh(now=clock.advance(days=1))

    assert report.stale == () and _stamps(a)[("summary.md", "facts.md")] == day2
    assert not copy.exists()
    (kept,) = [path for path in (a / ".provgraph").iterdir() if path.name.startswith(copy.name + ".merged-")]
    assert kept.read_bytes() == theirs
    assert any("merged" in warning for warning in logged.take())


def test_a_running_process_sees_a_new_lock_at_its_next_check(machines, clock) -> None:
    """A long-lived process (the agent middleware) keeps its last answer only while the lock
    is the one that answer was computed with: a lock that arrives through sync counts at once."""
    a, b = machines
    (a / "facts.md").write_text("v2")
    (b / "facts.md").write_text("v2")
    agent = Memory(a)
    assert {entry.path for entry in agent.refresh(now=clock.advance(days=1)).stale} == {
        "profile.md",
        "digest.md",
        "summary.md",
    }
    Memory(b).stamp(["profile.md", "summary.md"], now=clock.advance(days=1))
    shutil.copy(b / "provgraph.lock", a / "provgraph.lock")  # a newer lock arrives
    assert {entry.path for entry in agent.refresh(now=clock.now).stale} == set()
    shutil.copy(b / "provgraph.lock", a / "provgraph.lock")  # the same bytes again: still the same answer
    assert agent.refresh(now=clock.now).stale == ()


def test_a_folder_copied_with_its_lock_to_another_path_gives_the_same_report_cold(
    machines, clock, run, tmp_path
) -> None:
    a, _ = machines
    (a / "facts.md").write_text("v2")
    Memory(a).refresh(now=clock.advance(days=1))
    elsewhere = tmp_path / "another-machine" / "memory"
    shutil.copytree(a, elsewhere, ignore=shutil.ignore_patterns(".provgraph"))
    later = clock.advance(days=1)

    here = json.loads(run("status", "--json", a, cwd=tmp_path, now=later)[1])
    there = json.loads(run("status", "--json", elsewhere, cwd=tmp_path, now=later)[1])

    assert here.pop("root") == str(a) and there.pop("root") == str(elsewhere)
    assert here == there and here["counts"]["stale"] == 3


def test_a_copied_cache_of_another_path_is_not_used(machines, clock, tmp_path) -> None:
    """``cp -a`` carries the cache along: it belongs to the old path, so it is rebuilt."""
    a, _ = machines
    elsewhere = tmp_path / "copied"
    shutil.copytree(a, elsewhere)
    (elsewhere / "facts.md").write_text("v2")
    report = Memory(elsewhere).refresh(now=clock.advance(days=1))
    assert {entry.path for entry in report.stale} == {"profile.md", "digest.md", "summary.md"}
    assert document((elsewhere / ".provgraph" / "cache.json").read_bytes())["root"] == str(elsewhere)


# -- the codec, for any stamps ---------------------------------------------------------------------

_NAMES = st.sampled_from(["a.md", "b.md", "notes/c.md", "ü d.md", "e\u2028f.md", "g\x85.md", 'q"uote.md'])
_SHA = st.one_of(st.none(), st.sampled_from(["0" * 64, "f" * 64, "0123456789abcdef" * 4]))
_TIME = st.integers(0, 4_000_000_000).map(float) | st.floats(0, 4e9, allow_nan=False)
_RECORD = st.builds(
    Record,
    _NAMES,
    _NAMES,
    st.builds(Stamp, _SHA, _TIME, st.none() | _TIME),
    st.none() | st.sampled_from(["2026-11-10", "yesterday"]),
)


def _table(records: list[Record]) -> dict:
    """What a lock of these records must load as: one record per edge, the last one written."""
    return {(record.derived, record.source): record for record in records}


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(_RECORD, max_size=12))
def test_any_lock_loads_back_equal_and_encodes_to_the_same_bytes(records: list[Record]) -> None:
    table = _table(records)
    data = encode_lock(table.values())
    read = decode_lock(data)
    assert read.records == table and read.merged == read.damaged == 0
    assert encode_lock(read.records.values()) == data
    assert encode_lock(reversed(list(table.values()))) == data


_ODD_NAMES = st.sampled_from(
    ["a", "a!", "a b", 'a],["b.md', "a]\n[b.md", "a\\b.md", "a\x01.md", "a\u2028.md", "é.md", "A.md"]
)


@settings(max_examples=examples(200), deadline=None)
@given(
    st.lists(
        st.builds(Record, _ODD_NAMES | _NAMES, _ODD_NAMES | _NAMES, _RECORD.map(lambda r: r.stamp), st.none()),
        max_size=12,
    ),
    st.sampled_from([1, 2, 3, 4096]),
)
def test_a_lock_holds_one_line_per_edge_sorted_as_bytes_whatever_the_names(records: list[Record], batch: int) -> None:
    table = _table(records)
    lines = sorted(
        orjson.dumps(
            [r.derived, r.source, r.stamp.sha256, r.stamp.stamped_at, r.stamp.mismatch_since, r.derived_at]
            + (["meaning"] if r.stamp.rule is HashRule.MEANING else [])
        )
        + b"\n"
        for r in table.values()
    )
    with patch.object(lockfile, "_ROWS", batch):
        data = encode_lock(table.values())
    assert data == lockfile.HEADER.encode() + b"".join(lines)
    assert decode_lock(data).records == table


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(_RECORD, max_size=10), st.lists(_RECORD, max_size=10), st.randoms(use_true_random=False))
def test_any_interleaving_of_two_locks_loads_the_newest_stamp_of_each_edge(ours, theirs, random) -> None:
    mine, other = _table(ours), _table(theirs)
    lines = encode_lock(mine.values()).splitlines(keepends=True) + encode_lock(other.values()).splitlines(keepends=True)
    random.shuffle(lines)
    read = decode_lock(b"".join(lines))
    assert set(read.records) == set(mine) | set(other)
    for key, record in read.records.items():
        candidates = [table[key] for table in (mine, other) if key in table]
        assert record.stamp.stamped_at == max(candidate.stamp.stamped_at for candidate in candidates)
    assert read.damaged == 0
    assert read == decode_lock(b"".join(sorted(lines)))  # the order of the lines never matters


_DAMAGE = st.sampled_from(
    [
        *("", "   ", "<<<<<<< ours", "=======", ">>>>>>> theirs", "[1, 2]", "not json", "[] []"),
        # rows of the right length whose values a lock never holds
        '["a.md", "b.md", null, true, null, null]',
        '["a.md", "", null, 1, null, null]',
        '["a.md", "b\\u0000.md", null, 1, null, null]',
        '["a.md", "b.md", "ABC", 1, null, null]',
        '["a.md", "b.md", null, -1, null, null]',
        '["a.md", "b.md", null, 1, 1e300, null]',
        '["a.md", "b.md", null, "1", null, null]',
        '["a.md", "b.md", null, 1, null, 7]',
    ]
)


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(_RECORD, max_size=10), st.lists(_DAMAGE, max_size=3), st.randoms(use_true_random=False))
def test_a_lock_read_in_one_call_loads_what_reading_it_line_by_line_loads(records, damage, random) -> None:
    """Reading a clean lock in one call is a shortcut: any lock, clean, merged or damaged,
    loads exactly what the line-by-line reading of it loads."""
    lines = encode_lock(_table(records).values()).decode().split("\n")
    for extra in damage:
        lines.insert(random.randint(1, len(lines)), extra)
    if len(lines) > 2 and random.random() < 0.3:
        lines.insert(random.randint(1, len(lines)), lines[1])  # a union merge repeats a line
    data = "\n".join(lines).encode()
    with patch.object(lockfile, "_BATCH", random.choice([1, 64, 1 << 20])):  # lines parsed in batches
        read = decode_lock(data)
        assert read == _decode_lines(data.decode())
        stamps = decode_stamps(data)
        assert stamps is None or stamps == read.derivations()  # a shortcut, for clean locks
        if data.rstrip(b"\n") == encode_lock(read.records.values()).rstrip(b"\n"):
            assert stamps == read.derivations()
