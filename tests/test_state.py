"""The state (SPEC 4, issue 12): a portable lock and a disposable cache, lossless,
atomic, set aside when unreadable, and kept where it is asked."""

from __future__ import annotations

import ctypes
import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from datetime import timedelta
from pathlib import Path

import orjson
import pytest
from cachefile import document, is_whole, with_row, written
from hypothesis import given
from hypothesis import strategies as st

import provgraph
from provgraph import Memory, StateError
from provgraph.model import HashRule
from provgraph.stamps import Derivation
from provgraph.store import cache as cache_module
from provgraph.store.cache import Cache
from provgraph.store.lock import decode_lock
from provgraph.store.state import StateStore


@pytest.fixture
def lived(memory, clock) -> Memory:
    """A memory root whose state holds stamps, stale files, a cycle, problems and odd names."""
    memory.write("facts.md", "v1\n")
    memory.write("café/ünïcode fact.md", "u1\n")
    memory.write("profile.md", derived_from="facts.md, missing.md, ../../etc/passwd")
    memory.write("digest.md", derived_from="profile.md, [Facts](café/ünïcode%20fact.md)", derived_at="2024-03-01")
    memory.write("a.md", derived_from="b.md")
    memory.write("b.md", derived_from="a.md")
    api = memory.open()
    api.refresh(now=clock.now)
    memory.write("facts.md", "v2\n")
    api.refresh(now=clock.advance(days=1))
    return api


def store_of(api: Memory) -> StateStore:
    return StateStore(
        api.root, None if api.state_path == api.root / ".provgraph" else api.state_path, None, api._settings
    )


def loaded(api: Memory) -> dict[str, Derivation]:
    """The stamps in the lock."""
    store = store_of(api)
    with store.locked():
        return store.stamps()


def cached(api: Memory) -> Cache:
    store = store_of(api)
    with store.locked():
        cache = store.cache()
    assert cache is not None
    return cache


def saved_bytes(api: Memory) -> tuple[bytes, bytes]:
    return api.lock_path.read_bytes(), (api.state_path / "cache.json").read_bytes()


def aside_files(api: Memory) -> list[Path]:
    """Every file in the state folder that provgraph did not write there itself."""
    own = {"cache.json", "flock", "root", "provgraph.lock"}
    return sorted(path for path in api.state_path.iterdir() if path.name not in own)


# -- round trip and atomic writes ----------------------------------------------------------


def test_state_round_trips_losslessly(lived) -> None:
    store = store_of(lived)
    with store.locked():
        stamps, cache = store.stamps(), store.cache()
        assert stamps and cache is not None and cache.rows and cache.last is not None and cache.last.edges
        original = saved_bytes(lived)
        store.save(stamps, cache)
        assert saved_bytes(lived)[0] == original[0]
        assert store.stamps() == stamps
        again = StateStore(lived.root, None, None, lived._settings)
    with again.locked():
        read = again.cache()
    assert read is not None and read.lock is not None
    assert dataclasses.replace(read, lock=None) == dataclasses.replace(cache, lock=None)


def test_the_saved_report_is_the_one_returned(lived, clock) -> None:
    report = lived.refresh(now=clock.advance(days=1))
    last = cached(lived).last
    assert last is not None and report.stale
    assert (last.file_count, last.edges, last.cycles, last.problems) == (
        report.file_count,
        tuple(report.edges),
        report.cycles,
        report.problems,
    )


def test_the_lock_is_sorted_text_one_edge_per_line_with_nothing_of_this_machine(lived) -> None:
    header, *lines = lived.lock_path.read_text(encoding="utf-8").splitlines()
    assert header.startswith("# provgraph lock 2:")
    records = [orjson.loads(line) for line in lines]
    assert lines == sorted(lines) and len({(row[0], row[1]) for row in records}) == len(lines)
    assert {(row[0], row[1]) for row in records} == {(edge.derived, edge.source) for edge in lived.refresh().edges}
    text = lived.lock_path.read_text(encoding="utf-8")
    assert str(lived.root) not in text and str(os.stat(lived.root / "facts.md").st_ino) not in text


def test_the_lock_is_rewritten_only_when_a_stamp_or_a_date_changes(lived, memory, clock) -> None:
    before = os.stat(lived.lock_path)
    memory.write("notes.md", "a new plain file")
    memory.write("facts.md", "v3")  # already stale since day 1: the date does not move
    os.utime(lived.root / "profile.md")
    lived.refresh(now=clock.advance(days=1))
    after = os.stat(lived.lock_path)
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    lived.stamp(["profile.md"], now=clock.advance(days=1))
    assert os.stat(lived.lock_path).st_ino != before.st_ino


def test_equal_stamps_save_the_same_lock_bytes(lived) -> None:
    store = store_of(lived)
    with store.locked():
        stamps, cache = store.stamps(), store.cache()
        assert cache is not None
        original = lived.lock_path.read_bytes()
        store.save(dict(stamps), cache)
    assert lived.lock_path.read_bytes() == original


def test_writes_leave_no_temporary_files(lived, clock) -> None:
    for day in range(5):
        lived.refresh(now=clock.advance(days=day))
        lived.stamp(["profile.md"], now=clock.now)
    assert sorted(path.name for path in lived.state_path.iterdir()) == ["cache.json", "flock"]
    assert sorted(path.name for path in lived.root.iterdir() if path.is_file() and path.suffix != ".md") == [
        "provgraph.lock"
    ]


def test_a_reader_always_sees_a_whole_file(lived) -> None:
    store = store_of(lived)
    big, cache = loaded(lived), cached(lived)
    stop = threading.Event()
    failures: list[BaseException] = []

    def write() -> None:
        try:
            for round_ in range(150):
                with store.locked():
                    store.stamps()
                    store.save(big if round_ % 2 else {}, cache)
        except BaseException as error:  # noqa: BLE001 - reported by the main thread
            failures.append(error)
        finally:
            stop.set()

    writer = threading.Thread(target=write)
    writer.start()
    reads = 0
    while not stop.is_set() or reads == 0:
        data = (lived.state_path / "cache.json").read_bytes()
        assert is_whole(data) and document(data)["format"] == "provgraph-cache"
        assert decode_lock(lived.lock_path.read_bytes()).damaged == 0
        reads += 1
    writer.join()
    assert not failures
    assert aside_files(lived) == []


def test_the_lock_is_synced_to_the_disk_before_it_replaces_the_old_one_and_the_cache_is_not(
    memory, clock, synced
) -> None:
    """The stamps must survive a crash of the machine; the cache is derived again (a torn
    one gives the full scan: ``test_a_cache_torn_by_a_crash_of_the_machine_gives_the_full_scans_answer``)."""
    memory.write("facts.md", "v1")
    memory.write("profile.md", derived_from="facts.md")
    api = memory.open()
    api.refresh(now=clock.now)  # adopts the declaration: writes the lock, then the cache
    assert api.lock_path.is_file() and (api.state_path / "cache.json").is_file()
    assert [name.split(".")[:2] for name in synced] == [["provgraph", "lock"], [memory.root.name]]


def test_a_failed_write_keeps_the_old_state(lived, clock, memory, monkeypatch) -> None:
    original = saved_bytes(lived)

    def no_space(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", no_space)
    with pytest.raises(StateError) as raised:
        lived.stamp(["profile.md"], now=clock.advance(days=1))
    assert str(lived.lock_path) in str(raised.value)
    assert "No space left on device" in str(raised.value)
    assert saved_bytes(lived) == original
    assert aside_files(lived) == []


# -- deleting the cache, deleting the lock ---------------------------------------------------


def test_deleting_the_cache_never_changes_an_answer(lived, memory, clock) -> None:
    memory.write("facts.md", "v3")
    warm = lived.refresh(now=clock.advance(days=1))
    shutil.rmtree(lived.state_path)
    assert memory.open().refresh(now=clock.now) == warm


def test_deleting_the_lock_is_a_fresh_start(lived, memory, clock, tmp_path) -> None:
    lived.lock_path.unlink()
    again = memory.open().refresh(now=clock.advance(days=1))
    first_use = memory.open(state=tmp_path / "fresh").refresh(now=clock.now)
    assert again.stale == first_use.stale
    assert "facts.md" not in {cause.source for entry in again.stale for cause in entry.causes}


# -- unreadable state is set aside ---------------------------------------------------------


def truncated_line(data: bytes) -> bytes:
    header, first, *rest = data.splitlines(keepends=True)
    return b"".join([header, first[: len(first) // 2] + b"\n", *rest])


def out_of_range(data: bytes) -> bytes:
    header, first, *rest = data.splitlines(keepends=True)
    row = orjson.loads(first)
    row[3] = 1e300
    return b"".join([header, orjson.dumps(row) + b"\n", *rest])


def bad_sha(data: bytes) -> bytes:
    header, first, *rest = data.splitlines(keepends=True)
    row = orjson.loads(first)
    row[2] = "sha"
    return b"".join([header, orjson.dumps(row) + b"\n", *rest])


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda data: b"{not a lock at all", id="corrupt"),
        pytest.param(lambda data: b"", id="empty"),
        pytest.param(lambda data: data.replace(b"lock 2:", b"lock x:"), id="unknown-version"),
        pytest.param(lambda data: b'{"hello": "world"}', id="foreign-json"),
        pytest.param(lambda data: b"\xff\xfe\x00binary", id="binary"),
    ],
)
def test_an_unreadable_lock_is_kept_aside_and_rebuilt(lived, memory, clock, logged, tmp_path, damage) -> None:
    bad = damage(lived.lock_path.read_bytes())
    lived.lock_path.write_bytes(bad)
    logged.take()
    report = memory.open().refresh(now=clock.advance(days=1))
    (aside,) = aside_files(lived)
    assert aside.read_bytes() == bad and aside.name.startswith("provgraph.lock.corrupt-")
    (warning,) = logged.take()
    assert str(lived.lock_path) in warning and aside.name in warning
    first_use = memory.open(state=tmp_path / "fresh").refresh(now=clock.now)
    assert "profile.md" in {entry.path for entry in first_use.stale}  # missing.md never existed
    assert report.stale == first_use.stale
    assert {path: d.stamps for path, d in loaded(lived).items()} == {
        path: d.stamps for path, d in loaded(memory.open(state=tmp_path / "fresh")).items()
    }


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(truncated_line, id="truncated-line"),
        pytest.param(out_of_range, id="date-out-of-range"),
        pytest.param(bad_sha, id="wrong-stamp"),
    ],
)
def test_a_lock_with_damaged_lines_is_kept_aside_and_its_valid_lines_load(lived, memory, clock, logged, damage):
    good = lived.lock_path.read_bytes()
    bad = damage(good)
    lived.lock_path.write_bytes(bad)
    logged.take()
    memory.open().refresh(now=clock.advance(days=1))
    (aside,) = aside_files(lived)
    assert aside.read_bytes() == bad
    assert len(logged.take()) == 1
    first = orjson.loads(good.splitlines()[1])
    damaged = (first[0], first[1])
    kept = decode_lock(lived.lock_path.read_bytes()).records
    before = decode_lock(good).records
    assert {key: kept[key] for key in kept if key != damaged} == {key: before[key] for key in before if key != damaged}
    assert kept[damaged].stamp.stamped_at == clock.epoch  # adopted again, as on first sight


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda data: b"{not json at all", id="corrupt"),
        pytest.param(lambda data: data[: len(data) // 2], id="truncated"),
        pytest.param(lambda data: b"[1, 2, 3]", id="json-list"),
        pytest.param(lambda data: with_row(data, [1, 2]), id="wrong-shape"),
        pytest.param(lambda data: with_row(data, ["1", 2, 3, 4, None, []]), id="text-size"),
        pytest.param(lambda data: with_row(data, [1, 2, 3, True, None, []]), id="bool-inode"),
        pytest.param(lambda data: with_row(data, [1, 2, 3, 4, None]), id="row-short"),
        pytest.param(lambda data: with_row(data, [1, 2, 3, 4, None, [], [[], []], 0]), id="row-long"),
        pytest.param(lambda data: with_row(data, [1, 2, 3, 4, None, [1]]), id="declaration"),
        pytest.param(lambda data: with_row(data, [1, 2, 3, 4, 7, []]), id="hash"),
    ],
)
def test_an_unreadable_cache_is_kept_aside_and_the_answer_is_the_same(lived, memory, clock, logged, damage) -> None:
    cache = lived.state_path / "cache.json"
    expected = lived.refresh(now=clock.advance(days=1))
    bad = damage(cache.read_bytes())
    cache.write_bytes(bad)
    memory.write("new.md", "a change, so that the next refresh loads everything")
    logged.take()
    report = memory.open().refresh(now=clock.now)
    (aside,) = aside_files(lived)
    assert aside.read_bytes() == bad
    assert len(logged.take()) == 1
    assert report.stale == expected.stale and report.edges == expected.edges


def test_state_set_aside_twice_keeps_both_copies(lived, memory, clock, logged) -> None:
    for attempt in (b"first damage", b"second damage"):
        lived.lock_path.write_bytes(attempt)
        memory.open().refresh(now=clock.advance(days=1))
    assert sorted(path.read_bytes() for path in aside_files(lived)) == [b"first damage", b"second damage"]
    assert len(logged.take()) == 2


# -- a schema-1 state file is converted ----------------------------------------------------------


def of_bytes(derivations: dict[str, Derivation]) -> dict[str, Derivation]:
    """The stamps as a state file held them: every one of a source's bytes."""
    return {
        path: Derivation(at, {source: stamp._replace(rule=HashRule.BYTES) for source, stamp in stamps.items()})
        for path, (at, stamps) in derivations.items()
    }


def _schema_1(derivations) -> dict:
    """A state file as provgraph wrote it before the lock (only what conversion reads)."""
    return {
        "format": "provgraph-state",
        "version": 1,
        "derivations": {
            path: {
                "derived_at": derivation.derived_at,
                "stamps": {
                    source: [stamp.sha256, stamp.stamped_at, stamp.mismatch_since]
                    for source, stamp in derivation.stamps.items()
                },
            }
            for path, derivation in derivations.items()
        },
    }


def test_a_schema_1_state_file_is_converted_without_losing_a_stamp_or_a_date(lived, memory, clock, logged):
    expected = lived.refresh(now=clock.advance(days=1))
    derivations = loaded(lived)
    legacy = _schema_1(derivations)
    lived.lock_path.unlink()
    shutil.rmtree(lived.state_path)
    lived.state_path.mkdir()
    data = orjson.dumps(legacy)
    (lived.state_path / "state.json").write_bytes(data)
    logged.take()

    report = memory.open().refresh(now=clock.now)

    assert report.stale == expected.stale and report.edges == expected.edges
    assert loaded(lived) == of_bytes(derivations)
    (aside,) = aside_files(lived)
    assert aside.name.startswith("state.json.migrated-") and aside.read_bytes() == data
    assert any("converted" in warning for warning in logged.take())
    assert not (lived.state_path / "state.json").exists()


# -- where state lives ---------------------------------------------------------------------


def test_state_path_puts_state_elsewhere_and_never_writes_into_the_root(memory, clock, tmp_path) -> None:
    memory.write("facts.md", "v1")
    memory.write("profile.md", derived_from="facts.md")
    before = sorted(path.relative_to(memory.root) for path in memory.root.rglob("*"))
    elsewhere = tmp_path / "state" / "nested" / "memory-state"
    api = memory.open(state=elsewhere)
    api.refresh(now=clock.now)
    memory.write("facts.md", "v2")
    assert api.refresh(now=clock.advance(days=1)).stale
    api.stamp(["profile.md"], now=clock.advance(days=1))
    assert (elsewhere / "provgraph.lock").is_file() and (elsewhere / "cache.json").is_file()
    assert sorted(path.relative_to(memory.root) for path in memory.root.rglob("*")) == before
    assert Memory(memory.root, state=elsewhere).refresh(now=clock.advance(days=1)).stale == ()


_libc = ctypes.CDLL(None, use_errno=True)
_PR_CAPBSET_DROP = 24
_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH, _CAP_FOWNER = 1, 2, 3


def _without_permission_bypass() -> None:
    """In the child before exec: a root user loses the capabilities that ignore file modes."""
    if os.geteuid() == 0:
        for capability in (_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH, _CAP_FOWNER):
            if _libc.prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
                raise OSError(ctypes.get_errno(), "cannot drop a capability")


REFRESH = """
import sys
import provgraph
from provgraph import Memory, StateError
try:
    Memory(sys.argv[1], state=sys.argv[2] if len(sys.argv) > 2 else None).refresh()
except StateError as error:
    print(type(error).__name__, error.path, error, sep="\\n")
else:
    print("ok")
"""


def refresh_unprivileged(*args: Path) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", REFRESH, *map(os.fspath, args)],
        capture_output=True,
        text=True,
        preexec_fn=_without_permission_bypass,
        timeout=60,
    )
    assert done.stderr == ""
    return done.stdout.splitlines()


@pytest.fixture
def read_only_root(memory):
    memory.write("facts.md", "v1")
    memory.write("profile.md", derived_from="facts.md")
    memory.root.chmod(0o555)
    yield memory
    memory.root.chmod(0o755)


def test_a_read_only_state_folder_is_a_clear_state_error(read_only_root) -> None:
    kind, path, message = refresh_unprivileged(read_only_root.root)
    assert kind == "StateError"
    assert path == os.fspath(read_only_root.root / ".provgraph")
    assert message.startswith(f"cannot use the state folder {path}: Permission denied")
    assert "--state" in message
    assert not (read_only_root.root / ".provgraph").exists()


def test_a_read_only_state_folder_given_with_state_is_a_clear_state_error(memory, tmp_path) -> None:
    memory.write("profile.md", derived_from="facts.md")
    folder = tmp_path / "frozen"
    folder.mkdir()
    assert refresh_unprivileged(memory.root, folder) == ["ok"]
    folder.chmod(0o555)
    try:
        kind, path, message = refresh_unprivileged(memory.root, folder)
    finally:
        folder.chmod(0o755)
    assert kind == "StateError"
    assert "Permission denied" in message and os.fspath(folder) in message


def test_a_read_only_memory_root_works_with_state_elsewhere(read_only_root, tmp_path) -> None:
    assert refresh_unprivileged(read_only_root.root, tmp_path / "state") == ["ok"]
    assert (tmp_path / "state" / "provgraph.lock").is_file()
    assert not (read_only_root.root / ".provgraph").exists()


def test_one_memory_shared_by_threads_loses_no_stamp(memory, clock) -> None:
    """Each transaction keeps what it opened to itself, so threads may share a ``Memory``."""
    for index in range(8):
        memory.write(f"s{index}.md", "v1")
        memory.write(f"d{index}.md", derived_from=f"s{index}.md")
    shared = memory.open()
    shared.refresh(now=clock.now)
    for index in range(8):
        memory.write(f"s{index}.md", "v2")
    failures: list[BaseException] = []

    def work(index: int) -> None:
        try:
            shared.refresh(now=clock.now)
            shared.stamp([f"d{index}.md"], now=clock.now)
        except BaseException as error:  # noqa: BLE001 - reported by the main thread
            failures.append(error)

    threads = [threading.Thread(target=work, args=(index,)) for index in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert shared.refresh(now=clock.advance(days=1)).stale == ()


def test_a_state_json_given_with_state_points_to_its_folder_and_is_converted(lived, memory, clock, tmp_path) -> None:
    """``--state`` used to name the state file; it names its folder now, and the file there
    is converted on first use."""
    legacy = tmp_path / "kept" / "state.json"
    legacy.parent.mkdir()
    derivations = loaded(lived)
    legacy.write_bytes(orjson.dumps(_schema_1(derivations)))
    with pytest.raises(StateError, match="the folder that holds it"):
        memory.open(state=legacy).refresh(now=clock.now)
    converted = memory.open(state=legacy.parent)
    converted.refresh(now=clock.now)
    assert loaded(converted) == of_bytes(derivations)


WRITTEN_BY_0_1 = (
    b'{"format":"provgraph-state","version":1,"scan_started_ns":1796120495401827589,"walk_problems":[],"li'
    b'sting":"f86d312689099dbec4c80c9d33338ac26a8b2c90d49071095b3ac8817c5c499e","watched":[["gone.md",null'
    b']],"report":{"root":"/tmp/v1demo","files":3,"edges":[["profile.md","digest.md","clean",1794301200.0,'
    b'null,null],["facts.md","profile.md","changed",1794301200.0,1794470400.0,null],["gone.md","profile.md'
    b'","missing",1794301200.0,1794301200.0,null]],"cycles":[],"problems":[]},"derivations":{"digest.md":{'
    b'"derived_at":null,"stamps":{"profile.md":["987d4ffed1003613551e5ff756a2cccd129eb869ba79222ab7ef246ca'
    b'ab0ebcb",1794301200.0,null]}},"profile.md":{"derived_at":"2026-11-10","stamps":{"facts.md":["2d27fbd'
    b'f4e8ca207afbfa388ca9172fbcc6c70e534af2476b3b704f87debadcf",1794301200.0,1794470400.0],"gone.md":[nul'
    b'l,1794301200.0,1794301200.0]}}},"rows":{"digest.md":[33,1796120492001518952,1796120492001518952,2179'
    b'004,"a41b29862bc519c1742fc7ec2aca70d0aa7ac3430c6bcdd5de9c9712e64f487b",[["profile.md"],null,[]]],"fa'
    b'cts.md":[3,1794470400000000000,1796120492135429553,2179000,"81db67b6a5702b9b68f0016f061c409bf3fb16d0'
    b'62fc854d1b424bb4e9c28c56",[]],"profile.md":[63,1796120492001518952,1796120492001518952,2179002,"987d'
    b'4ffed1003613551e5ff756a2cccd129eb869ba79222ab7ef246caab0ebcb",[["facts.md","gone.md"],"2026-11-10",['
    b']]]},"refused":{}}'
)
"""``.provgraph/state.json`` as provgraph 0.1 wrote it for the folder below: facts.md changed
on 2026-11-12, gone.md missing since 2026-11-10 (the stat cache in it belongs to another disk)."""


def test_a_state_json_written_by_the_previous_version_gives_the_same_answer(memory, clock) -> None:
    memory.write("facts.md", "v2\n")
    memory.write("profile.md", derived_from="facts.md, gone.md", derived_at="2026-11-10")
    memory.write("digest.md", derived_from="profile.md")
    memory.write_bytes(".provgraph/state.json", WRITTEN_BY_0_1)

    report = memory.open().refresh(now=clock.now)

    changed, missing = 1794470400.0, 1794301200.0  # 2026-11-12 08:00 and 2026-11-10 09:00 UTC
    assert {
        entry.path: (entry.since, {(cause.source, cause.kind.value, cause.since) for cause in entry.causes})
        for entry in report.stale
    } == {
        path: (missing, {("facts.md", "changed", changed), ("gone.md", "missing", missing)})
        for path in ("profile.md", "digest.md")
    }
    assert [path.name.split("-")[0] for path in (memory.root / ".provgraph").iterdir() if "migrated" in path.name] == [
        "state.json.migrated"
    ]


@given(st.binary(max_size=3000), st.integers(1, 700), st.binary(max_size=50))
def test_a_state_file_is_read_whole_however_short_its_reads_and_however_it_grows(
    data: bytes, most: int, added: bytes
) -> None:
    """One read of the size the open file has gives a state file whole, nearly always; after a
    read that gives less (a network file system, a signal) the file is read on to its end,
    with what was added to it meanwhile."""
    from provgraph.store import folder as statefolder

    read, calls = os.read, []

    def short(descriptor: int, size: int) -> bytes:
        found = read(descriptor, min(size, most))
        if not calls:
            with open(f"/proc/self/fd/{descriptor}", "ab") as appended:
                appended.write(added)
        calls.append(size)
        return found

    with tempfile.TemporaryDirectory() as folder, pytest.MonkeyPatch.context() as patch:
        Path(folder, "lock").write_bytes(data)
        descriptor = os.open(folder, os.O_RDONLY)
        try:
            patch.setattr(os, "read", short)
            found = statefolder.read_file(descriptor, "lock", folder)
        finally:
            os.close(descriptor)
    assert calls[0] == len(data) + 1  # the size the open file had, and one byte to see its end
    assert found == (data if most >= len(data) else data + added)


def test_a_damaged_row_a_patch_reads_is_kept_aside_and_the_answer_is_the_full_scans(memory, clock, logged) -> None:
    """The rest of a row is checked when a refresh first reads it: a row a patch reads that
    is not as written (its checksum made to match) sets the cache aside, once, and the
    refresh answers as one without a cache."""
    memory.write("facts.md", "v1\n", mtime=clock.now - timedelta(days=1))
    memory.write("profile.md", derived_from="facts.md", mtime=clock.now - timedelta(days=1))
    memory.write("other.md", "o1\n", mtime=clock.now - timedelta(days=1))
    api = memory.open()
    api.refresh(now=clock.now)
    cache = api.state_path / "cache.json"
    damaged = document(cache.read_bytes())
    damaged["rows"]["profile.md"][5] = [1]
    cache.write_bytes(written(damaged))
    memory.write("facts.md", "v2\n", mtime=clock.now)
    logged.take()

    report = memory.open().refresh(now=clock.advance(days=1))

    (aside,) = aside_files(api)
    assert len(logged.take()) == 1
    cache.unlink()
    without = memory.open().refresh(now=clock.now)
    assert (
        report.stale == without.stale
        and report.edges == without.edges
        and [e.path for e in report.stale] == ["profile.md"]
    )


def test_a_cache_whose_rows_and_edges_span_many_lines_answers_as_the_full_scan(memory, clock, monkeypatch) -> None:
    """Paths, stats, rows and edges are written a few at a time to a line: read back, patched
    and written again, they give the answer of a scan without a cache."""
    monkeypatch.setattr(cache_module, "VALUES_AT_ONCE", 2)
    monkeypatch.setattr(cache_module, "ROWS_AT_ONCE", 3)
    old = clock.now - timedelta(days=1)
    for index in range(7):
        memory.write(f"s{index}.md", f"v{index}\n", mtime=old)
        memory.write(f"d{index}.md", derived_from=f"s{index}.md, s{(index + 1) % 7}.md", mtime=old)
    memory.open().refresh(now=clock.now)
    for index in (2, 5):
        memory.write(f"s{index}.md", "changed\n", mtime=clock.now)
        report = memory.open().refresh(now=clock.advance(days=1))
        cache = cached(memory.open())
        assert dict(cache.rows) == document((memory.root / ".provgraph" / "cache.json").read_bytes())["rows"]
        (memory.root / ".provgraph" / "cache.json").unlink()
        assert memory.open().refresh(now=clock.now) == report
    assert [entry.path for entry in report.stale] == ["d1.md", "d2.md", "d4.md", "d5.md"]


def test_a_cache_read_keeps_alive_the_bytes_of_its_rows_not_the_whole_files(memory, clock) -> None:
    """A long-lived process keeps the cache it read: its rows, decoded when asked for, hold
    one copy of their lines' bytes, not the file's bytes with its paths, stats and edges."""
    for index in range(20):
        memory.write(f"s{index}.md", f"v{index}\n", mtime=clock.now - timedelta(days=1))
        memory.write(f"d{index}.md", derived_from=f"s{index}.md", mtime=clock.now - timedelta(days=1))
    api = memory.open()
    api.refresh(now=clock.now)
    data = (api.state_path / "cache.json").read_bytes()
    cache = cache_module.decode(cache_module.lines_of(data), provgraph.__version__, str(memory.root), api._settings)
    assert cache is not None
    buffers = {id(line.obj): line.obj for line in cache.rows.lines}
    assert [bytes(buffer) for buffer in buffers.values()] == [b"".join(cache.rows.lines)]
    assert len(b"".join(cache.rows.lines)) < len(data) / 2
