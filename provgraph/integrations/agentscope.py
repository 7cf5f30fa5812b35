"""AgentScope: a middleware that appends the block after the memory middleware's ``MEMORY.md`` snapshot.

``AgenticMemoryMiddleware`` shows the agent its ``MEMORY.md`` index and lets
it read and write memory files through a backend (the local disk, a Docker
or E2B sandbox, ...).  ``ProvenanceMiddleware`` looks at the same folder
through the same backend, checks every memory file on each model call, and
adds the block when a derived file's sources changed.  It offers the agent a
tool to record a re-derivation and one to see what derives from a file, and
marks a retrieved memory file's hint when that file is stale.  It never
withholds or edits a memory file.

This is the only provgraph module that imports AgentScope.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import posixpath
import re
import sys
import threading
from collections.abc import AsyncGenerator, Callable, Coroutine, Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from agentscope.message import HintBlock
from agentscope.middleware import AgenticMemoryMiddleware, MiddlewareBase
from agentscope.permission import PermissionBehavior, PermissionDecision
from agentscope.tool import BackendBase, FunctionTool, LocalBackend, ToolBase

from ..api import Explanation, Memory, NotDerived
from ..files import NotRegular, OutsideRoot
from ..model import Edge, EdgeStatus, FileMeta, NodeStatus, Problem, ProblemKind, Report, StaleEntry
from ..queries import Relative
from ..render import causes_text, clip, day, prompt_block, safe_name, status_phrase

__all__ = [
    "LINEAGE_MAX_CHARS",
    "LINEAGE_TOOL",
    "LIST_TOOL",
    "RECORD_TOOL",
    "BackendError",
    "BackendFiles",
    "ProvenanceMiddleware",
    "default_state_path",
]

RECORD_TOOL = "record_memory_rederivation"
LIST_TOOL = "list_stale_derived_memories"
LINEAGE_TOOL = "memory_lineage"
LINEAGE_MAX_CHARS = 4000
"""Characters of one ``memory_lineage`` answer at most, whatever the names and the line cap."""

_ADVICE = (
    f"After you update one of them from its sources, or check that it still holds, "
    f"call `{RECORD_TOOL}` with its path as listed here. "
    f"Before or after editing a memory file, `{LINEAGE_TOOL}` shows what derives from it."
)
_MORE_HINT = f"call `{LIST_TOOL}` to list them all"
_NOTHING_STALE = "No derived memory file has changed sources."
_CONCURRENCY = 16
"""Backend calls in flight at once while listing a remote folder: one round trip
per file in sequence would make every model call wait seconds on a sandbox."""

_log = logging.getLogger(__name__)
_T = TypeVar("_T")


class ProvenanceMiddleware(MiddlewareBase):
    """Marks derived memory files whose sources changed, in the agent's system prompt.

    Place it after ``AgenticMemoryMiddleware`` in ``middlewares`` so that the
    block lands after the ``MEMORY.md`` snapshot and a retrieved stale file is
    marked in the very hint that shows it, and give the agent its tools (an
    ``Agent`` does not collect middleware tools by itself)::

        memory = AgenticMemoryMiddleware(workdir="/srv/agent")
        provenance = ProvenanceMiddleware.from_memory_middleware(memory)
        agent = Agent(..., middlewares=[memory, provenance],
                      toolkit=Toolkit(tools=[*file_tools, *await provenance.list_tools()]))

    The tools: ``record_memory_rederivation`` (the marker goes away),
    ``list_stale_derived_memories`` (the block without its line cap) and
    ``memory_lineage`` (what derives from a file, and which of those are
    stale).  The folder is checked once per model call; the tools check it
    again when called.

    Where state lives.  With the local backend (``backend=None`` or
    AgentScope's ``LocalBackend``) the memory folder is a folder on this
    machine, read directly, and the state is ``<memory folder>/.provgraph/``
    as for the command line, so ``provgraph status`` sees the same stamps.
    With any other backend the memory folder lives elsewhere (a sandbox) and
    provgraph never writes there: the state stays on this machine, by default
    in ``default_state_path(backend, memory folder)`` under the user's cache
    folder.  Pass ``state=`` for a durable place, or to keep apart two
    sandboxes whose memory folders have the same path and backend class
    (they would otherwise share stamps).  Losing the state only means that
    every derived file is adopted afresh.
    """

    def __init__(
        self,
        *,
        workdir: str,
        memory_dir: str = "Memory",
        backend: BackendBase | None = None,
        max_lines: int = 20,
        state: str | os.PathLike[str] | None = None,
    ) -> None:
        self.backend: BackendBase = backend if backend is not None else LocalBackend()
        self.max_lines = max_lines
        if _is_local(self.backend):
            self.memory_path = os.path.abspath(os.path.join(workdir, memory_dir))
            self.files: BackendFiles | None = None
            self.state_path = Path(state) if state is not None else None
        else:
            self.memory_path = self.backend.normpath(self.backend.join_path(workdir, memory_dir))
            self.files = BackendFiles(self.backend, self.memory_path)
            self.state_path = Path(state) if state is not None else default_state_path(self.backend, self.memory_path)
        self._memory: Memory | None = None
        self._guard = threading.Lock()
        self._tools = _tools(self)
        self._round_report: tuple[tuple[int, str, int], Report | None] | None = None
        """The last round checked, as (agent, reply, iteration), and its report (None when the check failed)."""
        self._examined_hints: tuple[str, set[str]] = ("", set())
        """The reply in progress and the ids of the hints already looked at in it."""

    @classmethod
    def from_memory_middleware(cls, middleware: AgenticMemoryMiddleware, **options: Any) -> ProvenanceMiddleware:
        """The middleware for the folder and backend an ``AgenticMemoryMiddleware`` uses.

        Reads the memory middleware's own attributes (it has no public
        getters), so both always look at the same files.
        """
        return cls(
            workdir=middleware._workdir,
            memory_dir=middleware._memory_dir,
            backend=middleware._backend,
            **options,
        )

    # -- hooks -----------------------------------------------------------------

    async def on_reasoning(
        self, agent: Any, input_kwargs: dict[str, Any], next_handler: Callable[..., AsyncGenerator]
    ) -> AsyncGenerator:
        """Mark the retrieved memory files that are stale, in the hint that shows them.

        ``AgenticMemoryMiddleware.on_reasoning`` (earlier in the list, so
        outside this one) has just put the files its selector retrieved into
        the agent's context as a hint; the model reads that hint in the call
        that follows, so the note goes into the hint itself.
        """
        report = await self._round_check(agent)
        if report is not None:
            self._annotate_hints(agent, report)
        async for item in next_handler(**input_kwargs):
            yield item

    async def on_system_prompt(self, agent: Any, current_prompt: str) -> str:
        """Append the block when a derived file is stale; otherwise return the prompt untouched."""
        report = await self._round_check(agent)
        if report is None:
            return current_prompt
        block = prompt_block(report, max_lines=self.max_lines, advice=_ADVICE, more_hint=_MORE_HINT)
        return f"{current_prompt}\n\n{block}" if block else current_prompt

    async def list_tools(self) -> list[ToolBase]:
        return list(self._tools)

    # -- the Python API behind the hooks and tools ----------------------------

    async def refresh(self) -> Report:
        """Scan every memory file (not only the newest the retrieval selector sees) and report."""
        return await self._in_worker(lambda memory: memory.refresh(now=_now()))

    async def record_memory_rederivation(self, path: str) -> str:
        """Record that a derived memory file was just re-derived from its current sources.

        Call it after you updated a file listed under "Derived memories with
        changed sources" from its sources, or checked that it still holds;
        its marker then goes away. The file itself is not changed.

        Args:
            path (`str`):
                The file's path inside the memory folder, as listed (e.g. `profile.md`).
        """
        relative = _relative_to(self.memory_path, path)
        if relative is None:
            folder = safe_name(self.memory_path)
            return f"Nothing recorded: {safe_name(path)} is not a path inside the memory folder {folder}."
        try:
            report = await self._in_worker(lambda memory: memory.stamp([relative], now=_now()))
        except NotDerived:
            return (
                f"Nothing recorded: {safe_name(relative)} is not a derived memory file "
                "(it does not exist, or its frontmatter has no derived_from)."
            )
        except Exception as error:  # a tool answers in words; it never raises into the agent loop
            return f"Could not record the re-derivation of {safe_name(relative)}: {_one_line(error)}"
        return _recorded(relative, report)

    async def memory_lineage(self, path: str) -> str:
        """Show what derives from a memory file and which of those are stale; call it before or after editing one.

        Answers with the file's own status (and its sources when it is
        derived from other memory files), then every file derived from it,
        directly or through others, with the chain and, for a stale one, the
        date its sources changed.  Nothing is changed.

        Args:
            path (`str`):
                The file's path inside the memory folder (e.g. `user-facts.md`), or its full path.
        """
        relative = _relative_to(self.memory_path, path)
        if relative is None:
            folder = safe_name(self.memory_path)
            return f"No lineage: {safe_name(path)} is not a path inside the memory folder {folder}."
        try:
            found = await self._in_worker(lambda memory: _look_up(memory, relative))
        except Exception as error:  # a tool answers in words; it never raises into the agent loop
            return f"Could not check the lineage of {safe_name(relative)}: {_one_line(error)}"
        return _lineage_text(found, max_lines=self.max_lines)

    async def list_stale_derived_memories(self) -> str:
        """List every derived memory file whose sources changed after it was derived, with the cause."""
        try:
            report = await self.refresh()
        except Exception as error:  # a tool answers in words; it never raises into the agent loop
            return f"Could not check the memory folder: {_one_line(error)}"
        return prompt_block(report, max_lines=len(report.stale), advice=_ADVICE) or _NOTHING_STALE

    async def _round_check(self, agent: Any) -> Report | None:
        """The report of the agent's reasoning round in progress: the folder is checked once per model call.

        An agent asks for its system prompt twice in a round (to count tokens
        before compressing its context, then for the model call) and the
        hint is marked in between; all three read one check.  The next round
        (after the tools ran) checks again.
        """
        round_key = _round_of(agent)
        if round_key is not None and self._round_report is not None and self._round_report[0] == round_key:
            return self._round_report[1]
        report = await self._checked()
        if round_key is not None:
            self._round_report = (round_key, report)
        return report

    async def _checked(self) -> Report | None:
        """``refresh``, or None (logged) when the folder could not be checked: the agent keeps working."""
        try:
            return await self.refresh()
        except Exception as error:
            _log.warning("provgraph could not check the memory folder %s: %s", self.memory_path, error)
            return None

    def _annotate_hints(self, agent: Any, report: Report) -> None:
        """Append a note to each retrieval hint of this reply that shows a stale file.

        Each hint is looked at once, when it first appears, so the note says
        what held when the model first read it.  Never raises: a hint shaped
        otherwise is left as it is.
        """
        try:
            for hint in self._new_hints(agent):
                notes = _hint_notes(hint.hint, report, self._hint_path)
                if notes:
                    hint.hint = f"{hint.hint}\n\n" + "\n".join(notes)
        except Exception as error:
            _log.warning("provgraph could not mark the retrieved memory files: %s", error)

    def _new_hints(self, agent: Any) -> list[HintBlock]:
        """Text hints in the agent's own message of the reply in progress, not looked at before.

        That message is where ``agent.state.append_context`` puts the memory
        middleware's hint.
        """
        state = agent.state
        reply_id = state.reply_id
        if self._examined_hints[0] != reply_id:
            self._examined_hints = (reply_id, set())
        examined = self._examined_hints[1]
        found = []
        for message in state.context:
            if message.id != reply_id or message.role != "assistant" or message.name != agent.name:
                continue
            for block in message.content:
                if isinstance(block, HintBlock) and isinstance(block.hint, str) and block.id not in examined:
                    examined.add(block.id)
                    found.append(block)
        return found

    def _hint_path(self, shown: str) -> str | None:
        """The memory-folder-relative path of a file as a retrieval hint shows it."""
        shown = os.path.abspath(shown) if self.files is None else self.backend.normpath(shown)
        return _relative_to(self.memory_path, shown)

    async def _in_worker(self, action: Callable[[Memory], _T]) -> _T:
        """Run a synchronous provgraph call in a thread, so the event loop stays free.

        A remote backend is async: the worker reaches it by scheduling its
        coroutines back on this loop.  One call at a time per middleware.
        """
        loop = asyncio.get_running_loop()
        return await asyncio.to_thread(self._locked, loop, action)

    def _locked(self, loop: asyncio.AbstractEventLoop, action: Callable[[Memory], _T]) -> _T:
        with self._guard:
            if self.files is not None:
                self.files.loop = loop
            try:
                return action(self._open())
            finally:
                if self.files is not None:
                    self.files.forget()

    def _open(self) -> Memory:
        if self._memory is None:
            self._memory = Memory(self.memory_path, state=self.state_path, files=self.files)
        return self._memory


def _round_of(agent: Any) -> tuple[int, str, int] | None:
    """Which reasoning round an agent is in: its reply and its iteration in that reply."""
    state = getattr(agent, "state", None)
    reply_id = getattr(state, "reply_id", None)
    iteration = getattr(state, "cur_iter", None)
    if not isinstance(reply_id, str) or not isinstance(iteration, int):
        return None
    return (id(agent), reply_id, iteration)


def _is_local(backend: BackendBase) -> bool:
    """Only AgentScope's own ``LocalBackend`` is read directly; a subclass may map paths elsewhere."""
    return type(backend) is LocalBackend


def _tools(middleware: ProvenanceMiddleware) -> tuple[ToolBase, ...]:
    allow = PermissionDecision(
        behavior=PermissionBehavior.ALLOW,
        message="provgraph only records stamps in its own state; memory files are not touched.",
    )
    return (
        FunctionTool(middleware.record_memory_rederivation, name=RECORD_TOOL, permission=allow),
        FunctionTool(middleware.list_stale_derived_memories, name=LIST_TOOL, is_read_only=True, permission=allow),
        FunctionTool(middleware.memory_lineage, name=LINEAGE_TOOL, is_read_only=True, permission=allow),
    )


_HINT_HEADER = re.compile(r"(?:\A|\n\n---\n\n)Memory(?: \(saved [^)\n]*\))?: (?P<path>[^\n]+):\n\n")
"""The line that opens each file in ``AgenticMemoryMiddleware``'s retrieval hint:
``Memory (saved 3 days ago): /abs/Memory/profile.md:``; files are separated by ``---``."""


def _hint_notes(hint: str, report: Report, relative: Callable[[str], str | None]) -> list[str]:
    """One note per stale file shown in a retrieval hint, in the order shown."""
    notes: list[str] = []
    for match in _HINT_HEADER.finditer(hint):
        path = relative(match["path"])
        entry = None if path is None else report.entry(path)
        if entry is not None:
            note = f"Note: {safe_name(entry.path)}: {_stale_phrase(entry)}: {causes_text(entry)}"
            notes.append(clip(note))
    return list(dict.fromkeys(notes))


def _stale_phrase(entry: StaleEntry) -> str:
    return f"source(s) changed since derived ({day(entry.since)})"


# -- the lineage tool's answer -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Lineage:
    """What ``memory_lineage`` knows about one file: read in the worker, rendered after."""

    explanation: Explanation
    descendants: tuple[Relative, ...]
    stale: dict[str, StaleEntry]
    exists: bool


def _look_up(memory: Memory, path: str) -> _Lineage:
    report = memory.refresh(now=_now())
    explanation = memory.explain(path, report)
    descendants = memory.derived_from(path, transitive=True, report=report)
    exists = explanation.status is not None or _exists(memory, path)
    return _Lineage(explanation, descendants, {entry.path: entry for entry in report.stale}, exists)


def _exists(memory: Memory, path: str) -> bool:
    try:
        return memory.files.stat(path) is not None
    except (NotRegular, OutsideRoot):
        return True


_CHAIN_SHOWN = 6
_MORE_RESERVE = 200
"""Characters kept free for the closing lines of a lineage answer."""


def _lineage_text(found: _Lineage, *, max_lines: int, max_chars: int = LINEAGE_MAX_CHARS) -> str:
    """The answer of ``memory_lineage``: a few lines the agent can act on, bounded in lines and characters."""
    explanation = found.explanation
    name = safe_name(explanation.path)
    if explanation.status is None:
        if not found.exists:
            return f"{name} does not exist in the memory folder, and no memory file names it as a source."
        return f"{name} takes no part in any derivation: it declares no sources and no memory file is derived from it."
    head = [clip(f"{name}: {_own_status(explanation)}")]
    if explanation.sources:
        head.append(clip("Sources: " + ", ".join(_source_text(explanation, edge) for edge in explanation.sources)))
    if explanation.in_cycles:
        cycle = explanation.in_cycles[0]
        head.append(clip("In a cycle (files derived from each other): " + _chain_text((*cycle, cycle[0]))))
    ordered = sorted(found.descendants, key=lambda relative: relative.status is not NodeStatus.STALE)
    stale_count = sum(relative.status is NodeStatus.STALE for relative in ordered)
    if ordered:
        files = "1 memory file is" if len(ordered) == 1 else f"{len(ordered)} memory files are"
        head.append(f"{files} derived from it, directly or through others; {stale_count} stale:")
    else:
        head.append("No memory file is derived from it.")
    tail = [_RECORD_ADVICE] if stale_count or explanation.stale else []
    budget = max_chars - sum(len(line) + 1 for line in head + tail) - _MORE_RESERVE
    shown = _fit([_descendant_text(relative, found.stale) for relative in ordered], max_lines, budget)
    more = _more_text(ordered[len(shown) :])
    return "\n".join(head + shown + more + tail)


_RECORD_ADVICE = (
    f"After you update a stale file from its sources, or check that it still holds, call `{RECORD_TOOL}` with its path."
)


def _own_status(explanation: Explanation) -> str:
    if explanation.stale is not None:
        return f"stale: {_stale_phrase(explanation.stale)}: {causes_text(explanation.stale)}"
    return status_phrase(explanation.status)


def _source_text(explanation: Explanation, edge: Edge) -> str:
    if edge.status is EdgeStatus.CLEAN:
        state = "unchanged, itself stale" if edge.source in explanation.stale_sources else "unchanged"
    else:
        state = f"{edge.status.value} since {day(edge.since or 0.0)}"
    return f"{safe_name(edge.source)} ({state})"


def _descendant_text(relative: Relative, stale: dict[str, StaleEntry]) -> str:
    entry = stale.get(relative.path)
    status = f"stale, {_stale_phrase(entry)}" if entry is not None else relative.status.value
    return clip(f"- {safe_name(relative.path)}: {status}; chain: {_chain_text(relative.chain)}")


def _chain_text(chain: tuple[str, ...]) -> str:
    names = [safe_name(name) for name in chain]
    if len(names) > _CHAIN_SHOWN:
        names = names[: _CHAIN_SHOWN - 2] + ["…"] + names[-1:]
    return " -> ".join(names)


def _fit(lines: list[str], max_lines: int, budget: int) -> list[str]:
    """The first lines that fit both caps."""
    shown: list[str] = []
    for line in lines[: max(0, max_lines)]:
        budget -= len(line) + 1
        if budget < 0:
            break
        shown.append(line)
    return shown


def _more_text(hidden: list[Relative]) -> list[str]:
    if not hidden:
        return []
    stale = sum(relative.status is NodeStatus.STALE for relative in hidden)
    if not stale:
        return [f"- … and {len(hidden)} more derived files, all fresh."]
    return [f"- … and {len(hidden)} more derived files ({stale} stale); call `{LIST_TOOL}` to list every stale file."]


def _recorded(path: str, report: Report) -> str:
    count = sum(1 for edge in report.edges if edge.derived == path)
    sources = "its source as it is" if count == 1 else f"its {count} sources as they are"
    entry = report.entry(path)
    if entry is None:
        return f"Recorded: {safe_name(path)} is now derived from {sources} now."
    return (
        f"Recorded for {safe_name(path)}, but it stays marked because a file it is derived "
        f"from is itself stale ({causes_text(entry)}); re-derive that file first and record it too."
    )


def _one_line(error: Exception) -> str:
    """An error message as one safe line: a tool answer stays short and cannot inject anything."""
    return safe_name(" ".join(str(error).split())) or type(error).__name__


def _relative_to(memory_path: str, path: str) -> str | None:
    """The memory-folder-relative POSIX path the agent meant, or None when it points elsewhere.

    Accepts the path as the block lists it, or the full path that retrieval
    hints show.
    """
    text = path.strip().replace("\\", "/")
    folder = memory_path.replace("\\", "/").rstrip("/") + "/"
    if text.startswith(folder):
        text = text[len(folder) :]
    elif posixpath.isabs(text):
        return None
    relative = posixpath.normpath(text)
    if relative in (".", "..") or relative.startswith("../"):
        return None
    return relative


def _now() -> datetime | None:
    """``PROVGRAPH_NOW`` (ISO 8601) when set, as every entry point reads it."""
    value = os.environ.get("PROVGRAPH_NOW")
    if not value:
        return None
    parsed = datetime.fromisoformat(value)
    return parsed if parsed.tzinfo is not None else parsed.astimezone()


def default_state_path(backend: BackendBase, memory_path: str) -> Path:
    """Where the state of a remote memory folder is kept when no ``state=`` is given.

    A folder under the user's cache folder named by a hash of the backend
    class and the memory folder's path in the backend; it holds the lock and
    the cache, like ``--state``.
    """
    key = f"{type(backend).__module__}.{type(backend).__qualname__}\0{memory_path}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:24]
    return _cache_home() / "provgraph" / "agentscope" / digest


def _cache_home() -> Path:
    if sys.platform == "win32":
        return Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches"
    configured = os.environ.get("XDG_CACHE_HOME", "")
    return Path(configured) if os.path.isabs(configured) else Path.home() / ".cache"


class BackendError(Exception):
    """The backend failed in a way that says nothing about one file (a lost connection, a timeout)."""


class BackendFiles:
    """A memory folder seen through an AgentScope backend (a sandbox, a custom store).

    The provgraph scan is synchronous and runs in a worker thread; every
    backend coroutine is scheduled on the event loop the agent runs on
    (``loop``) and waited for.  A backend only reports an mtime, which proves
    nothing about content, so every file is read on every scan
    (``trusts_stat`` is False); ``walk`` reads them all concurrently and keeps
    their bytes until ``forget``.

    A missing file, a folder or a refused permission concerns one file and
    becomes a problem, as on a local disk.  Any other failure (a lost
    connection, a timeout) raises ``BackendError`` and abandons the whole
    scan: were it a per-file problem, the files it hit would look as if they
    declared nothing, and their stamps would be dropped.
    """

    trusts_stat = False

    def __init__(self, backend: BackendBase, folder: str, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.backend = backend
        self.folder = folder
        self.loop = loop
        self._prefix = backend.join_path(backend.normpath(folder), "")
        self._content: dict[str, bytes] = {}

    def walk(self) -> tuple[dict[str, FileMeta], list[Problem]]:
        self.forget()
        entries = self._run(self.backend.list_dir(self.folder, recursive=True))
        paths = sorted({path for path in map(self._relative, entries) if path is not None})
        if not paths and not self._run(self.backend.is_dir(self.folder)):
            raise FileNotFoundError(f"memory folder {self.folder} does not exist in the backend")
        fetched = self._run(self._fetch_all(paths))
        found: dict[str, FileMeta] = {}
        problems: list[Problem] = []
        for path, outcome in zip(paths, fetched, strict=True):
            if isinstance(outcome, NotRegular):
                continue
            if isinstance(outcome, PermissionError):
                problems.append(Problem(path, ProblemKind.UNREADABLE, outcome.strerror or "permission denied"))
            elif isinstance(outcome, BaseException):
                raise outcome
            elif outcome is None:
                problems.append(Problem(path, ProblemKind.UNREADABLE, "vanished during the scan"))
            else:
                found[path] = outcome
        return found, problems

    def stat(self, path: str) -> FileMeta | None:
        return self._run(self._fetch(path))

    def read(self, path: str, limit: int | None = None) -> bytes:
        content = self._content.get(path)
        if content is None:
            if self._run(self._fetch(path)) is None:
                raise FileNotFoundError(f"{path} does not exist in the backend")
            content = self._content[path]
        return content if limit is None else content[:limit]

    def forget(self) -> None:
        """Drop the bytes kept since the last ``walk``."""
        self._content.clear()

    def _relative(self, entry: str) -> str | None:
        """A listed entry as a root-relative POSIX path, or None when it is not a visible ``*.md`` file.

        Backends list absolute paths, paths that start with the folder as it
        was given, or paths relative to it; all three are accepted.
        """
        path = self.backend.normpath(entry)
        if path.startswith(self._prefix):
            path = path[len(self._prefix) :]
        elif self.backend.isabs(path):
            return None
        if self.backend.os_name == "nt":
            path = path.replace("\\", "/")
        parts = path.split("/")
        if not path.endswith(".md") or any(not part or part.startswith(".") for part in parts):
            return None
        return path

    def _full(self, path: str) -> str:
        return self.backend.join_path(self.folder, *path.split("/"))

    async def _fetch_all(self, paths: Iterable[str]) -> list[FileMeta | BaseException | None]:
        limit = asyncio.Semaphore(_CONCURRENCY)

        async def bounded(path: str) -> FileMeta | None:
            async with limit:
                return await self._fetch(path)

        return await asyncio.gather(*(bounded(path) for path in paths), return_exceptions=True)

    async def _fetch(self, path: str) -> FileMeta | None:
        """Read one file and its mtime; None when it does not exist."""
        full = self._full(path)
        try:
            content = await self.backend.read_file(full)
            mtime = await self.backend.stat_mtime(full)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except IsADirectoryError:
            raise NotRegular(path) from None
        except PermissionError:
            raise
        except OSError as error:
            raise BackendError(f"reading {full}: {error}") from error
        self._content[path] = content
        mtime_ns = 0 if mtime is None else int(mtime * 1_000_000_000)
        return FileMeta(len(content), mtime_ns, 0, 0)

    def _run(self, coroutine: Coroutine[Any, Any, _T]) -> _T:
        loop = self.loop
        if loop is None or _running_loop() is loop:
            coroutine.close()
            raise RuntimeError("BackendFiles must be used from a worker thread with the agent's event loop set")
        return asyncio.run_coroutine_threadsafe(coroutine, loop).result()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
