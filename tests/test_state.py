"""The state file (SPEC 4): lossless, atomic, set aside when unreadable, and kept where it is asked."""

from __future__ import annotations

import ctypes
import dataclasses
import os
import subprocess
import sys
import threading
from pathlib import Path

import orjson
import pytest

from provgraph import Memory, StateError
from provgraph.state import State, StateStore


@pytest.fixture
def lived(memory, clock) -> Memory:
    """A memory root whose state holds stamps, stale files, a cycle, problems and odd names."""
    memory.write("facts.md", "v1")
    memory.write("café/ünïcode fact.md", "u1")
    memory.write("profile.md", derived_from="facts.md, missing.md, ../../etc/passwd")
    memory.write("digest.md", derived_from="profile.md, [Facts](café/ünïcode%20fact.md)", derived_at="2024-03-01")
    memory.write("a.md", derived_from="b.md")
    memory.write("b.md", derived_from="a.md")
    api = memory.open()
    api.refresh(now=clock.now)
    memory.write("facts.md", "v2")
    api.refresh(now=clock.advance(days=1))
    return api


def aside_files(state_path: Path) -> list[Path]:
    """Every file beside the state file other than the state file and its lock."""
    own = {state_path.name, state_path.name + ".lock"}
    return sorted(path for path in state_path.parent.iterdir() if path.name not in own)


# -- round trip and atomic writes ----------------------------------------------------------


def test_state_round_trips_losslessly(lived) -> None:
    store = StateStore(lived.state_path)
    loaded = store.load()
    assert loaded.derivations and loaded.seen and loaded.report is not None and loaded.report.stale
    original = lived.state_path.read_bytes()
    store.save(loaded)
    assert lived.state_path.read_bytes() == original
    assert store.load() == loaded


def test_the_saved_report_is_the_one_returned(lived, clock) -> None:
    report = lived.refresh(now=clock.advance(days=1))
    saved = StateStore(lived.state_path).load().report
    assert saved is not None
    assert dataclasses.replace(saved, scanned_at=report.scanned_at) == report


def test_a_rebuilt_state_object_saves_the_same_bytes(lived) -> None:
    store = StateStore(lived.state_path)
    loaded = store.load()
    rebuilt = State(
        derivations=dict(loaded.derivations),
        seen=dict(loaded.seen),
        scan_started_ns=loaded.scan_started_ns,
        report=loaded.report,
        walk_problems=loaded.walk_problems,
        settings=loaded.settings,
    )
    original = lived.state_path.read_bytes()
    store.save(rebuilt)
    assert lived.state_path.read_bytes() == original


def test_writes_leave_no_temporary_files(lived, clock) -> None:
    for day in range(5):
        lived.refresh(now=clock.advance(days=day))
        lived.stamp(["profile.md"], now=clock.now)
    assert sorted(path.name for path in lived.state_path.parent.iterdir()) == ["state.json", "state.json.lock"]


def test_a_reader_always_sees_a_whole_file(lived) -> None:
    store = StateStore(lived.state_path)
    big = store.load()
    small = State()
    stop = threading.Event()
    failures: list[BaseException] = []

    def write() -> None:
        try:
            for round_ in range(150):
                store.save(big if round_ % 2 else small)
        except BaseException as error:  # noqa: BLE001 - reported by the main thread
            failures.append(error)
        finally:
            stop.set()

    writer = threading.Thread(target=write)
    writer.start()
    reads = 0
    while not stop.is_set() or reads == 0:
        document = orjson.loads(lived.state_path.read_bytes())
        assert document["format"] == "provgraph-state"
        reads += 1
    writer.join()
    assert not failures
    assert aside_files(lived.state_path) == []


def test_a_failed_write_keeps_the_old_state(lived, monkeypatch) -> None:
    original = lived.state_path.read_bytes()

    def no_space(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", no_space)
    with pytest.raises(StateError) as raised:
        StateStore(lived.state_path).save(State())
    assert str(lived.state_path) in str(raised.value)
    assert "No space left on device" in str(raised.value)
    assert lived.state_path.read_bytes() == original
    assert aside_files(lived.state_path) == []


# -- unreadable state is set aside ---------------------------------------------------------


def truncated(data: bytes) -> bytes:
    return data[: len(data) // 2]


def other_version(data: bytes) -> bytes:
    return orjson.dumps({**orjson.loads(data), "version": 99})


def wrong_shape(data: bytes) -> bytes:
    return orjson.dumps({**orjson.loads(data), "derivations": [1, 2, 3]})


def wrong_stamp(data: bytes) -> bytes:
    document = orjson.loads(data)
    document["derivations"]["profile.md"]["stamps"]["facts.md"] = "sha"
    return orjson.dumps(document)


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda data: b"{not json at all", id="corrupt"),
        pytest.param(truncated, id="truncated"),
        pytest.param(lambda data: b"", id="empty"),
        pytest.param(other_version, id="unknown-version"),
        pytest.param(lambda data: b'{"hello": "world"}', id="foreign-json"),
        pytest.param(lambda data: b"[1, 2, 3]", id="json-list"),
        pytest.param(wrong_shape, id="wrong-shape"),
        pytest.param(wrong_stamp, id="wrong-stamp"),
        pytest.param(lambda data: b"\xff\xfe\x00binary", id="binary"),
    ],
)
def test_unreadable_state_is_kept_aside_and_rebuilt(lived, memory, clock, capsys, tmp_path, damage) -> None:
    bad = damage(lived.state_path.read_bytes())
    lived.state_path.write_bytes(bad)
    capsys.readouterr()
    report = memory.open().refresh(now=clock.advance(days=1))
    (aside,) = aside_files(lived.state_path)
    assert aside.read_bytes() == bad
    warning = capsys.readouterr().err
    assert "warning" in warning and str(lived.state_path) in warning and aside.name in warning
    first_use = memory.open(state=tmp_path / "fresh.json").refresh(now=clock.now)
    assert "profile.md" in {entry.path for entry in first_use.stale}  # missing.md never existed
    assert report.stale == first_use.stale
    assert StateStore(lived.state_path).load().derivations == StateStore(tmp_path / "fresh.json").load().derivations


def test_state_set_aside_twice_keeps_both_copies(lived, memory, clock, capsys) -> None:
    for attempt in (b"first damage", b"second damage"):
        lived.state_path.write_bytes(attempt)
        memory.open().refresh(now=clock.advance(days=1))
    assert sorted(path.read_bytes() for path in aside_files(lived.state_path)) == [b"first damage", b"second damage"]
    assert len(capsys.readouterr().err.strip().splitlines()) == 2


# -- where state lives ---------------------------------------------------------------------


def test_state_path_puts_state_elsewhere_and_never_writes_into_the_root(memory, clock, tmp_path) -> None:
    memory.write("facts.md", "v1")
    memory.write("profile.md", derived_from="facts.md")
    before = sorted(path.relative_to(memory.root) for path in memory.root.rglob("*"))
    elsewhere = tmp_path / "state" / "nested" / "memory-state.json"
    api = memory.open(state=elsewhere)
    api.refresh(now=clock.now)
    memory.write("facts.md", "v2")
    assert api.refresh(now=clock.advance(days=1)).stale
    api.stamp(["profile.md"], now=clock.advance(days=1))
    assert elsewhere.is_file()
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


def test_a_read_only_state_file_folder_is_a_clear_state_error(memory, tmp_path) -> None:
    memory.write("profile.md", derived_from="facts.md")
    folder = tmp_path / "frozen"
    folder.mkdir()
    assert refresh_unprivileged(memory.root, folder / "state.json") == ["ok"]
    folder.chmod(0o555)
    try:
        kind, path, message = refresh_unprivileged(memory.root, folder / "state.json")
    finally:
        folder.chmod(0o755)
    assert kind == "StateError"
    assert "Permission denied" in message and os.fspath(folder) in message


def test_a_read_only_memory_root_works_with_state_elsewhere(read_only_root, tmp_path) -> None:
    assert refresh_unprivileged(read_only_root.root, tmp_path / "state.json") == ["ok"]
    assert (tmp_path / "state.json").is_file()
    assert not (read_only_root.root / ".provgraph").exists()
