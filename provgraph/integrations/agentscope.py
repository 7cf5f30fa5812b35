"""AgentScope: a middleware that appends the block after the memory middleware's ``MEMORY.md`` snapshot.

``AgenticMemoryMiddleware`` shows the agent its ``MEMORY.md`` index and lets
it read and write memory files through a backend (the local disk, a Docker
or E2B sandbox, ...).  ``ProvenanceMiddleware`` looks at the same folder
through the same backend, checks every memory file on each model call, and
adds the block when a derived file's sources changed.  It offers the agent a
tool to record a re-derivation and one to see what derives from a file,
marks a retrieved memory file's hint when that file is stale, and ends the
result of a memory write with what the write left resting on old content
(``provgraph.queries.edit_notes``).  It never withholds or edits a memory file.

This module holds the hooks: the prompt block, the notes in retrieval hints
and after memory writes.  The tools and their answers live in
``agentscope_tools``, backend access in ``agentscope_backend``; these three
are the only provgraph modules that import AgentScope.
"""

from __future__ import annotations

import asyncio
import enum
import hashlib
import json
import logging
import os
import re
import sys
import threading
import weakref
from collections.abc import AsyncGenerator, Callable
from pathlib import Path
from typing import Any, TypeVar

from agentscope.message import HintBlock, TextBlock, ToolResultState
from agentscope.middleware import AgenticMemoryMiddleware, MiddlewareBase
from agentscope.tool import BackendBase, LocalBackend, ToolBase, ToolResponse

from ..api import Memory
from ..clock import pinned_now as _now
from ..files import NotRegular, OutsideRoot
from ..model import Report, StaleEntry
from ..queries import Advice, EditContext, edit_notes
from ..render import LINEAGE_MAX_CHARS, LIST_TOOL, RECORD_TOOL, causes_text, clip, prompt_block, safe_name
from ..render import stale_phrase as _stale_phrase
from ..watch import WatchedRefresh
from .agentscope_backend import DEFAULT_BACKEND_TIMEOUT, BackendError, BackendFiles
from .agentscope_lock import LockMirror
from .agentscope_tools import ADVICE as _ADVICE
from .agentscope_tools import LINEAGE_TOOL, ProvenanceTools
from .agentscope_tools import MORE_HINT as _MORE_HINT
from .agentscope_tools import relative_to as _relative_to
from .agentscope_tools import tools_of as _tools

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

_EXAMINED_KEPT = 10_000
"""Hint ids remembered at most: far more than the hints of the replies in progress at once."""

_log = logging.getLogger(__name__)
_T = TypeVar("_T")


class ProvenanceMiddleware(MiddlewareBase, ProvenanceTools):
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
    With any other backend the memory folder lives elsewhere (a sandbox): the
    lock is still ``<memory folder>/provgraph.lock`` there, written through
    the backend (see ``agentscope_lock``), and only the cache and a mirror of
    the lock stay on this machine, by default in
    ``default_state_path(backend, memory folder)`` under the user's cache
    folder, or in ``state=``.  Losing the cache only costs a full read.
    """

    def __init__(
        self,
        *,
        workdir: str,
        memory_dir: str = "Memory",
        backend: BackendBase | None = None,
        max_lines: int = 20,
        state: str | os.PathLike[str] | None = None,
        sources_heading: str | None = None,
        backend_timeout: float = DEFAULT_BACKEND_TIMEOUT,
    ) -> None:
        self.backend: BackendBase = backend if backend is not None else LocalBackend()
        self.max_lines = max_lines
        self.sources_heading = sources_heading
        if _is_local(self.backend):
            self.memory_path = os.path.abspath(os.path.join(workdir, memory_dir))
            self.files: BackendFiles | None = None
            self.state_path = Path(state) if state is not None else None
            self.lock_mirror: LockMirror | None = None
        else:
            self.memory_path = self.backend.normpath(self.backend.join_path(workdir, memory_dir))
            self.files = BackendFiles(self.backend, self.memory_path, timeout=backend_timeout)
            self.state_path = Path(state) if state is not None else default_state_path(self.backend, self.memory_path)
            # The lineage lock lives in the workspace; the state folder keeps a mirror of it (agentscope_lock).
            self.lock_mirror = LockMirror(self.files, self.state_path)
        self._memory: Memory | None = None
        self._watched: WatchedRefresh | None = None
        """The local folder's refresh, answered from the operating system's events when nothing changed."""
        self._guard = threading.Lock()
        self._tools = _tools(self)
        self._round_report: tuple[tuple[int, str, int], Report | None] | None = None
        """The last round checked, as (agent, reply, iteration), and its report (None when the check failed)."""
        self._last_block: tuple[tuple[StaleEntry, ...] | None, int, str] = (None, 0, "")
        """The stale entries and line cap of the last block made, and that block."""
        self._examined_hints: dict[str, None] = {}
        """The ids of the hints already looked at, oldest first, whatever agent and reply
        they belong to: agents sharing this middleware interleave their replies."""
        self._reads: tuple[tuple[int, str], set[str]] = ((0, ""), set())
        """The reply in progress, as (agent, reply), and the memory files the model saw in it."""

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
        self, agent: Any, input_kwargs: dict[str, Any], next_handler: Callable[..., AsyncGenerator[Any, None]]
    ) -> AsyncGenerator[Any, None]:
        """Mark the retrieved memory files that are stale, in the hint that shows them.

        ``AgenticMemoryMiddleware.on_reasoning`` (earlier in the list, so
        outside this one) has just put the files its selector retrieved into
        the agent's context as a hint; the model reads that hint in the call
        that follows, so the note goes into the hint itself.  ``ReMeMiddleware``
        (earlier in the list too) shows its retrieved memories in a message of
        its own; a stale file among them gets the same note there.
        """
        report = await self._round_check(agent)
        if report is not None:
            self._annotate_hints(agent, report)
            await self._annotate_reme(agent, report)
        async for item in next_handler(**input_kwargs):
            yield item

    async def on_system_prompt(self, agent: Any, current_prompt: str) -> str:
        """Append the block when a derived file is stale; otherwise return the prompt untouched."""
        report = await self._round_check(agent)
        if report is None:
            return current_prompt
        block = self._block(report)
        return f"{current_prompt}\n\n{block}" if block else current_prompt

    def _block(self, report: Report) -> str:
        """The block of ``report``, made once for the same stale entries: an unchanged folder
        answered from the watch gives back the very same entries, call after call."""
        stale, max_lines, block = self._last_block
        if stale is not report.stale or max_lines != self.max_lines:
            block = prompt_block(report, max_lines=self.max_lines, advice=_ADVICE, more_hint=_MORE_HINT)
            self._last_block = (report.stale, self.max_lines, block)
        return block

    async def on_acting(
        self, agent: Any, input_kwargs: dict[str, Any], next_handler: Callable[..., AsyncGenerator[Any, None]]
    ) -> AsyncGenerator[Any, None]:
        """Remember the memory files the model reads; end a memory write's result with its lineage notes.

        The notes (see ``provgraph.queries.edit_notes``) reach the model with the result
        of the very write that called for them.  The folder is checked right
        after each write of a memory file, before the next tool runs (the
        file tools run one at a time), so a new ``derived_from`` is adopted
        with its sources as they are at that moment.  A result is passed on
        untouched when nothing applies, and always when the check fails.
        """
        touched = self._touched(input_kwargs.get("tool_call"))
        async for item in next_handler(**input_kwargs):
            if touched is not None and isinstance(item, ToolResponse) and item.state == ToolResultState.SUCCESS:
                await self._after_file_tool(agent, *touched, item)
            yield item

    async def list_tools(self) -> list[ToolBase]:
        return list(self._tools)

    # -- the Python API behind the hooks and tools ----------------------------

    async def refresh(self) -> Report:
        """Scan every memory file (not only the newest the retrieval selector sees) and report."""
        return await self._in_worker(lambda memory: memory.refresh(now=_now()))

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
        """``refresh``, or None (logged) when the folder could not be checked: the agent keeps working.

        A local folder is checked right here, without yielding to the event
        loop: the memory middleware's retrieval runs beside the agent, and a
        yield would let it finish earlier than it would without this
        middleware, moving its hint to another step.  A remote one has to be
        awaited.
        """
        try:
            if self.files is None:
                return self._locked(None, self._local_refresh)
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
                if not isinstance(hint.hint, str):  # never: only text hints are new; this tells the type checker
                    continue
                self._reads_of(agent).update(_hint_paths(hint.hint, self._hint_path))
                notes = _hint_notes(hint.hint, report, self._hint_path)
                if notes:
                    hint.hint = f"{hint.hint}\n\n" + "\n".join(notes)
        except Exception as error:
            _log.warning("provgraph could not mark the retrieved memory files: %s", error)

    async def _annotate_reme(self, agent: Any, report: Report) -> None:
        """Append a note to each new ReMe memory message that quotes a stale file.

        ReMe shows the text of the memory chunks it retrieved, not their
        files: a chunk belongs to a stale file when that file holds it.  The
        stale files are read only when such a message appeared, so that the
        agent's steps are not delayed otherwise.
        """
        try:
            hints = self._new_reme_hints(agent)
            if not hints or not report.stale:
                return
            stale = [entry.path for entry in report.stale]
            if self.files is None:
                contents = self._locked(None, lambda memory: _texts(memory, stale))
            else:
                contents = await self._in_worker(lambda memory: _texts(memory, stale))
            for hint in hints:
                if not isinstance(hint.hint, str):  # never: only text hints are new; this tells the type checker
                    continue
                notes = _reme_notes(hint.hint, report, contents)
                if notes:
                    hint.hint = f"{hint.hint}\n\n" + "\n".join(notes)
        except Exception as error:
            _log.warning("provgraph could not mark the memories ReMe retrieved: %s", error)

    def _new_reme_hints(self, agent: Any) -> list[HintBlock]:
        """ReMe's memory messages in the agent's context, not looked at before."""
        found = []
        for message in agent.state.context:
            if message.name != _REME_MESSAGE or message.role != "assistant":
                continue
            for block in message.content:
                if (
                    isinstance(block, HintBlock)
                    and isinstance(block.hint, str)
                    and block.hint.startswith(_REME_HEADER)
                    and block.id not in self._examined_hints
                ):
                    self._examined_hints[block.id] = None
                    found.append(block)
        return found

    def _new_hints(self, agent: Any) -> list[HintBlock]:
        """Text hints in the agent's own message of the reply in progress, not looked at before.

        That message is where ``agent.state.append_context`` puts the memory
        middleware's hint.
        """
        state = agent.state
        reply_id = state.reply_id
        examined = self._examined_hints
        found = []
        for message in state.context:
            if message.id != reply_id or message.role != "assistant" or message.name != agent.name:
                continue
            for block in message.content:
                if isinstance(block, HintBlock) and isinstance(block.hint, str) and block.id not in examined:
                    examined[block.id] = None
                    found.append(block)
        for oldest in list(examined)[: max(0, len(examined) - _EXAMINED_KEPT)]:
            del examined[oldest]
        return found

    def _touched(self, call: Any) -> tuple[_Access, str] | None:
        """(read or write, memory path) for a file tool call on a file of the memory folder, else None."""
        name = getattr(call, "name", None)
        if name not in _FILE_TOOLS:
            return None
        arguments = getattr(call, "input", None)
        try:
            arguments = json.loads(arguments) if isinstance(arguments, str) else arguments
        except ValueError:
            return None
        file_path = arguments.get("file_path") if isinstance(arguments, dict) else None
        path = self._hint_path(file_path) if isinstance(file_path, str) else None
        if path is None or any(part.startswith(".") for part in path.split("/")):
            return None
        return (_Access.READ if name == "Read" else _Access.WRITE, path)

    async def _after_file_tool(self, agent: Any, access: _Access, path: str, response: ToolResponse) -> None:
        reads = self._reads_of(agent)
        if access is _Access.READ:
            if path.endswith(".md"):
                reads.add(path)
            return
        report = await self._checked()
        if report is None:
            return
        notes = edit_notes(report, EditContext(path, frozenset(reads)), _EDIT_ADVICE, max_lines=self.max_lines)
        if notes:
            response.content.append(TextBlock(text=notes))

    def _reads_of(self, agent: Any) -> set[str]:
        """The memory files read in the agent's reply in progress (a new reply starts with none)."""
        key = (id(agent), str(getattr(getattr(agent, "state", None), "reply_id", "")))
        if self._reads[0] != key:
            self._reads = (key, set())
        return self._reads[1]

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

    def _locked(self, loop: asyncio.AbstractEventLoop | None, action: Callable[[Memory], _T]) -> _T:
        with self._guard:
            if self.files is not None:
                self.files.loop = loop
            try:
                if self.lock_mirror is not None:
                    return self.lock_mirror.transaction(lambda: action(self._open()))
                return action(self._open())
            finally:
                if self.files is not None:
                    self.files.forget()

    def _local_refresh(self, memory: Memory) -> Report:
        """``memory.refresh()``, answered without walking while the watch says nothing changed
        (``provgraph.watch``); the walk itself wherever it cannot say so."""
        assert self._watched is not None and self._watched.memory is memory
        return self._watched.refresh(_now())

    def _open(self) -> Memory:
        if self._memory is None:
            if self.files is None:
                self._watched = WatchedRefresh(self._new_memory)
                weakref.finalize(self, self._watched.close)  # its descriptor goes with the middleware
                self._memory = self._watched.memory
            else:
                self._memory = self._new_memory(None)
        return self._memory

    def _new_memory(self, warn: Callable[[str], None] | None) -> Memory:
        return Memory(
            self.memory_path, state=self.state_path, files=self.files, sources_heading=self.sources_heading, warn=warn
        )

    def close(self) -> None:
        """Release what the middleware holds (the watch's descriptor); a later check watches anew.

        AgentScope's middlewares have no closing hook: without this call the
        descriptor is released when the middleware is garbage-collected."""
        with self._guard:
            if self._watched is not None:
                self._watched.close()


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


_FILE_TOOLS = frozenset({"Read", "Write", "Edit"})
"""AgentScope's file tools, by the names the model calls them."""


class _Access(enum.Enum):
    """What a file tool did to a file of the memory folder."""

    READ = "read"
    """The model saw the file: a candidate source of what it writes next."""
    WRITE = "write"
    """The file changed (``Write`` or ``Edit``): the lineage is checked again."""


_EDIT_ADVICE = Advice(
    record_file=lambda path: f"call `{RECORD_TOOL}` with `{safe_name(path)}`",
    record_any=f"call `{RECORD_TOOL}` with its path",
    list_all=lambda path: f"call `{LINEAGE_TOOL}` with `{safe_name(path)}`",
)

_HINT_HEADER = re.compile(r"(?:\A|\n\n---\n\n)Memory(?: \(saved [^)\n]*\))?: (?P<path>.+?):\n\n", re.DOTALL)
"""The line that opens each file in ``AgenticMemoryMiddleware``'s retrieval hint:
``Memory (saved 3 days ago): /abs/Memory/profile.md:``; files are separated by ``---``.
The path runs to the first colon followed by a blank line, so a name may hold a newline."""


def _hint_notes(hint: str, report: Report, relative: Callable[[str], str | None]) -> list[str]:
    """One note per stale file shown in a retrieval hint, in the order shown."""
    notes: list[str] = []
    for match in _HINT_HEADER.finditer(hint):
        path = relative(match["path"])
        entry = None if path is None else report.entry(path)
        if entry is not None:
            notes.append(_note(entry))
    return list(dict.fromkeys(notes))


def _hint_paths(hint: str, relative: Callable[[str], str | None]) -> set[str]:
    """The memory files a retrieval hint shows: the model has read them."""
    found = (relative(match["path"]) for match in _HINT_HEADER.finditer(hint))
    return {path for path in found if path is not None}


_REME_MESSAGE = "memory"
_REME_HEADER = "## Relevant memories from past conversations"
"""How ``ReMeMiddleware`` names and opens the message that shows its retrieved memories,
one ``- <chunk text>`` bullet per memory."""


def _texts(memory: Memory, paths: list[str]) -> dict[str, str]:
    """The text of each file that can be read, whitespace folded, for finding quoted chunks in it."""
    texts = {}
    for path in paths:
        try:
            texts[path] = " ".join(memory.files.read(path).decode("utf-8", "replace").split())
        except (OSError, NotRegular, OutsideRoot):
            continue
    return texts


def _reme_notes(hint: str, report: Report, texts: dict[str, str]) -> list[str]:
    """One note per stale file that holds a chunk shown in a ReMe memory message, in the order shown."""
    chunks = [" ".join(bullet.split()) for bullet in hint.split("\n- ")[1:]]
    notes = []
    for chunk in filter(None, chunks):
        for path, text in texts.items():
            entry = report.entry(path)
            if entry is not None and chunk in text:
                notes.append(_note(entry))
    return list(dict.fromkeys(notes))


def _note(entry: StaleEntry) -> str:
    """The line added to a hint that shows a stale file."""
    return clip(f"Note: {safe_name(entry.path)}: {_stale_phrase(entry)}: {causes_text(entry)}")


def default_state_path(backend: BackendBase, memory_path: str) -> Path:
    """Where the state of a remote memory folder is kept when no ``state=`` is given.

    A folder under the user's cache folder named by a hash of the backend
    class and the memory folder's path in the backend; it holds the cache and
    a mirror of the workspace's lock, like ``--state``.
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
