"""The rules of provgraph's own files hold for the Claude Code hook's session reads too,
and every line provgraph prints escapes the names it echoes.

- The reads file and its lock are opened only as regular files, never through a
  symlink, in a state folder checked to be a real folder: a planted link sends no
  write anywhere.
- A hook never waits forever for the reads lock: when another hook holds it (even one
  suspended with SIGSTOP), the read is let go and the hook answers at once, silently.
- The store's cleanup of its own temporary files never removes a reads write in progress.
- An error line echoes what the user typed through ``safe_name``: one line, no raw newline
  or escape code.
- A declared source that leads to provgraph's own files says that it is provgraph's state.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from provgraph import Memory
from provgraph.integrations.claude_code import READS_NAME, RECORD_WAIT, SessionReads
from provgraph.render import safe_name

from .helpers import NOW, TIMEOUT, Done, assert_clean, assert_one_error_line, derived, environment, provgraph, write

OWN = {READS_NAME, READS_NAME + ".lock"}
"""The reads file and its lock: anything else beginning with their name is a leftover."""


def _lineage(root: Path) -> None:
    write(root, "MEMORY.md", "# index\n")
    write(root, "a.md", "a\n")
    write(root, "d.md", derived("a.md"))


def _event(root: Path, tool: str, name: str) -> bytes:
    return orjson.dumps(
        {
            "hook_event_name": "PostToolUse",
            "session_id": "s1",
            "cwd": os.fspath(root),
            "tool_name": tool,
            "tool_input": {"file_path": os.fspath(root / name)},
        }
    )


def _hook(root: Path, event: bytes, *options: str | os.PathLike[str], timeout: float = TIMEOUT) -> Done:
    done = subprocess.run(
        [sys.executable, "-m", "provgraph", "hook", "claude-code", os.fspath(root), *map(os.fspath, options)],
        input=event,
        env=environment(),
        capture_output=True,
        timeout=timeout,
    )
    return Done(done.returncode, done.stdout.decode(), done.stderr.decode())


# -- writes go only to provgraph's own regular files -------------------------------------------


@pytest.mark.parametrize("name", [READS_NAME, READS_NAME + ".lock"])
@pytest.mark.parametrize("target", ["dangling", "a-memory-file", "outside"])
def test_a_symlink_at_the_session_reads_or_their_lock_sends_no_write_anywhere(
    name: str, target: str, root: Path, tmp_path: Path
) -> None:
    _lineage(root)
    assert_clean(provgraph("status", root), 0)
    pointed = {
        "dangling": root / "created-by-provgraph.md",
        "a-memory-file": write(root, "notes.md", '{"version": 1, "sessions": {}}'),
        "outside": write(tmp_path / "outside", "someone.json", "someone's file\n"),
    }[target]
    before = pointed.read_bytes() if pointed.exists() else None
    link = root / ".provgraph" / name
    link.symlink_to(pointed)

    done = _hook(root, _event(root, "Read", "a.md"))

    assert_clean(done, 0)
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("provgraph: hook: the read was not recorded: ") and str(link) in line
    assert line.endswith("a symlink, which provgraph does not follow")
    assert link.is_symlink() and os.readlink(link) == os.fspath(pointed)
    assert (pointed.read_bytes() if pointed.exists() else None) == before
    assert {entry for entry in os.listdir(root / ".provgraph") if entry.startswith(READS_NAME)} <= OWN
    write(root, "d.md", derived("a.md", body="rewritten\n"))
    assert_clean(_hook(root, _event(root, "Write", "d.md")), 0)  # and a later write still gets its notes


def test_a_session_reads_folder_that_is_a_symlink_is_never_written_through(root: Path, tmp_path: Path) -> None:
    _lineage(root)
    (root / ".provgraph").symlink_to(tmp_path / "outside")

    done = _hook(root, _event(root, "Read", "a.md"))

    assert_clean(done, 0)
    assert "not a real folder" in done.stderr and len(done.stderr.splitlines()) == 1
    assert os.listdir(tmp_path / "outside") == []


def test_a_session_reads_state_folder_in_the_memory_tree_is_refused(root: Path) -> None:
    """``--state`` in the memory folder outside ``.provgraph/`` is refused by the store; a
    ``Read`` event, which never opens the store, refuses it too and writes nothing."""
    _lineage(root)
    write(root, "notes/n.md", "n\n")
    for state in (root / "notes", root / "notes" / "new", root):
        before = sorted(os.walk(root))

        done = _hook(root, _event(root, "Read", "a.md"), "--state", state)

        assert_clean(done, 0)
        (line,) = done.stderr.splitlines()
        assert line.startswith("provgraph: hook: the read was not recorded: ") and "lies in the memory folder" in line
        assert sorted(os.walk(root)) == before


# -- nothing waits forever -----------------------------------------------------------------------

SUSPENDED = """
import os, signal, sys
from provgraph.integrations import claude_code
real = claude_code.SessionReads._load
def _load(self, *args):
    print("holding", flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)
    return real(self, *args)
claude_code.SessionReads._load = _load
from provgraph.cli import cli
sys.exit(cli(*sys.argv[1:]))
"""


def test_a_reads_lock_held_by_a_suspended_hook_does_not_hang_the_next_hook(root: Path) -> None:
    """Ctrl-Z (SIGSTOP) on a hook that holds the reads lock: the next hook answers within
    the bounded wait, silently, without the read (reads only feed suggestions)."""
    _lineage(root)
    suspended = subprocess.Popen(
        [sys.executable, "-c", SUSPENDED, "hook", "claude-code", root],
        env=environment(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert suspended.stdin is not None and suspended.stdout is not None
        suspended.stdin.write(_event(root, "Read", "d.md"))
        suspended.stdin.close()
        assert suspended.stdout.readline() == b"holding\n"

        started = time.monotonic()
        try:
            done = _hook(root, _event(root, "Read", "a.md"), timeout=RECORD_WAIT + 60)
        except subprocess.TimeoutExpired:
            pytest.fail("the hook waited for the suspended hook's reads lock")
        waited = time.monotonic() - started
    finally:
        suspended.kill()
        suspended.wait()
        suspended.stdout.close()

    assert done == Done(0, "", "")
    assert waited < RECORD_WAIT + 30
    assert SessionReads.beside(root / ".provgraph").reads("s1") == frozenset()


def test_the_store_cleanup_never_removes_a_session_reads_write_in_progress(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store removes leftover temporaries whenever it takes its lock; a reads write,
    under another lock, is in flight at that moment and must survive it."""
    _lineage(root)
    interrupted: list[str] = []

    def interrupting(real):
        def rename(source, target, **folders):
            if os.fsdecode(os.path.basename(source)).startswith(READS_NAME + ".") and not interrupted:
                interrupted.append(source)
                Memory(root).refresh(now=NOW)  # another process's scan, at the worst moment
            return real(source, target, **folders)

        return rename

    monkeypatch.setattr(os, "rename", interrupting(os.rename))
    monkeypatch.setattr(os, "replace", interrupting(os.replace))
    SessionReads.beside(root / ".provgraph").record("s1", "a.md")

    assert interrupted
    assert SessionReads.beside(root / ".provgraph").reads("s1") == {"a.md"}
    assert {name for name in os.listdir(root / ".provgraph") if name.startswith(READS_NAME)} == OWN


# -- nothing unescaped reaches a terminal --------------------------------------------------------

HOSTILE = "bad\nprovgraph: error: \x1b[31mfake\x07"


@pytest.mark.parametrize(
    "arguments",
    [
        pytest.param(lambda root: ("why", HOSTILE), id="why-without-a-root"),
        pytest.param(lambda root: ("why", "--root", root, f"../{HOSTILE}"), id="why-outside-the-root"),
        pytest.param(lambda root: ("stamp", "--root", root / HOSTILE, "d.md"), id="stamp-root-not-a-folder"),
        pytest.param(lambda root: ("status", root / HOSTILE), id="status-root-not-a-folder"),
        pytest.param(lambda root: ("status", root, "--state", root / HOSTILE), id="state-in-the-memory-tree"),
        pytest.param(lambda root: ("prompt", root, "--state", root.parent / "outside" / "file" / HOSTILE), id="state"),
        pytest.param(lambda root: ("status", root, HOSTILE), id="usage"),
    ],
)
def test_every_error_line_names_what_the_user_typed_through_the_same_escaping(arguments, root: Path) -> None:
    _lineage(root)
    write(root.parent / "outside", "file", "a file, not a folder\n")
    done = provgraph(*arguments(root), cwd=root.parent / "outside")

    assert done.code == 2 and "Traceback" not in done.stderr
    (line,) = done.stderr.splitlines()
    assert "error: " in line and "\x1b" not in line and "\x07" not in line
    assert "\\u000a" in line and "\\u001b" in line
    assert not os.path.exists(root / HOSTILE)


def test_a_state_error_names_the_state_folder_through_the_same_escaping(root: Path, tmp_path: Path) -> None:
    _lineage(root)
    state = tmp_path / "outside" / HOSTILE
    write(tmp_path / "outside", HOSTILE, "a file where the state folder should be\n")

    line = assert_one_error_line(provgraph("status", root, "--state", state))

    assert safe_name(str(state)) in line and "not a real folder" in line


HOLD = """
import fcntl, os, sys, time
descriptor = os.open(sys.argv[1], os.O_RDWR)
fcntl.flock(descriptor, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(600)
"""


def test_a_warning_names_the_state_folder_through_the_same_escaping(root: Path, tmp_path: Path) -> None:
    _lineage(root)
    state = tmp_path / "outside" / HOSTILE
    assert_clean(provgraph("status", root, "--state", state), 0)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, state / "flock"], stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
        done = provgraph("prompt", root, "--state", state)
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()

    assert_clean(done, 0)
    (line,) = done.stderr.splitlines()
    assert line.startswith("provgraph: warning: ") and safe_name(str(state)) in line and "\x1b" not in line


# -- provgraph's own files are never a source ----------------------------------------------------


def test_a_source_that_leads_to_provgraph_own_files_is_named_as_provgraph_state(root: Path) -> None:
    write(root, "MEMORY.md", "# index\n")
    write(root, "a.md", "a\n")
    write(root, "d.md", derived("a.md", "provgraph.lock", "own/cache.json", "lock-link"))
    (root / "own").symlink_to(".provgraph")
    (root / "lock-link").symlink_to("provgraph.lock")
    assert_clean(provgraph("stamp", root / "d.md"), 0)

    status = orjson.loads(provgraph("status", "--json", root).stdout)

    details = sorted(problem["detail"] for problem in status["problems"])
    assert details == [
        f"provgraph's own state, never a source: {name}" for name in ("lock-link", "own/cache.json", "provgraph.lock")
    ]
