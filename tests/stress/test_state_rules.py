"""The rules of provgraph's own files, tried as an attacker and as an unlucky user would.

- It opens, creates, renames and deletes only regular files it owns, inside a state
  folder it checked is a real folder, and refuses a state folder in the memory tree
  outside ``.provgraph/``; its own files are never a declared source.
- Readers never wait forever for the exclusive lock; a stamp reports a held lock.
- A lock or cache that does not decode into valid values is set aside, never a crash.
- A state folder belongs to one memory root.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest
from cachefile import document, written
from conftest import PROVGRAPH

from provgraph import Memory, StateError, api
from provgraph.cli import cli

from .helpers import (
    NOW,
    TIMEOUT,
    Done,
    assert_clean,
    assert_one_error_line,
    derived,
    environment,
    provgraph,
    write,
)

READERS = [("status",), ("status", "--json"), ("prompt",), ("check",), ("graph",), ("hook", "claude-code")]


def _tree(folder: Path) -> dict[str, tuple]:
    """Every entry under ``folder`` (links not followed): type, content or target, times."""
    found = {}
    for parent, folders, files in os.walk(folder):
        for name in folders + files:
            path = os.path.join(parent, name)
            info = os.lstat(path)
            if os.path.islink(path):
                content: object = os.readlink(path)
            elif os.path.isfile(path):
                content = Path(path).read_bytes()
            else:
                content = None
            found[os.path.relpath(path, folder)] = (info.st_mode, info.st_mtime_ns, info.st_ino, content)
    return found


def _one_line(command: tuple[str | os.PathLike[str], ...], done: Done) -> str:
    """The one error line of a command; the hook says it with exit 0 (it never breaks a session)."""
    if command[0] != "hook":
        return assert_one_error_line(done)
    assert done.code == 0 and len(done.stderr.splitlines()) == 1, (done.code, done.stderr)
    assert done.stderr.startswith("provgraph: hook: ")
    return done.stderr.rstrip("\n")


def _lineage(root: Path) -> None:
    write(root, "MEMORY.md", "# index\n")
    write(root, "a.md", "a\n")
    write(root, "d.md", derived("a.md"))


# -- writes go only to provgraph's own regular files -------------------------------------------


@pytest.mark.parametrize("target", ["another-folder", "the-root", "out-of-the-root"])
def test_a_symlinked_state_folder_is_refused_and_nothing_is_written_through_it(
    target: str, root: Path, tmp_path: Path
) -> None:
    _lineage(root)
    write(root, "state.json", "a memory file that happens to have this name\n")
    write(root, "cache.json", "another one\n")
    write(root, "other/notes.md", "notes\n")
    write(tmp_path / "outside", "cache.json", "not provgraph's\n")
    write(tmp_path / "outside", "x.tmp", "not provgraph's either\n")
    link = {"another-folder": "other", "the-root": ".", "out-of-the-root": os.fspath(tmp_path / "outside")}[target]
    (root / ".provgraph").symlink_to(link)
    before, outside = _tree(root), _tree(tmp_path / "outside")

    for command in (*READERS, ("stamp", "--root", root, root / "d.md")):
        args = command if command[0] == "stamp" else (*command, root)
        line = _one_line(command, provgraph(*args))
        assert "not a real folder" in line and str(root / ".provgraph") in line

    assert _tree(root) == before and _tree(tmp_path / "outside") == outside


@pytest.mark.parametrize("name", [".provgraph/flock", ".provgraph/cache.json", "provgraph.lock"])
def test_a_dangling_symlink_at_a_state_file_creates_nothing_where_it_points(name: str, root: Path) -> None:
    _lineage(root)
    (root / ".provgraph").mkdir()
    target = root / "created-by-provgraph.md"
    (root / name).symlink_to(target)

    for command in READERS:
        done = provgraph(*command, root)
        line = _one_line(command, done)
        assert line.endswith("a symlink, which provgraph does not follow") and str(root / name) in line
    assert not target.exists() and (root / name).is_symlink()


def test_a_state_folder_that_is_a_memory_file_or_in_the_memory_tree_is_refused(root: Path) -> None:
    _lineage(root)
    write(root, "notes/n.md", "n\n")
    before = _tree(root)

    for state in (root / "a.md", root / "notes", root / "notes" / "new", root):
        for command in READERS:
            line = _one_line(command, provgraph(*command, root, "--state", state))
            assert f"--state {state}" in line and "lies in the memory folder" in line
        with pytest.raises(StateError):
            Memory(root, state=state).refresh(now=NOW)
    assert _tree(root) == before
    assert_clean(provgraph("status", root, "--state", root / ".provgraph" / "elsewhere"), 0)


def test_a_state_folder_outside_that_is_a_file_is_refused_unchanged(root: Path, tmp_path: Path) -> None:
    _lineage(root)
    file = write(tmp_path / "outside", "state.json", "someone's file\n")
    line = assert_one_error_line(provgraph("status", root, "--state", file))
    assert "not a real folder" in line
    assert file.read_text() == "someone's file\n"


def test_provgraph_own_files_are_never_a_declared_source(root: Path) -> None:
    """Through the lock's own name, a link to it, or a link to ``.provgraph``: a bad entry,
    so a stamp, which rewrites them, can never make a file stale."""
    write(root, "MEMORY.md", "# index\n")
    write(root, "a.md", "a\n")
    write(root, "d.md", derived("a.md", "provgraph.lock", "own/cache.json", "own/flock", "lock-link"))
    (root / "own").symlink_to(".provgraph")
    (root / "lock-link").symlink_to("provgraph.lock")
    assert_clean(provgraph("stamp", root / "d.md"), 0)
    write(root, "a.md", "a again\n")
    assert_clean(provgraph("stamp", root / "d.md"), 0)

    status = orjson.loads(provgraph("status", "--json", root).stdout)

    assert status["stale"] == []
    refused = {problem["detail"].rsplit(": ", 1)[1] for problem in status["problems"] if problem["kind"] == "bad-entry"}
    assert refused == {"provgraph.lock", "own/cache.json", "own/flock", "lock-link"}


# -- nothing waits forever -----------------------------------------------------------------------

HOLD = """
import fcntl, os, sys, time
descriptor = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(descriptor, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(600)
"""


@pytest.fixture
def held(root: Path) -> Iterator[Path]:
    """Another process holds the root's exclusive lock (and never lets go)."""
    _changed_lineage(root)
    holder = _holding([sys.executable, "-c", HOLD, root / ".provgraph" / "flock"], b"held\n")
    try:
        yield root
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()


@dataclass(frozen=True)
class WhileHeld:
    """What every reader answered while the lock was held, all of them started at once:
    each waits out the same bounded wait, so one wait serves every reader's test."""

    answers: dict[tuple[str, ...], tuple[Done, float]]
    """Each command's answer and how long it took at most (seconds)."""
    lock_before: bytes
    lock_after: bytes
    middleware_prompt: str
    """The AgentScope middleware's system prompt, asked in this process meanwhile."""
    behind_suspended: Done
    """``prompt`` on another root whose lock a suspended ``provgraph stamp`` holds."""


SUSPENDED = (
    "import os, signal, sys\n"
    "from provgraph.store import state\n"
    "real = state.StateStore.cache\n"
    "def cache(self):\n"
    "    print('holding', flush=True)\n"
    "    os.kill(os.getpid(), signal.SIGSTOP)\n"
    "    return real(self)\n"
    "state.StateStore.cache = cache\n"
    "from provgraph.cli import cli\n"
    "sys.exit(cli(*sys.argv[1:]))\n"
)
"""``provgraph`` stopped (Ctrl-Z) right after it took the lock."""


def _changed_lineage(root: Path) -> None:
    """A lineage that a first run saved, then a source changed: a scan finds ``d.md`` stale."""
    _lineage(root)
    assert_clean(provgraph("status", root), 0)
    write(root, "a.md", "a changed\n")


def _holding(command: list, ready: bytes) -> subprocess.Popen:
    """A process that holds a lock, once it said so on its output."""
    holder = subprocess.Popen(command, env=environment(), stdout=subprocess.PIPE)
    assert holder.stdout is not None and holder.stdout.readline() == ready
    return holder


def _started(*args: str | os.PathLike[str]) -> subprocess.Popen:
    """``provgraph ARGS`` started, as ``provgraph()`` runs it, without waiting for it."""
    command = [PROVGRAPH, *map(os.fspath, args)]
    pipes = {"stdin": subprocess.DEVNULL, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    return subprocess.Popen(command, env=environment(), **pipes)


def _finished(process: subprocess.Popen) -> Done:
    out, err = process.communicate(timeout=TIMEOUT)
    return Done(process.returncode, out.decode("utf-8"), err.decode("utf-8"))


def _middleware_prompt(work: Path) -> str:
    import asyncio

    from provgraph.integrations.agentscope import ProvenanceMiddleware

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PROVGRAPH_NOW", NOW.isoformat())
        return asyncio.run(ProvenanceMiddleware(workdir=str(work)).on_system_prompt(None, "prompt"))


@pytest.fixture(scope="module")
def while_held(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WhileHeld]:
    base = tmp_path_factory.mktemp("held")
    memory, other = base / "work" / "Memory", base / "suspended"
    _changed_lineage(memory)
    _changed_lineage(other)
    holders = []
    try:
        holders.append(_holding([sys.executable, "-c", HOLD, memory / ".provgraph" / "flock"], b"held\n"))
        holders.append(_holding([sys.executable, "-c", SUSPENDED, "stamp", other / "d.md"], b"holding\n"))
        lock = (memory / "provgraph.lock").read_bytes()
        started = time.monotonic()
        readers = {command: _started(*command, memory) for command in READERS}
        behind_suspended = _started("prompt", other)
        prompt = _middleware_prompt(memory.parent)
        answers = {command: (_finished(reader), time.monotonic() - started) for command, reader in readers.items()}
        yield WhileHeld(answers, lock, (memory / "provgraph.lock").read_bytes(), prompt, _finished(behind_suspended))
    finally:
        for holder in holders:
            holder.kill()
            holder.wait()
            holder.stdout.close()


@pytest.mark.parametrize("command", READERS)
def test_readers_answer_within_a_bounded_wait_while_another_process_holds_the_lock(
    command: tuple[str, ...], while_held: WhileHeld
) -> None:
    done, waited = while_held.answers[command]

    assert_clean(done, 0, 1)
    assert waited < api.READ_WAIT + 30  # bounded: the holder sleeps for ten minutes
    (warning,) = done.stderr.splitlines()
    assert warning.startswith("provgraph: warning: ") and "locked by another provgraph process" in warning
    if command[0] in ("status", "prompt"):
        assert "d.md" in done.stdout  # the answer of a scan, not the last saved one
    assert while_held.lock_after == while_held.lock_before  # and nothing was saved


def test_a_reader_answers_while_a_suspended_provgraph_holds_the_lock(while_held: WhileHeld) -> None:
    """Ctrl-Z on a provgraph that holds the lock: the next agent start still gets its answer."""
    done = while_held.behind_suspended
    assert_clean(done, 0)
    assert "d.md" in done.stdout and len(done.stderr.splitlines()) == 1


def test_the_middleware_answers_within_a_bounded_wait_while_another_process_holds_the_lock(
    while_held: WhileHeld,
) -> None:
    prompt = while_held.middleware_prompt
    assert prompt.startswith("prompt") and "- d.md: source(s) changed since derived" in prompt


def test_a_stamp_reports_a_held_lock_as_one_error_line(
    held: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(api, "WRITE_WAIT", 0.5)
    lock = (held / "provgraph.lock").read_bytes()
    code = cli("stamp", str(held / "d.md"))
    captured = capsys.readouterr()
    line = assert_one_error_line(Done(code, captured.out, captured.err))
    assert "locked by another provgraph process" in line
    assert (held / "provgraph.lock").read_bytes() == lock


def test_the_lock_is_taken_again_once_the_holder_is_gone(held: Path) -> None:
    descriptor = os.open(held / ".provgraph" / "flock", os.O_RDWR)
    try:
        with pytest.raises(BlockingIOError):
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(descriptor)


# -- state that is wrong is set aside -----------------------------------------------------------


def test_a_lock_with_a_valid_but_out_of_range_date_is_set_aside_not_a_crash(root: Path) -> None:
    _lineage(root)
    assert_clean(provgraph("status", root), 0)
    lock = root / "provgraph.lock"
    header, line = lock.read_bytes().splitlines()
    row = orjson.loads(line)
    row[4] = 10.0**15  # a valid number, and a date in the year 31 million
    lock.write_bytes(header + b"\n" + orjson.dumps(row) + b"\n")

    for command in READERS:
        assert_clean(provgraph(*command, root), 0)
    kept = [path for path in (root / ".provgraph").iterdir() if ".corrupt-" in path.name]
    assert len(kept) == 1


@pytest.mark.parametrize("changed", [False, True], ids=["nothing-changed", "a-file-added"])
def test_a_cache_with_a_valid_but_out_of_range_date_is_replaced_not_a_crash(root: Path, changed: bool) -> None:
    """The date sits in the stored last result, which only the no-change check reads: there
    damage means a full scan, and a scan after a change never reads it; either saves a
    cache that replaces it."""
    _lineage(root)
    assert_clean(provgraph("status", root), 0)
    write(root, "a.md", "a changed\n")
    assert_clean(provgraph("status", root), 0)
    cache = root / ".provgraph" / "cache.json"
    found = document(cache.read_bytes())
    found["last"]["edges"][0][4] = 10.0**15
    cache.write_bytes(written(found))
    if changed:
        write(root, "b.md", "a new file: the next run scans\n")

    done = provgraph("status", "--json", root)

    assert_clean(done, 0)
    assert orjson.loads(done.stdout)["stale"][0]["path"] == "d.md"
    assert all(edge[4] is None or edge[4] < 10.0**15 for edge in document(cache.read_bytes())["last"]["edges"])


# -- a state folder belongs to one root ---------------------------------------------------------


def test_a_state_folder_of_another_root_is_refused_never_mixed(root: Path, tmp_path: Path) -> None:
    _lineage(root)
    other = tmp_path / "other"
    write(other, "a.md", "something else\n")
    write(other, "d.md", derived("a.md"))
    shared = tmp_path / "shared-state"
    assert_clean(provgraph("status", root, "--state", shared), 0)
    lock = (shared / "provgraph.lock").read_bytes()

    line = assert_one_error_line(provgraph("status", other, "--state", shared))

    assert f"belongs to the memory folder {root}" in line and str(other) in line
    assert (shared / "provgraph.lock").read_bytes() == lock
    assert_clean(provgraph("status", root, "--state", shared), 0)
