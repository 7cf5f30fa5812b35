"""AgentScope: a middleware that appends the block after the memory middleware's ``MEMORY.md`` snapshot.

``ProvenanceMiddleware`` looks at ``AgenticMemoryMiddleware``'s folder through the same backend
(the local disk, a Docker or E2B sandbox, ...), checks every memory file on each model call,
marks stale retrieved files and memory writes, and gives the agent four tools; it never
withholds or edits a memory file.  With ``agentscope_backend`` and ``agentscope_lock``, the
only provgraph modules that import AgentScope.
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
from collections.abc import AsyncGenerator, Callable, Sequence
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any, Self, TypeVar

from agentscope.message import HintBlock, TextBlock, ToolResultState
from agentscope.middleware import AgenticMemoryMiddleware, MiddlewareBase
from agentscope.permission import PermissionBehavior, PermissionDecision
from agentscope.tool import BackendBase, FunctionTool, LocalBackend, ToolBase, ToolResponse
from agentscope.workspace import WorkspaceBase

from ..api import Memory, NotDerived
from ..clock import current
from ..clock import pinned_now as _now
from ..files import NotRegular, OutsideRoot
from ..model import Edge, FileLineage, Report
from ..paths import candidates, relative_to
from ..queries import (
    Advice,
    EditContext,
    edit_notes,
    missing_sources,
    one_line,
    recorded_text,
    refusal_text,
    stale_note,
    stale_page,
)
from ..render import (
    LINEAGE_MAX_CHARS,
    LIST_TOOL,
    RECORD_TOOL,
    lineage_text,
    named,
    prompt_block,
    safe_name,
)
from ..watch import WatchedRefresh
from .agentscope_backend import DEFAULT_BACKEND_TIMEOUT, BackendError, BackendFiles
from .agentscope_lock import LockMirror

__all__ = [
    "LINEAGE_MAX_CHARS",
    "INDEX_TOOL",
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

LINEAGE_TOOL = "memory_lineage"
INDEX_TOOL = "print_memory_index"
INDEX_HINT = f"call `{INDEX_TOOL}` to get it as it should be, then write it"

ADVICE = (
    f"After you update one of them from its sources, or check that it still holds, "
    f"call `{RECORD_TOOL}` with its path as listed here. "
    f"Before or after editing a memory file, `{LINEAGE_TOOL}` shows what derives from it."
)
MORE_HINT = f"call `{LIST_TOOL}` to list them all"
_AS_OF = "(as of the last check, {:%Y-%m-%d %H:%M}; {})"
_UNREADABLE = "the memory folder could not be read now"
_STILL_RUNNING = "a newer check is still running"
_HUNG_AFTER = 120.0  # seconds a backend call of a check in the background may take: far beyond a slow one
_SLACK = 0.01
"""Seconds of the budget kept for what follows the wait (the event loop waking late, the block
being made), so that a model call waits at most ``backend_timeout`` in all."""


class ProvenanceMiddleware(MiddlewareBase):
    """Marks derived memory files whose sources changed, in the agent's system prompt.

    Place it after ``AgenticMemoryMiddleware``, so that the block lands after the ``MEMORY.md``
    snapshot and a stale file is marked in the hint that shows it, and give the agent its
    tools (an ``Agent`` does not collect middleware tools)::

        memory = AgenticMemoryMiddleware(workdir="/srv/agent")
        provenance = ProvenanceMiddleware.from_memory_middleware(memory)
        agent = Agent(..., middlewares=[memory, provenance],
                      toolkit=Toolkit(tools=[*file_tools, *await provenance.list_tools()]))

    The tools: ``record_memory_rederivation``, ``list_stale_derived_memories``,
    ``memory_lineage`` and ``print_memory_index``.  With ``LocalBackend`` (the default) the state is ``<memory
    folder>/.provgraph/``; with another backend (a sandbox) the lock is still
    ``<memory folder>/provgraph.lock`` there, and the cache and a mirror of the lock stay on
    this machine, in ``state=`` or ``default_state_path(...)``: the ``workspace`` that holds
    the folder (the agent service's) names it, as every sandbox mounts its own at one path.
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
        workspace: WorkspaceBase | None = None,
        volatile_fields: Sequence[str] = (),
    ) -> None:
        self.backend: BackendBase = backend if backend is not None else LocalBackend()
        self.max_lines = max_lines
        self.sources_heading = sources_heading
        self.volatile_fields = tuple(volatile_fields)
        if _is_local(self.backend):
            self.memory_path = os.path.abspath(os.path.join(workdir, memory_dir))
            self.files: BackendFiles | None = None
            self.state_path = Path(state) if state is not None else None
            self.lock_mirror: LockMirror | None = None
        else:
            self.memory_path = self.backend.normpath(self.backend.join_path(workdir, memory_dir))
            self.files = BackendFiles(self.backend, self.memory_path, timeout=backend_timeout)
            self.state_path = (
                Path(state) if state is not None else default_state_path(self.backend, self.memory_path, workspace)
            )
            # The lineage lock lives in the workspace; the state folder keeps a mirror of it (agentscope_lock).
            self.lock_mirror = LockMirror(self.files, self.state_path)
        self._memory: Memory | None = None
        self._watched: WatchedRefresh | None = None
        """The local folder's refresh, answered from the operating system's events when nothing changed."""
        self._guard = threading.Lock()
        self._replies = 0  # the agents' replies in progress: the watch is released when the last ends
        self._tools = _tools(self)
        self._round_report: tuple[tuple[int, str, int], Report | None] | None = None
        """The last round checked, as (agent, reply, iteration), and its report (None when none was ready)."""
        self._last_block: tuple[tuple[object, object] | None, int, str] = (None, 0, "")
        """The stale entries and line cap of the last block made, and that block."""
        self._last_check: tuple[Report | None, datetime] = (None, current())
        """The report of the last check that completed, and when: the marks kept, dated, while none is ready."""
        self._unready = _UNREADABLE
        """Why the round in progress has no report: the check failed, or it is still running."""
        self._budget = backend_timeout
        self._check: asyncio.Task[Report | None] | None = None
        """A check of a backend's folder, running in the background until a model call takes its report."""
        self._examined_hints: dict[str, None] = {}
        """The ids of the hints already looked at, oldest first, of every agent sharing this middleware."""
        self._reads: tuple[tuple[int, str], set[str], set[str]] = ((0, ""), set(), set())
        """(agent, reply) in progress, the files the model saw since its last write, and all it saw or wrote."""

    @classmethod
    def from_memory_middleware(cls, middleware: AgenticMemoryMiddleware, **options: Any) -> ProvenanceMiddleware:
        """The middleware for the folder and backend an ``AgenticMemoryMiddleware`` uses (read from
        its private attributes: it has no public getters)."""
        workdir, memory_dir, backend = middleware._workdir, middleware._memory_dir, middleware._backend
        return cls(workdir=workdir, memory_dir=memory_dir, backend=backend, **options)

    async def on_reply(
        self, agent: Any, input_kwargs: dict[str, Any], next_handler: Callable[..., AsyncGenerator[Any, None]]
    ) -> AsyncGenerator[Any, None]:
        """Pass the reply on; when no reply is left in progress, let the check in flight end (each
        backend call has its deadline), then ``close``: a service makes a middleware per turn."""
        self._replies += 1
        try:
            async for item in next_handler(**input_kwargs):
                yield item
        finally:
            self._replies -= 1
            if not self._replies:
                await self._check_ended(within=None)  # no backend call of it is left when the loop closes
                self.close()

    async def on_reasoning(
        self, agent: Any, input_kwargs: dict[str, Any], next_handler: Callable[..., AsyncGenerator[Any, None]]
    ) -> AsyncGenerator[Any, None]:
        """Mark the retrieved memory files that are stale, in the hint that shows them (that of
        ``AgenticMemoryMiddleware``, earlier in the list, or ``ReMeMiddleware``'s message)."""
        report = await self._round_check(agent)
        if report is not None:
            self._annotate_hints(agent, report)
            await self._annotate_reme(agent, report)
        async for item in next_handler(**input_kwargs):
            yield item

    async def on_system_prompt(self, agent: Any, current_prompt: str) -> str:
        """Append the block when a derived file is stale; otherwise return the prompt untouched.  Asked
        before ``on_reasoning`` (to count tokens), it never yields: the retrieval hint would move."""
        report = await self._round_check(agent, wait=False)
        block = self._block(report) if report is not None else self._last_known_block()
        return f"{current_prompt}\n\n{block}" if block else current_prompt

    def _block(self, report: Report) -> str:
        """The block of ``report``, made once for the same stale entries and problems (the watch's, unchanged)."""
        marks, max_lines, block = self._last_block
        if (
            marks is None
            or marks[0] is not report.stale
            or marks[1] is not report.problems
            or max_lines != self.max_lines
        ):
            hints = {"advice": ADVICE, "more_hint": MORE_HINT, "index_hint": INDEX_HINT}
            block = prompt_block(report, max_lines=self.max_lines, **hints)
            self._last_block = ((report.stale, report.problems), self.max_lines, block)
        return block

    def _last_known_block(self) -> str:
        """The last check's block, dated, while no newer report is ready: known marks do not vanish."""
        report, checked_at = self._last_check
        block = self._block(report) if report is not None else ""
        return block and f"{block}\n{_AS_OF.format(checked_at, self._unready)}"

    async def on_acting(
        self, agent: Any, input_kwargs: dict[str, Any], next_handler: Callable[..., AsyncGenerator[Any, None]]
    ) -> AsyncGenerator[Any, None]:
        """Remember the memory files the model reads; end a memory write's result with its lineage
        notes, checked before the next tool runs (a new ``derived_from`` adopts its sources as
        they are then).  A result is passed on untouched when nothing applies or the check fails."""
        touched = self._touched(input_kwargs.get("tool_call"))
        async for item in next_handler(**input_kwargs):
            if touched is not None and isinstance(item, ToolResponse) and item.state == ToolResultState.SUCCESS:
                await self._after_file_tool(agent, *touched, item)
            yield item

    async def list_tools(self) -> list[ToolBase]:
        return list(self._tools)

    async def record_memory_rederivation(self, path: str) -> str:
        """Record that a derived memory file was just re-derived from its current sources.

        Call it after you updated a file listed under "Derived memories with
        changed sources" from its sources, or checked that it still holds;
        its marker then goes away. The file itself is not changed.

        Args:
            path (`str`):
                The file's path inside the memory folder, as listed (e.g. `profile.md`).
        """
        meant = candidates(self.memory_path, path)
        if not meant:
            return f"Nothing recorded: {named(path)} is not a path inside the memory folder {named(self.memory_path)}."
        for relative in meant:
            try:
                report, missing = await self._in_worker(partial(_record, path=relative))
            except NotDerived:
                continue
            except Exception as error:  # a tool answers in words; it never raises into the agent loop
                return f"Could not record the re-derivation of {named(relative)}: {one_line(error)}"
            return (
                refusal_text(relative, missing, f"call `{RECORD_TOOL}` again")
                if missing
                else recorded_text(relative, report)
            )
        return (
            f"Nothing recorded: {named(meant[0])} is not a derived memory file "
            "(it does not exist, or its frontmatter has no derived_from)."
        )

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
        meant = candidates(self.memory_path, path)
        if not meant:
            folder = named(self.memory_path)
            return f"No lineage: {named(path)} is not a path inside the memory folder {folder}."
        try:
            found = await self._in_worker(lambda memory: _look_up_first(memory, meant))
        except Exception as error:  # a tool answers in words; it never raises into the agent loop
            return f"Could not check the lineage of {named(meant[0])}: {one_line(error)}"
        return lineage_text(found, max_lines=self.max_lines)

    async def list_stale_derived_memories(self, offset: int = 0) -> str:
        """List the derived memory files whose sources changed since they were derived, with the cause, page by page.

        Args:
            offset (`int`):
                How many stale files to skip: 0 for the first page; each answer gives the offset of the next one.
        """
        try:
            report = await self.refresh()
        except Exception as error:  # a tool answers in words; it never raises into the agent loop
            return f"Could not check the memory folder: {one_line(error)}"
        return stale_page(
            report.stale, offset, max_lines=max(self.max_lines, _PAGE_LINES), list_tool=LIST_TOOL, advice=ADVICE
        )

    async def print_memory_index(self) -> str:
        """Print the memory index (MEMORY.md) as it should be, to write over it when it is out of step.

        Its lines in their order, entries of changed files rewritten from their
        name and description, entries of missing files and repeated ones
        dropped, and the memory files it does not list appended.  Nothing is
        changed: write the text to MEMORY.md yourself.
        """
        try:
            text = await self._in_worker(lambda memory: memory.index(now=_now()))
        except Exception as error:  # a tool answers in words; it never raises into the agent loop
            return f"Could not read the memory index: {one_line(error)}"
        return text or f"There is no MEMORY.md in the memory folder {named(self.memory_path)}."

    async def refresh(self) -> Report:
        """Scan every memory file (not only the newest the retrieval selector sees) and report."""
        return await self._in_worker(self._refreshed)

    async def _round_check(self, agent: Any, *, wait: bool = True) -> Report | None:
        """The report of the agent's reasoning round in progress, checked once per round: the
        prompt is asked for twice (to count tokens, then for the call), the hint marked between.
        Without ``wait``, a backend's check of a new round is started, not awaited."""
        round_key = _round_of(agent)
        if round_key is not None and self._round_report is not None and self._round_report[0] == round_key:
            return self._round_report[1]
        if self.files is None:
            report = await self._checked()
        else:  # one check at a time, in the background; its report serves the first model call after it
            if self._check is None or self._check.get_loop() is not asyncio.get_running_loop():
                self._check = asyncio.create_task(self._checked(max(_HUNG_AFTER, self._budget)))
            check = self._check
            if (not wait and round_key is not None) or not await self._check_ended(max(0.0, self._budget - _SLACK)):
                self._unready = _STILL_RUNNING
                return None
            self._check = None if self._check is check else self._check
            report = check.result()
        if round_key is not None:
            self._round_report = (round_key, report)
        return report

    async def _checked(self, deadline: float | None = None) -> Report | None:
        """``refresh`` (without waiting for a check in flight, given a ``deadline`` per backend call),
        or None (logged) when the folder could not be checked.  A local folder is checked without
        yielding, which would let the memory middleware's retrieval finish meanwhile."""
        try:
            if self.files is None:
                return self._locked(None, self._refreshed)
            return await (self.refresh() if deadline is None else self._in_thread(self._refreshed, deadline))
        except Exception as error:
            _log.warning("provgraph could not check the memory folder %s: %s", self.memory_path, error)
            self._unready = _UNREADABLE
            return None

    async def _check_ended(self, within: float | None) -> bool:
        """Whether the check in flight, if any, has ended within ``within`` seconds."""
        check = self._check
        if check is None or check.get_loop() is not asyncio.get_running_loop():
            return True
        return bool((await asyncio.wait({check}, timeout=within))[0])

    def _refreshed(self, memory: Memory) -> Report:
        """``memory.refresh()`` (a local folder's without a walk while the watch says nothing changed),
        kept as the last check's report: also that of a check whose reply is over."""
        now = _now()
        report = memory.refresh(now=now) if self._watched is None else self._watched.refresh(now)
        self._last_check = (report, current(now))
        return report

    def _annotate_hints(self, agent: Any, report: Report) -> None:
        """Append a note to each new retrieval hint of this reply that shows a stale file: what
        held when the model first read it.  A hint shaped otherwise is left as it is."""
        try:
            for hint in self._new_hints(agent):
                text = str(hint.hint)  # only text hints are new
                for seen in self._reads_of(agent):
                    seen.update(_hint_paths(text, self._hint_path))
                if notes := _hint_notes(text, report, self._hint_path):
                    hint.hint = f"{text}\n\n" + "\n".join(notes)
        except Exception as error:
            _log.warning("provgraph could not mark the retrieved memory files: %s", error)

    async def _annotate_reme(self, agent: Any, report: Report) -> None:
        """Append a note to each new ReMe memory message that quotes a chunk of a stale file
        (ReMe shows chunks, not files; the stale files are read only for such a message)."""
        try:
            hints = self._new_hints(agent, reme=True)
            if not hints or not report.stale:
                return
            stale = [entry.path for entry in report.stale]
            if self.files is None:
                contents = self._locked(None, lambda memory: _texts(memory, stale))
            else:
                contents = await self._in_worker(lambda memory: _texts(memory, stale))
            for hint in hints:
                text = str(hint.hint)  # only text hints are new
                if notes := _reme_notes(text, report, contents):
                    hint.hint = f"{text}\n\n" + "\n".join(notes)
        except Exception as error:
            _log.warning("provgraph could not mark the memories ReMe retrieved: %s", error)

    def _new_hints(self, agent: Any, reme: bool = False) -> list[HintBlock]:
        """Text hints not looked at before: in the agent's own message of the reply in progress
        (where the memory middleware puts its hint), or with ``reme`` ReMe's memory messages."""
        state, examined, found = agent.state, self._examined_hints, []
        for message in state.context:
            own = message.id == state.reply_id and message.name == agent.name
            if message.role != "assistant" or not (message.name == _REME_MESSAGE if reme else own):
                continue
            for block in message.content:
                text = block.hint if isinstance(block, HintBlock) else None
                if isinstance(text, str) and block.id not in examined and (not reme or text.startswith(_REME_HEADER)):
                    examined[block.id] = None
                    found.append(block)
        for oldest in list(examined)[: max(0, len(examined) - _EXAMINED_KEPT)]:
            del examined[oldest]
        return found

    def _touched(self, call: Any) -> tuple[_Access, str] | None:
        """(read or write, memory path) for a file tool call on a file of the memory folder, else None."""
        name = getattr(call, "name", None)
        if name not in tuple(_Access):
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
        return (_Access(name), path)

    async def _after_file_tool(self, agent: Any, access: _Access, path: str, response: ToolResponse) -> None:
        """A read joins the reply's reads; a write gets its notes, and the reads start afresh:
        a later write was made from what is read after this one."""
        reads, known = self._reads_of(agent)
        if access is _Access.READ:
            if path.endswith(".md"):
                reads.add(path)
                known.add(path)
            return
        edit = EditContext(path, frozenset(reads), access is _Access.WRITE, frozenset(known))
        reads.clear()
        known.add(path)
        report = await self._checked()
        notes = "" if report is None else edit_notes(report, edit, _EDIT_ADVICE, max_lines=self.max_lines)
        if notes:
            response.content.append(TextBlock(text=notes))

    def _reads_of(self, agent: Any) -> tuple[set[str], set[str]]:
        """The files read in the agent's reply in progress since its last write, and all read or written."""
        key = (id(agent), str(getattr(getattr(agent, "state", None), "reply_id", "")))
        if self._reads[0] != key:
            self._reads = (key, set(), set())
        return self._reads[1], self._reads[2]

    def _hint_path(self, shown: str) -> str | None:
        """The memory-folder-relative path of a file as a retrieval hint shows it."""
        shown = os.path.abspath(shown) if self.files is None else self.backend.normpath(shown)
        return relative_to(self.memory_path, shown)

    async def _in_worker(self, action: Callable[[Memory], _T]) -> _T:
        """Run a provgraph call after the check in flight, each step within the budget."""
        if not await self._check_ended(self._budget):
            raise BackendError(f"a check of the memory folder is still running after {self._budget:g} s")
        return await self._in_thread(action, self._budget)

    async def _in_thread(self, action: Callable[[Memory], _T], deadline: float) -> _T:
        """Run a provgraph call in a thread, one at a time, so the event loop stays free for a
        remote backend's coroutines, each of which may take ``deadline`` seconds."""
        loop = asyncio.get_running_loop()
        return await asyncio.to_thread(self._locked, loop, action, deadline)

    def _locked(
        self, loop: asyncio.AbstractEventLoop | None, action: Callable[[Memory], _T], deadline: float = 0
    ) -> _T:
        with self._guard:
            if self.files is not None:
                self.files.loop, self.files.timeout = loop, deadline
            try:
                if self.lock_mirror is not None:
                    return self.lock_mirror.transaction(lambda: action(self._open()))
                return action(self._open())
            finally:
                if self.files is not None:
                    self.files.forget()

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
            self.memory_path,
            state=self.state_path,
            files=self.files,
            sources_heading=self.sources_heading,
            volatile_fields=self.volatile_fields,
            warn=warn,
        )

    def close(self) -> None:
        """Release the watch's descriptor (also done when a reply ends) and cancel the wait for a
        check in the background: its thread still finishes the check and keeps its report."""
        check, self._check = self._check, None
        if check is not None:
            check.cancel()
        if self._watched is not None:  # only a local folder's: a sandbox's check may hold the guard awaiting the loop
            with self._guard:
                self._watched.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *_: object) -> None:
        self.close()


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


class _Access(enum.StrEnum):
    """What a file tool did to a file of the memory folder, by the tool's name."""

    READ = "Read"
    """The model saw the file: a candidate source of what it writes next."""
    WRITE = "Write"
    """The file was written whole, new or again: the lineage is checked, a declaration may be suggested."""
    EDIT = "Edit"
    """Part of the file changed: the lineage is checked; what was read is no source of an addition."""


_EDIT_ADVICE = Advice(
    record_file=lambda path: f"call `{RECORD_TOOL}` with `{safe_name(path)}`",
    record_any=f"call `{RECORD_TOOL}` with its path",
    list_all=lambda path: f"call `{LINEAGE_TOOL}` with `{safe_name(path)}`",
    list_stale=f"call `{LIST_TOOL}`",
    print_index=f"call `{INDEX_TOOL}`",
)

_HINT_HEADER = r"(?:\A|\n\n---\n\n)Memory(?: \(saved [^)\n]*\))?: (?P<path>.+?):\n\n"
"""The line that opens each file (separated by ``---``) in ``AgenticMemoryMiddleware``'s hint:
``Memory (saved 3 days ago): /abs/Memory/profile.md:``; a path ends at a colon and a blank line."""


def _hint_notes(hint: str, report: Report, relative: Callable[[str], str | None]) -> list[str]:
    """One note per stale file shown in a retrieval hint, in the order shown."""
    notes: list[str] = []
    for match in re.finditer(_HINT_HEADER, hint, re.DOTALL):
        path = relative(match["path"])
        entry = None if path is None else report.entry(path)
        if entry is not None:
            notes.append(stale_note(entry))
    return list(dict.fromkeys(notes))


def _hint_paths(hint: str, relative: Callable[[str], str | None]) -> set[str]:
    """The memory files a retrieval hint shows: the model has read them."""
    found = (relative(match["path"]) for match in re.finditer(_HINT_HEADER, hint, re.DOTALL))
    return {path for path in found if path is not None}


_REME_MESSAGE = "memory"
_REME_HEADER = "## Relevant memories from past conversations"
"""How ``ReMeMiddleware`` names and opens its message of memories, one ``- <chunk>`` each."""


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
                notes.append(stale_note(entry))
    return list(dict.fromkeys(notes))


def default_state_path(backend: BackendBase, memory_path: str, workspace: WorkspaceBase | None = None) -> Path:
    """Where the state of a remote memory folder is kept when no ``state=`` is given: a folder
    under the user's cache folder named by a hash of the backend class, the folder's path and
    the id of the ``workspace`` that holds it (its path alone is every sandbox's ``/workspace``)."""
    key = f"{type(backend).__module__}.{type(backend).__qualname__}\0{memory_path}"
    if workspace is not None:
        key += f"\0workspace\0{workspace.workspace_id}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:24]
    return _cache_home() / "provgraph" / "agentscope" / digest


def _cache_home() -> Path:
    if sys.platform == "win32":
        return Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches"
    configured = os.environ.get("XDG_CACHE_HOME", "")
    return Path(configured) if os.path.isabs(configured) else Path.home() / ".cache"


def _tools(middleware: ProvenanceMiddleware) -> tuple[ToolBase, ...]:
    allow = PermissionDecision(
        behavior=PermissionBehavior.ALLOW,
        message="provgraph only records stamps in its own state; memory files are not touched.",
    )
    # FunctionTool takes a function that returns text and wraps it in a ToolChunk; its type hint
    # names ToolChunk results only, hence the ignores.
    return (
        FunctionTool(middleware.record_memory_rederivation, name=RECORD_TOOL, permission=allow),  # type: ignore[arg-type]
        FunctionTool(
            middleware.list_stale_derived_memories,  # type: ignore[arg-type]
            name=LIST_TOOL,
            is_read_only=True,
            permission=allow,
        ),
        FunctionTool(middleware.memory_lineage, name=LINEAGE_TOOL, is_read_only=True, permission=allow),  # type: ignore[arg-type]
        FunctionTool(middleware.print_memory_index, name=INDEX_TOOL, is_read_only=True, permission=allow),  # type: ignore[arg-type]
    )


def _look_up_first(memory: Memory, candidates: list[str]) -> FileLineage:
    """The lineage of the first candidate that is a memory file or a declared source, else of the first."""
    report = memory.refresh(now=_now())
    found = [memory.lineage(path, report) for path in candidates]
    return next((one for one in found if one.exists), found[0])


def _record(memory: Memory, path: str) -> tuple[Report, tuple[Edge, ...]]:
    """Stamp ``path`` again, unless a source it names does not exist: the report and those sources."""
    before = memory.refresh(now=_now())
    missing = missing_sources(before, path)
    return (before, missing) if missing else (memory.stamp([path], now=_now()), ())


_PAGE_LINES = 20
"""Stale files on a page of ``list_stale_derived_memories`` at least, when the block lists fewer."""
