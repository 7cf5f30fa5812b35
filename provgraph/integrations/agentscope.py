"""AgentScope: a middleware that appends the block after the memory middleware's ``MEMORY.md`` snapshot.

``AgenticMemoryMiddleware`` shows the agent its ``MEMORY.md`` index and lets
it read and write memory files through a backend (the local disk, a Docker
or E2B sandbox, ...).  ``ProvenanceMiddleware`` looks at the same folder
through the same backend, checks every memory file on each model call, and
adds the block when a derived file's sources changed.  It offers the agent a
tool to record a re-derivation and one to see what derives from a file,
marks a retrieved memory file's hint when that file is stale, and ends the
result of a memory write with what the write left resting on old content
(``provgraph.edits``).  It never withholds or edits a memory file.

Backend access lives in ``agentscope_backend``; these two are the only
provgraph modules that import AgentScope.
"""

from __future__ import annotations

import asyncio
import enum
import hashlib
import json
import logging
import os
import posixpath
import re
import sys
import threading
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from agentscope.message import HintBlock, TextBlock, ToolResultState
from agentscope.middleware import AgenticMemoryMiddleware, MiddlewareBase
from agentscope.permission import PermissionBehavior, PermissionDecision
from agentscope.tool import BackendBase, FunctionTool, LocalBackend, ToolBase, ToolResponse

from ..api import Explanation, Memory, NotDerived
from ..edits import Advice, EditContext, edit_notes
from ..files import NotRegular, OutsideRoot
from ..model import Edge, EdgeStatus, NodeStatus, Report, StaleEntry
from ..queries import Relative
from ..render import causes_text, clip, day, prompt_block, safe_name, status_phrase
from .agentscope_backend import DEFAULT_BACKEND_TIMEOUT, BackendError, BackendFiles
from .agentscope_lock import LockMirror

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

_EXAMINED_KEPT = 10_000
"""Hint ids remembered at most: far more than the hints of the replies in progress at once."""

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
        self._guard = threading.Lock()
        self._tools = _tools(self)
        self._round_report: tuple[tuple[int, str, int], Report | None] | None = None
        """The last round checked, as (agent, reply, iteration), and its report (None when the check failed)."""
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
        self, agent: Any, input_kwargs: dict[str, Any], next_handler: Callable[..., AsyncGenerator]
    ) -> AsyncGenerator:
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
        block = prompt_block(report, max_lines=self.max_lines, advice=_ADVICE, more_hint=_MORE_HINT)
        return f"{current_prompt}\n\n{block}" if block else current_prompt

    async def on_acting(
        self, agent: Any, input_kwargs: dict[str, Any], next_handler: Callable[..., AsyncGenerator]
    ) -> AsyncGenerator:
        """Remember the memory files the model reads; end a memory write's result with its lineage notes.

        The notes (see ``provgraph.edits``) reach the model with the result
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

    async def record_memory_rederivation(self, path: str) -> str:
        """Record that a derived memory file was just re-derived from its current sources.

        Call it after you updated a file listed under "Derived memories with
        changed sources" from its sources, or checked that it still holds;
        its marker then goes away. The file itself is not changed.

        Args:
            path (`str`):
                The file's path inside the memory folder, as listed (e.g. `profile.md`).
        """
        candidates = self._candidates(path)
        if not candidates:
            return (
                f"Nothing recorded: {_named(path)} is not a path inside the memory folder {_named(self.memory_path)}."
            )
        for relative in candidates:
            try:
                report, missing = await self._in_worker(lambda memory, relative=relative: _record(memory, relative))
            except NotDerived:
                continue
            except Exception as error:  # a tool answers in words; it never raises into the agent loop
                return f"Could not record the re-derivation of {_named(relative)}: {_one_line(error)}"
            return _missing_sources(relative, missing) if missing else _recorded(relative, report)
        return (
            f"Nothing recorded: {_named(candidates[0])} is not a derived memory file "
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
        candidates = self._candidates(path)
        if not candidates:
            folder = _named(self.memory_path)
            return f"No lineage: {_named(path)} is not a path inside the memory folder {folder}."
        try:
            found = await self._in_worker(lambda memory: _look_up_first(memory, candidates))
        except Exception as error:  # a tool answers in words; it never raises into the agent loop
            return f"Could not check the lineage of {_named(candidates[0])}: {_one_line(error)}"
        return _lineage_text(found, max_lines=self.max_lines)

    async def list_stale_derived_memories(self, offset: int = 0) -> str:
        """List the derived memory files whose sources changed since they were derived, with the cause, page by page.

        Args:
            offset (`int`):
                How many stale files to skip: 0 for the first page; each answer gives the offset of the next one.
        """
        try:
            report = await self.refresh()
        except Exception as error:  # a tool answers in words; it never raises into the agent loop
            return f"Could not check the memory folder: {_one_line(error)}"
        return _stale_page(report, offset, max_lines=max(self.max_lines, _PAGE_LINES))

    def _candidates(self, path: str) -> list[str]:
        """The memory-folder-relative paths the agent may mean, likeliest first.

        Names are shown escaped (``\\u003c`` for ``<``, ``\\\\`` for a backslash), and
        the agent passes them back as shown: the unescaped name comes first,
        then the text exactly as given.
        """
        relatives = (_relative_to(self.memory_path, name) for name in (_unescaped(path), path))
        return list(dict.fromkeys(relative for relative in relatives if relative is not None))

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
                return self._locked(None, lambda memory: memory.refresh(now=_now()))
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

    def _open(self) -> Memory:
        if self._memory is None:
            self._memory = Memory(
                self.memory_path, state=self.state_path, files=self.files, sources_heading=self.sources_heading
            )
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


def _look_up_first(memory: Memory, candidates: list[str]) -> _Lineage:
    """The lineage of the first candidate that is a memory file or a declared source, else of the first."""
    found = [_look_up(memory, path) for path in candidates]
    return next((one for one in found if one.exists), found[0])


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
        name = _named(explanation.path)
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
        return f"Recorded: {_named(path)} is now derived from {sources} now."
    return (
        f"Recorded for {_named(path)}, but it stays marked because a file it is derived "
        f"from is itself stale ({causes_text(entry)}); re-derive that file first and record it too."
    )


def _record(memory: Memory, path: str) -> tuple[Report, tuple[Edge, ...]]:
    """Stamp ``path`` again, unless a source it names does not exist: the report and those sources.

    Nothing can be re-derived from a file that does not exist, and stamping
    it as absent would lose the hint of where its content went.
    """
    before = memory.refresh(now=_now())
    missing = tuple(edge for edge in before.edges if edge.derived == path and edge.status is EdgeStatus.MISSING)
    if missing:
        return before, missing
    return memory.stamp([path], now=_now()), ()


def _missing_sources(path: str, missing: tuple[Edge, ...]) -> str:
    """What the agent can do about a source that does not exist: nothing can be re-derived from it."""
    named = ", ".join(map(_missing_text, missing))
    return clip(
        f"Nothing recorded for {_named(path)}: it names sources that do not exist: "
        f"{named}. Remove each such entry from its derived_from, or fix it to the file's "
        f"current name, then call `{RECORD_TOOL}` again.",
        LINEAGE_MAX_CHARS,
    )


def _missing_text(edge: Edge) -> str:
    if edge.moved_to is None:
        return _named(edge.source)
    return f"{_named(edge.source)} (its stamped content is now at {_named(edge.moved_to)}: fix the entry to that name)"


_PAGE_LINES = 20
"""Stale files on a page of ``list_stale_derived_memories`` at least, when the block lists fewer."""

_NAME_SHOWN = 200
"""Characters of a name echoed in a tool answer at most: an answer never repeats a huge argument whole."""


def _named(name: str) -> str:
    return clip(safe_name(name), _NAME_SHOWN)


_ESCAPE = re.compile(r"\\(?:\\|u([0-9a-fA-F]{4}))")


def _unescaped(shown: str) -> str:
    """A name as ``safe_name`` showed it, back to the name itself: ``\\\\`` and ``\\uXXXX`` are undone."""
    return _ESCAPE.sub(lambda match: chr(int(match[1], 16)) if match[1] else "\\", shown)


def _stale_page(report: Report, offset: int, *, max_lines: int, max_chars: int = LINEAGE_MAX_CHARS) -> str:
    """One page of the stale files, from ``offset``: at most ``max_lines`` files and ``max_chars`` characters."""
    total = len(report.stale)
    if not total:
        return _NOTHING_STALE
    start = min(max(0, offset), total)
    files = "1 derived memory file has" if total == 1 else f"{total} derived memory files have"
    head = [f"{files} changed sources (a source changed after they were written)."]
    tail = [clip(_ADVICE)]
    budget = max_chars - sum(len(line) + 1 for line in head + tail) - _MORE_RESERVE
    lines = [_stale_line(entry) for entry in report.stale[start : start + max(1, max_lines)]]
    shown = _fit(lines, max(1, max_lines), budget)
    end = start + len(shown)
    if end < total:
        where = f"Shown: {start + 1} to {end} of {total}; call `{LIST_TOOL}` with offset={end} for the next ones."
    elif shown:
        where = f"Shown: {start + 1} to {end} of {total}; that is all."
    else:
        where = f"Nothing past offset {start}: there are {total}; call `{LIST_TOOL}` with offset=0."
    return "\n".join(head + shown + [where] + tail)


def _stale_line(entry: StaleEntry) -> str:
    return clip(f"- {safe_name(entry.path)}: {_stale_phrase(entry)}: {causes_text(entry)}")


def _one_line(error: Exception) -> str:
    """An error message as one safe line: a tool answer stays short and cannot inject anything."""
    return clip(safe_name(" ".join(str(error).split())), _NAME_SHOWN) or type(error).__name__


def _relative_to(memory_path: str, path: str) -> str | None:
    """The memory-folder-relative POSIX path the agent meant, or None when it points elsewhere.

    Accepts the path as the block lists it, or the full path that retrieval
    hints show.
    """
    windows = "\\" in memory_path  # there a backslash separates folders; elsewhere it may be in a name
    text = path.strip().replace("\\", "/") if windows else path.strip()
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
