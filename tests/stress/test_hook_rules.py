"""The Claude Code hook never breaks a session, and every command it prints works as printed.

- Every event exits 0 with at most one line on stderr and no traceback, whatever the event
  holds (a NUL byte in ``cwd`` or ``file_path``) and whatever stands where provgraph's state
  belongs (``.provgraph`` a symlink, ``provgraph.lock`` a folder): exit 2 is a blocking error
  Claude Code shows the model after every write.
- Each command the hook prints (the block's, the notes', the settings') does, pasted into a
  shell from another folder, what the output says, for a root with a space and a quote in
  its name, a sources heading, and a file whose name starts with ``-``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import orjson
import pytest
from conftest import PROVGRAPH

from .helpers import assert_clean, derived, environment, provgraph, write

EVENTS = ("SessionStart", "Read", "Write", "Edit", "MultiEdit")


def _event(root: Path, kind: str, name: str = "d.md", cwd: str | None = None) -> bytes:
    """The event of ``kind`` on ``name`` (relative to ``cwd``, the root by default)."""
    cwd = os.fspath(root) if cwd is None else cwd
    if kind == "SessionStart":
        return orjson.dumps({"hook_event_name": kind, "session_id": "s1", "cwd": cwd})
    return orjson.dumps(
        {
            "hook_event_name": "PostToolUse",
            "session_id": "s1",
            "cwd": cwd,
            "tool_name": kind,
            "tool_input": {"file_path": name},
        }
    )


def _hook(root: Path, event: bytes, *options: str) -> tuple[int, str, str]:
    done = subprocess.run(
        [os.fspath(PROVGRAPH), "hook", "claude-code", os.fspath(root), *options],
        input=event,
        env=environment(),
        capture_output=True,
        timeout=60,
    )
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def _lineage(root: Path) -> None:
    write(root, "MEMORY.md", "# index\n")
    write(root, "a.md", "a\n")
    write(root, "d.md", derived("a.md"))


def _nul_in_cwd(root: Path, kind: str) -> bytes:
    return _event(root, kind, cwd=os.fspath(root / "sub\0folder"))


def _nul_in_file_path(root: Path, kind: str) -> bytes:
    return _event(root, kind, name=os.fspath(root / "sub\0folder" / "d.md"))


def _state_folder_a_symlink(root: Path, kind: str) -> bytes:
    (root / ".provgraph").symlink_to(root.parent / "outside", target_is_directory=True)
    return _event(root, kind)


def _lock_a_folder(root: Path, kind: str) -> bytes:
    (root / "provgraph.lock").mkdir()
    return _event(root, kind)


@pytest.mark.parametrize("kind", EVENTS)
@pytest.mark.parametrize("damage", [_nul_in_cwd, _nul_in_file_path, _state_folder_a_symlink, _lock_a_folder])
def test_the_hook_never_breaks_a_session(root: Path, kind: str, damage) -> None:
    _lineage(root)
    code, out, err = _hook(root, damage(root, kind))
    assert code == 0, err
    assert "Traceback" not in err and len(err.splitlines()) <= 1, err
    assert not err or err.startswith("provgraph: hook: ")
    assert out == "" or json.loads(out)["hookSpecificOutput"]


def _sh(command: str, cwd: Path, stdin: bytes = b"", path: str | None = None) -> subprocess.CompletedProcess[bytes]:
    """A printed command as a user pastes it: through the shell, with provgraph on the ``PATH``
    unless ``path`` says otherwise."""
    shell = {**environment(), "PATH": path if path is not None else f"{PROVGRAPH.parent}:{os.environ['PATH']}"}
    return subprocess.run(["/bin/sh", "-c", command], cwd=cwd, env=shell, input=stdin, capture_output=True, timeout=60)


def _commands(text: str) -> list[str]:
    return re.findall(r"`((?:\S*/)?provgraph [^`]*)`", text)


def _context(out: str) -> str:
    return json.loads(out)["hookSpecificOutput"]["additionalContext"] if out else ""


def test_every_printed_command_works_as_printed(tmp_path: Path) -> None:
    """The block's and the notes' commands, run from another folder, stamp and list as they say."""
    root = tmp_path / "my memory" / "it's"
    heading = ("--sources-heading",)
    write(root, "facts.md", "v1\n")
    write(root, "-draft.md", "# Draft\n\n## Sources\n\n- [facts](facts.md)\n")
    write(root, "digest.md", derived("-draft.md"))
    assert _hook(root, _event(root, "SessionStart"), *heading)[0] == 0  # adopts everything
    write(root, "facts.md", "v2\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    start = _context(_hook(root, _event(root, "SessionStart"), "--max-lines", "1", *heading)[1])
    notes = _context(_hook(root, _event(root, "Edit", "facts.md"), *heading)[1])
    _hook(root, _event(root, "Read", "facts.md"), *heading)
    rewrite = _context(_hook(root, _event(root, "Write", "-draft.md"), *heading)[1])
    settings = json.loads(_hook(root, b"", "--settings", *heading)[1])
    [installed] = {group[0]["hooks"][0]["command"] for group in settings["hooks"].values()}

    printed = _commands(start) + _commands(notes) + _commands(rewrite)
    stamp = "provgraph stamp --root " + shlex.quote(str(root)) + " '--sources-heading=## Sources'"
    assert f"{stamp} -- -draft.md" in printed and f"{stamp} FILE" in printed
    assert any(command.startswith("provgraph status ") for command in printed)
    for command in sorted(set(printed)):
        done = _sh(command.replace(" FILE", " -- -draft.md"), elsewhere)
        assert (done.returncode, done.stderr) == (0, b""), command
    status = provgraph("status", "--json", root, "--sources-heading")
    assert_clean(status, 0)
    assert json.loads(status.stdout)["stale"] == []  # -draft.md stamped, and digest.md rests on it

    session = _sh(installed, elsewhere, _event(root, "SessionStart"), path="/nonexistent")
    assert (session.returncode, session.stdout, session.stderr) == (0, b"", b"")  # nothing stale left, no PATH needed


def test_a_name_that_starts_with_a_dash_is_stamped_by_the_printed_command(root: Path) -> None:
    write(root, "facts.md", "v1\n")
    write(root, "-draft.md", derived("facts.md"))
    assert_clean(provgraph("status", root), 0)
    write(root, "facts.md", "v2\n")
    _hook(root, _event(root, "Read", "facts.md"))
    [command] = _commands(_context(_hook(root, _event(root, "Write", "-draft.md"))[1]))
    assert command == f"provgraph stamp --root {shlex.quote(str(root))} -- -draft.md"
    done = _sh(command, root.parent)
    assert (done.returncode, done.stderr) == (0, b"")
    assert done.stdout.startswith(b"stamped -draft.md: re-derived from 1 source as they are now")


def test_a_hook_whose_provgraph_is_not_on_path_prints_commands_that_run_without_it(tmp_path: Path) -> None:
    """Claude Code's ``PATH`` (and the agent's shell) seldom holds a virtual environment: the
    commands the hook prints then start with the program that runs it, and work as printed."""
    root = tmp_path / "memory"
    write(root, "facts.md", "v1\n")
    write(root, "digest.md", derived("facts.md"))
    without = {**environment(), "PATH": "/usr/bin:/bin"}

    def hook(event: bytes) -> str:
        done = subprocess.run(
            [os.fspath(PROVGRAPH), "hook", "claude-code", os.fspath(root)],
            input=event,
            env=without,
            capture_output=True,
            timeout=60,
        )
        assert (done.returncode, done.stderr) == (0, b"")
        return _context(done.stdout.decode())

    hook(_event(root, "SessionStart"))
    write(root, "facts.md", "v2\n")
    printed = _commands(hook(_event(root, "SessionStart"))) + _commands(hook(_event(root, "Edit", "facts.md")))
    assert printed and all(command.startswith(shlex.quote(os.fspath(PROVGRAPH)) + " ") for command in printed)
    for command in sorted(set(printed)):
        done = _sh(command.replace(" FILE", " digest.md"), tmp_path, path="/nonexistent")
        assert (done.returncode, done.stderr) == (0, b""), command
    assert_clean(provgraph("check", root), 0)
