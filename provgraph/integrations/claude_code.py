"""Claude Code: hooks that bring the lineage into a session, at its start and at each memory write.

``provgraph hook claude-code ROOT`` reads the hook event Claude Code sends on standard input
(https://code.claude.com/docs/en/hooks) and answers:

- ``SessionStart`` (or no input at all): the block, when something is stale;
- ``PostToolUse`` of ``Write``, ``Edit`` or ``MultiEdit`` on a file under the root: the notes
  of ``provgraph.queries.edit_notes`` (their scan also adopts a declaration the write added);
- ``PostToolUse`` of ``Read`` on a memory file: the read is remembered for the session, so
  that a later ``Write`` can be told which sources to declare: the memory files read since
  the session's previous write (an event has no turn id, so that write is where a turn starts).

Anything else gets no output.  A hook must never break the user's session: every event
exits 0, with at most one line on stderr.
"""

from __future__ import annotations

import errno
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from ..errors import ProvgraphError
from ..model import Report
from ..paths import hook_command, index_command, list_hint, parts_under, shell_advice, stamp_command
from ..queries import EditContext, edit_notes
from ..render import prompt_block
from ..store.folder import (
    Folders,
    LockBusy,
    hold,
    in_memory_tree,
    open_folder,
    read_file,
    remove_temporaries,
    write_file,
)
from ..store.state import STATE_DIR

__all__ = [
    "CONTEXT_LIMIT",
    "BadEvent",
    "HookEvent",
    "SessionReads",
    "installed_program",
    "parse_event",
    "post_tool_use_output",
    "session_start_output",
    "settings_json",
]

CONTEXT_LIMIT = 9_500
"""Characters of ``additionalContext`` at most: Claude Code moves a text longer
than 10,000 characters to a file and shows the model only a preview."""
WRITE_TOOLS = frozenset({"Write", "Edit", "MultiEdit"})
WHOLE_WRITE = "Write"
"""The tool that writes a whole file: a new one, or all of an existing one again."""
READ_TOOL = "Read"
SESSION_MATCHER = "startup|resume|clear|compact"
TOOL_MATCHER = "Read|Write|Edit|MultiEdit"


class BadEvent(ProvgraphError, ValueError):
    """The hook's standard input is not a Claude Code hook event."""


@dataclass(frozen=True, slots=True)
class HookEvent:
    """The fields of a hook event that provgraph reads."""

    name: str
    """``hook_event_name``: ``SessionStart``, ``PostToolUse``, ..."""
    session: str
    """``session_id``: reads are remembered per session."""
    tool: str | None = None
    """``tool_name`` for tool events."""
    file_path: str | None = None
    """``tool_input.file_path``, made absolute against the event's ``cwd``."""


def parse_event(data: bytes) -> HookEvent:
    """The event Claude Code sent, or ``BadEvent`` saying in one line what is wrong."""
    try:
        document = orjson.loads(data)
    except orjson.JSONDecodeError as error:
        raise BadEvent(f"the hook input is not JSON ({error})") from None
    if not isinstance(document, dict) or not isinstance(document.get("hook_event_name"), str):
        raise BadEvent("the hook input is not a Claude Code hook event (no hook_event_name)")
    tool_input = document.get("tool_input")
    file_path = tool_input.get("file_path") if isinstance(tool_input, dict) else None
    cwd = document.get("cwd")
    for field, value in (("cwd", cwd), ("file_path", file_path)):
        if isinstance(value, str) and "\0" in value:
            raise BadEvent(f"the hook event's {field} holds a NUL byte, which no path can hold")
    if isinstance(file_path, str) and file_path:
        file_path = os.path.join(cwd if isinstance(cwd, str) else os.getcwd(), os.path.expanduser(file_path))
    else:
        file_path = None
    tool = document.get("tool_name")
    session = document.get("session_id")
    return HookEvent(
        name=document["hook_event_name"],
        session=session if isinstance(session, str) else "",
        tool=tool if isinstance(tool, str) else None,
        file_path=file_path,
    )


def memory_path(root: Path, file_path: str) -> str | None:
    """The root-relative POSIX path of a file under the root, or None (outside, or in a hidden folder)."""
    parts = parts_under(root, file_path)
    if parts is None or any(part.startswith(".") for part in parts):
        return None
    return "/".join(parts)


def session_start_output(
    report: Report, *, max_lines: int = 20, options: tuple[str, ...] = (), program: tuple[str, ...] = ("provgraph",)
) -> str:
    """The hook's stdout: ``hookSpecificOutput.additionalContext``, or "" when nothing is stale.
    The printed commands repeat the hook's ``options``, to read the folder as the hook does."""
    hint = list_hint(report.root, options, program)
    advice = f"After re-deriving one, record it with `{stamp_command(report.root, options=options, program=program)}`."
    index = f"run `{index_command(report.root, options, program)}` to print it as it should be, then write it"
    block = prompt_block(report, max_lines=max_lines, advice=advice, more_hint=hint, index_hint=index)
    while len(block) > CONTEXT_LIMIT and max_lines > 0:
        max_lines = max_lines // 2
        block = prompt_block(report, max_lines=max_lines, advice=advice, more_hint=hint, index_hint=index)
    return _output("SessionStart", block)


def post_tool_use_output(
    report: Report, edit: EditContext, options: tuple[str, ...] = (), program: tuple[str, ...] = ("provgraph",)
) -> str:
    """The hook's stdout after the write ``edit``: the notes, or "" when nothing applies."""
    return _output("PostToolUse", edit_notes(report, edit, shell_advice(report.root, options, program)))


def _output(event: str, context: str) -> str:
    if not context:
        return ""
    payload = {"hookSpecificOutput": {"hookEventName": event, "additionalContext": context[:CONTEXT_LIMIT]}}
    return orjson.dumps(payload).decode() + "\n"


def settings_json(root: str, options: tuple[str, ...] = (), program: tuple[str, ...] = ("provgraph",)) -> str:
    """The ``hooks`` settings that install every provgraph hook for the memory folder ``root``:
    they run ``program`` (``installed_program()``) with ``options``."""
    command = {"type": "command", "command": hook_command(root, options, program)}
    settings = {
        "hooks": {
            "SessionStart": [{"matcher": SESSION_MATCHER, "hooks": [command]}],
            "PostToolUse": [{"matcher": TOOL_MATCHER, "hooks": [command]}],
        }
    }
    return orjson.dumps(settings, option=orjson.OPT_INDENT_2).decode() + "\n"


def installed_program() -> tuple[str, ...]:
    """The words that run this provgraph from anywhere (Claude Code's ``PATH`` seldom holds its
    virtual environment): the console script's absolute path when the command was started
    through it, else ``python -m provgraph`` with this interpreter."""
    started = sys.argv[0] if os.sep in sys.argv[0] else shutil.which(sys.argv[0]) or sys.argv[0]
    script = os.path.abspath(started)
    installed = os.path.basename(script) in ("provgraph", "provgraph.exe") and os.path.isfile(script)
    return (script,) if installed and os.access(script, os.X_OK) else (sys.executable, "-m", "provgraph")


def printed_program() -> tuple[str, ...]:
    """The words the hook's printed commands start with: ``provgraph`` when that name on ``PATH``
    is this very program, else the words that run it from anywhere (``installed_program``),
    since the agent's shell may not have its virtual environment on ``PATH``."""
    program = installed_program()
    found = shutil.which("provgraph")
    if len(program) == 1 and found is not None and os.path.realpath(found) == os.path.realpath(program[0]):
        return ("provgraph",)
    return program


READS_NAME = "claude-code-reads.json"
READS_TEMPORARY = ".reads-unfinished"
"""The suffix of the reads file's temporaries: not the store's, whose cleanup runs under
the store's lock and must never remove a write in progress under the reads lock."""
READ, WRITE = "read", "write"
"""What a session did to a file, as its log records it."""
RECORD_WAIT = 1.0
"""Seconds a hook waits for the reads lock before it lets the read go unrecorded."""


class SessionReads:
    """The memory files each recent session read and wrote, in order, in one small file beside
    provgraph's state (each hook is a process of its own).  Only the ``max_sessions`` most
    recent sessions touched within ``max_age`` seconds are kept, each with its ``max_reads``
    latest events.  It is rewritten whole under a lock, by the rules of the store's files; the
    lock is waited for ``wait`` seconds at most, since a hook must never hang."""

    def __init__(
        self,
        path: Path,
        *,
        max_sessions: int = 20,
        max_reads: int = 200,
        max_age: float = 7 * 86_400,
        wait: float = RECORD_WAIT,
        clock: Callable[[], float] = time.time,
        root: Path | None = None,
    ) -> None:
        self.path = path
        self.root = root
        """The memory folder, when known: the reads are never written in its tree outside ``.provgraph/``."""
        self.max_sessions = max_sessions
        self.max_reads = max_reads
        self.max_age = max_age
        self.wait = wait
        self._clock = clock

    @classmethod
    def beside(cls, state_folder: Path, **options: Any) -> SessionReads:
        """The reads file in provgraph's state folder (``ROOT/.provgraph`` or ``--state DIR``)."""
        return cls(state_folder / READS_NAME, **options)

    def reads(self, session: str) -> frozenset[str]:
        """The files ``session`` read since its last write; none when the file is missing,
        unreadable or not a regular file."""
        log = self._log(session)
        start = max((index + 1 for index, (access, _) in enumerate(log) if access == WRITE), default=0)
        return frozenset(path for access, path in log[start:] if access == READ)

    def seen(self, session: str) -> frozenset[str]:
        """The files ``session`` read or wrote: the agent knows what they hold."""
        return frozenset(path for _, path in self._log(session))

    def _log(self, session: str) -> list[list[str]]:
        try:
            folder = open_folder(self.path.parent.parent, self.path.parent.name, create=False)
        except OSError:
            return []
        if folder is None:
            return []
        try:
            return list(self._load(folder).get(session, {}).get("log", []))
        except OSError:
            return []
        finally:
            os.close(folder)

    def record(self, session: str, path: str, *, write: bool = False) -> None:
        """Log the read (or ``write``) of ``path`` by ``session``; nothing when the lock stays held
        past ``wait``.  ``OSError`` for a symlink or irregular file in the way, or a folder in the
        memory tree outside ``.provgraph/``."""
        if self.root is not None and in_memory_tree(self.path.parent, self.root, STATE_DIR):
            raise OSError(errno.EINVAL, f"lies in the memory folder, outside {STATE_DIR}/", str(self.path.parent))
        folder = open_folder(self.path.parent.parent, self.path.parent.name, create=True)
        assert folder is not None
        folders = Folders(folder, folder, self.path.parent, self.path.parent)
        try:
            try:
                held = hold(folder, self.path.name + ".lock", self.wait)
            except LockBusy:
                return
            except OSError as error:
                raise OSError(error.errno, error.strerror, str(self.path.parent / error.filename)) from None
            try:
                remove_temporaries(folders, READS_TEMPORARY)
                self._save(folders, self._with(self._load(folder), session, path, write))
            finally:
                os.close(held)
        finally:
            folders.close()

    def _with(
        self, sessions: dict[str, dict[str, Any]], session: str, path: str, write: bool
    ) -> dict[str, dict[str, Any]]:
        now, event = self._clock(), [WRITE if write else READ, path]
        log = [*(seen for seen in sessions.get(session, {}).get("log", []) if seen != event), event]
        sessions[session] = {"touched": now, "log": log[-self.max_reads :]}
        recent = sorted(sessions.items(), key=lambda item: item[1]["touched"], reverse=True)
        return {key: value for key, value in recent[: self.max_sessions] if now - value["touched"] <= self.max_age}

    def _load(self, folder: int) -> dict[str, dict[str, Any]]:
        """Sessions by id; a missing or undecodable file holds none (the reads only feed
        suggestions).  A symlink or a file that is not regular is an ``OSError``."""
        try:
            document = orjson.loads(read_file(folder, self.path.name, self.path.parent) or b"{}")
        except orjson.JSONDecodeError:
            return {}
        sessions = document.get("sessions") if isinstance(document, dict) else None
        if not isinstance(sessions, dict):
            return {}
        return {key: value for key, value in sessions.items() if _is_session(value)}

    def _save(self, folders: Folders, sessions: dict[str, dict[str, Any]]) -> None:
        """Replaced atomically but not synced: a crash may lose the last reads, which only feed
        suggestions, and a sync on every Read of a session is what the hook would wait on most."""
        payload = orjson.dumps({"version": 2, "sessions": sessions})
        write_file(folders, folders.state, self.path.name, [payload], suffix=READS_TEMPORARY, durable=False)


def _is_session(value: object) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("touched"), (int, float))
        and isinstance(value.get("log"), list)
        and all(_is_event(event) for event in value["log"])
    )


def _is_event(event: object) -> bool:
    return isinstance(event, list) and len(event) == 2 and event[0] in (READ, WRITE) and isinstance(event[1], str)
