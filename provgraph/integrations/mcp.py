"""MCP: ``provgraph mcp ROOT``, a Model Context Protocol server over stdio for one memory folder.

Any MCP client gets the AgentScope tools' bounded, paged answers and the memory index's
problems; the agent's block, the lineage graph and the index as it should be as resources;
and a prompt for one re-derivation, through the same ``Memory`` and lock as the command
line; a subscriber hears of changes from the middleware's watch (a walk where it cannot
vouch).  On the SDK's low-level ``Server``: the high-level one serves no
``resources/subscribe``, which clients before protocol 2026-07-28 use.  The only module
that imports ``mcp``.
"""

from __future__ import annotations

import json
import os
import shlex
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import anyio
import anyio.to_thread
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.session import ServerSession
from mcp.server.stdio import stdio_server
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ResourceUpdated, ServerEvent
from mcp.shared.exceptions import MCPError

from ..api import Memory, NotDerived
from ..clock import pinned_now
from ..errors import ProvgraphError, log_warning
from ..index import INDEX_NAME, problem_line
from ..model import VERSION, FileLineage, Report
from ..paths import candidates, command_options, index_command, list_hint
from ..queries import missing_sources, one_line, page, recorded_text, refusal_text, stale_page
from ..render import (
    LINEAGE_MAX_CHARS,
    MORE_RESERVE,
    clip,
    explanation_text,
    graph_json,
    lineage_text,
    named,
    prompt_block,
    repair_order,
    safe_name,
    uninvolved_text,
)
from ..watch import WatchedRefresh
from .claude_code import installed_program

__all__ = ["POLL_SECONDS", "MemoryServer", "config_text", "serve"]

NAME = "provgraph"
LIST_TOOL, EXPLAIN_TOOL, LINEAGE_TOOL, RECORD_TOOL, INDEX_TOOL = (
    "list_stale_memories",
    "explain_memory",
    "memory_lineage",
    "record_rederivation",
    "memory_index_problems",
)
STALE_URI, GRAPH_URI, INDEX_URI = "provgraph://stale", "provgraph://graph", "provgraph://index"
PROMPT = "rederive_stale_memory"
POLL_SECONDS = 1.0
"""How often a subscribed folder is looked at: one non-blocking read of the watch, or a walk."""
PAGE_LINES = 20
"""Stale files on a page of ``list_stale_memories`` at least, when the block lists fewer."""
INDEX_SHOWN = 2000
"""Characters of the index as it should be that an answer of ``memory_index_problems`` holds;
a longer one is read as the resource ``provgraph://index``."""

ADVICE = (
    f"After you update one of them from its sources, or check that it still holds, call `{RECORD_TOOL}` "
    f"with its path as listed here; `{EXPLAIN_TOOL}` shows why one is stale, `{LINEAGE_TOOL}` what rests on one."
)
_PATH = {
    "type": "string",
    "description": "The file's path inside the memory folder, as listed (e.g. `profile.md`), or its full path.",
}
_OFFSET = {
    "type": "integer",
    "minimum": 0,
    "default": 0,
    "description": "How many stale files to skip: 0 for the first page; each answer gives the next offset.",
}
_PROBLEMS_OFFSET = _OFFSET | {
    "description": "How many problems to skip: 0 for the first page; each answer gives the next offset."
}


def _tool(name: str, description: str, argument: str, schema: dict[str, Any], read_only: bool = True) -> types.Tool:
    """A tool of one argument, required unless it has a default; none touches a memory file."""
    required = [] if "default" in schema else [argument]
    return types.Tool(
        name=name,
        description=description,
        input_schema={"type": "object", "properties": {argument: schema}, "required": required},
        annotations=types.ToolAnnotations(
            read_only_hint=read_only, destructive_hint=False, idempotent_hint=True, open_world_hint=False
        ),
    )


TOOLS = (
    _tool(
        LIST_TOOL,
        "List the derived memory files whose sources changed since they were derived, in the order to repair "
        "them, with each cause and its date, page by page.",
        "offset",
        _OFFSET,
    ),
    _tool(
        EXPLAIN_TOOL,
        "Explain why one memory file is stale: its sources, each root cause with its date and the chain of "
        "files from it.",
        "path",
        _PATH,
    ),
    _tool(
        LINEAGE_TOOL,
        "Show what a memory file is derived from and every file derived from it (what an edit of it would make "
        "stale); call it before or after editing one.",
        "path",
        _PATH,
    ),
    _tool(
        RECORD_TOOL,
        "Record that a derived memory file was just re-derived from its sources as they are now (after you "
        "updated it from them, or checked that it still holds): its mark goes away. The file itself is not "
        "changed. Refused while a source it names does not exist.",
        "path",
        _PATH,
        read_only=False,
    ),
    _tool(
        INDEX_TOOL,
        "List what is wrong with the memory index (MEMORY.md): entries to missing files, files it does not list, "
        "entries older than their file's name or description, repeated entries; in the order to repair them, "
        "page by page, with the index as it should be.",
        "offset",
        _PROBLEMS_OFFSET,
    ),
)
_BLOCK = "The block an agent gets in its system prompt, as `provgraph prompt` prints it (empty when nothing is stale)."
_GRAPH = "Every derivation and each file's status, as `provgraph graph --format json` prints it."
_INDEX = "The memory index (MEMORY.md) as it should be, as `provgraph index` prints it (empty without an index)."
RESOURCES = (
    types.Resource(uri=STALE_URI, name="stale", description=_BLOCK, mime_type="text/markdown"),
    types.Resource(uri=GRAPH_URI, name="graph", description=_GRAPH, mime_type="application/json"),
    types.Resource(uri=INDEX_URI, name="index", description=_INDEX, mime_type="text/markdown"),
)
_PROMPT_PATH = types.PromptArgument(name="path", description="The stale file (default: the first to repair).")
_REDERIVING = "Walk through re-deriving one stale memory file from its sources and recording it."
PROMPTS = (types.Prompt(name=PROMPT, description=_REDERIVING, arguments=[_PROMPT_PATH]),)

REDERIVE = f"""\
The memory file {{path}} was derived from other memory files. Here is what provgraph knows of it:

{{why}}

1. Read {{path}} and each of its sources named above (the changed ones first).
2. Update {{path}} so that it holds what its sources hold now, or check that it still does; keep its \
frontmatter, derived_from included.
3. Then call `{RECORD_TOOL}` with path `{{path}}` to record the re-derivation; if a file it is derived from \
is stale itself, re-derive and record that one first.
If a source it names no longer exists, fix or remove that entry of its derived_from first."""

_Context = ServerRequestContext["MemoryServer", Any]
_Listed = TypeVar("_Listed")


class ToolRefused(ProvgraphError):
    """A call that cannot be answered: its one line is the tool's error (a protocol error elsewhere)."""


class MemoryServer:
    """The answers of the server for one memory folder, one call at a time, each in a worker
    thread; every call waits only as long as the store's lock timeouts."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        state: str | os.PathLike[str] | None = None,
        sources_heading: str | None = None,
        trust_cache: bool = True,
        max_lines: int = 20,
        volatile_fields: Sequence[str] = (),
        index_files: Sequence[str] = (),
        unindexed: Sequence[str] = (),
    ) -> None:
        self.root = os.path.abspath(os.path.expanduser(root))
        self.max_lines = max_lines
        self.options = command_options(state, sources_heading, volatile_fields, index_files, unindexed)
        """What a printed command repeats, as ``provgraph prompt`` does."""
        self._open = lambda warn: Memory(
            self.root,
            state=state,
            sources_heading=sources_heading,
            trust_cache=trust_cache,
            volatile_fields=volatile_fields,
            index_files=index_files,
            unindexed=unindexed,
            warn=warn,
        )
        self._watched: WatchedRefresh | None = None
        self._guard = threading.Lock()
        self._sessions: dict[ServerSession, set[str]] = {}
        """The resources each client of the pre-2026 protocol subscribed to."""
        self.bus = _CountedBus()
        """The events of ``subscriptions/listen`` streams (protocol 2026-07-28)."""
        self.listen = ListenHandler(self.bus)
        self._seen: tuple[object, ...] | None = None
        """What the resources were made of at the last refresh: its stale files, index problems, edges and cycles."""
        self._changed: set[str] = set()
        """Resources changed since subscribers were told; under ``_changes``, not the calls' ``_guard``."""
        self._changes = threading.Lock()
        self._printed: tuple[int, str] | None = None
        """The index as ``Memory.index`` last printed it, and the watch's walks then."""

    def refresh(self) -> Report:
        """The folder's report: the watch's when nothing changed since the last one."""
        with self._guard:
            return self._noted(self._watch().refresh(pinned_now()))

    def _noted(self, report: Report) -> Report:
        """``report``, after noting which resources it changed: every answer feeds the subscribers'."""
        seen, before = (report.stale, report.index_problems, report.edges, report.cycles), self._seen
        self._seen = seen
        if before is not None and seen != before:  # the same tuples while the watch vouches: no comparison
            stale, index = seen[0] != before[0], seen[1] != before[1]
            changed = {STALE_URI: stale or index, INDEX_URI: index, GRAPH_URI: stale or seen[2:] != before[2:]}
            with self._changes:
                self._changed.update(uri for uri, differs in changed.items() if differs)
        return report

    def record(self, path: str) -> str:
        """Stamp ``path`` again, unless a source it names does not exist (``ToolRefused``, naming it)."""
        with self._guard:
            memory = self._watch().memory
            before = memory.refresh(now=pinned_now())
            if missing := missing_sources(before, path):
                raise ToolRefused(refusal_text(path, missing, f"call `{RECORD_TOOL}` again"))
            return recorded_text(path, self._noted(memory.stamp([path], now=pinned_now())))

    def close(self) -> None:
        with self._guard:
            if self._watched is not None:
                self._watched.close()

    # -- the tools -------------------------------------------------------------

    def call(self, name: str, arguments: dict[str, Any]) -> str:
        """The answer of tool ``name``; ``ToolRefused`` (or another one-line error) when it has none."""
        if name in (LIST_TOOL, INDEX_TOOL):
            offset = arguments.get("offset", 0)
            if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
                raise ToolRefused(f"offset takes a whole number from 0, not {named(repr(offset))}")
            if name == INDEX_TOOL:
                return self._index_problems(offset)
            stale = repair_order(self.refresh().stale)
            return stale_page(stale, offset, max_lines=self._page_lines, list_tool=LIST_TOOL, advice=ADVICE)
        answer = {EXPLAIN_TOOL: self._explain, LINEAGE_TOOL: self._lineage, RECORD_TOOL: self._record}.get(name)
        if answer is None:
            raise ToolRefused(f"there is no tool {named(name)}")
        path = arguments.get("path")
        if not isinstance(path, str) or not path.strip():
            raise ToolRefused(f"`{name}` takes `path`, a memory file's path inside {named(self.root)}")
        return answer(self.candidates(path))

    @property
    def _page_lines(self) -> int:
        return max(self.max_lines, PAGE_LINES)

    def _index_problems(self, offset: int) -> str:
        """A page of the index's problems in repair order, then the index as it should be, or where to read it."""
        with self._guard:
            watched = self._watch()
            problems = self._noted(watched.refresh(pinned_now())).index_problems
            text = self._printed_index()
            index = watched.memory.index_file or INDEX_NAME
        if not text:
            return f"There is no memory index in {named(self.root)}: no {INDEX_NAME} there links a memory file."
        if not problems:
            return "The memory index agrees with the files: every entry is current, and it lists every memory file."
        count = "1 problem" if len(problems) == 1 else f"{len(problems)} problems"
        head = f"{count} with the memory index, in the order to repair them:"
        tail = self._index_tail(text, index)
        return page(
            problems, lambda one: clip(problem_line(one, safe_name)), offset, self._page_lines, head, tail, INDEX_TOOL
        )

    def _printed_index(self) -> str:
        """``Memory.index``'s text (under the guard): again without a walk while the watch has
        not walked the folder since it was printed."""
        watched = self._watch()
        if self._printed is None or self._printed[0] != watched.walks:
            text = watched.memory.index(now=pinned_now())
            self._printed = (watched.walks, text)
        return self._printed[1]

    def _index_tail(self, text: str, index: str) -> str:
        """The index as it should be (``text``, printed from ``index``) when short, else where to read it."""
        then = f"write it over {named(index)}, then call `{RECORD_TOOL}` with path `{named(index)}`"
        if len(text) <= INDEX_SHOWN:
            shown = text.removesuffix("\n")
            return f"The index as it should be, from the next line to the end; {then}:\n{shown}"
        command = index_command(self.root, self.options)
        lines = text.count("\n")
        return (
            f"The index as it should be has {lines} lines: read the resource {INDEX_URI} (or run `{command}`), {then}."
        )

    def candidates(self, path: str) -> list[str]:
        """The root-relative paths the agent may mean (``paths.candidates``); refused when none is inside the root."""
        found = candidates(self.root, path)
        if not found:
            raise ToolRefused(f"{named(path)} is not a path inside the memory folder {named(self.root)}")
        return found

    def _explain(self, candidates: list[str]) -> str:
        found = self._look_up(candidates)
        explanation = found.explanation
        if explanation.status is None and not explanation.problems:
            return uninvolved_text(explanation.path, found.exists)
        return _bounded(explanation_text(explanation), f"call `{LINEAGE_TOOL}` with `{safe_name(explanation.path)}`")

    def _lineage(self, candidates: list[str]) -> str:
        found = self._look_up(candidates)
        record, list_stale = f"call `{RECORD_TOOL}` with its path", f"call `{LIST_TOOL}`"
        return lineage_text(found, max_lines=self.max_lines, record=record, list_stale=list_stale)

    def _look_up(self, candidates: list[str]) -> FileLineage:
        """The lineage of the first candidate that is a memory file or a declared source, else of the first."""
        with self._guard:
            watched = self._watch()
            report = self._noted(watched.refresh(pinned_now()))
            found = [watched.memory.lineage(path, report) for path in candidates]
        return next((one for one in found if one.exists), found[0])

    def _record(self, candidates: list[str]) -> str:
        for path in candidates:
            try:
                return self.record(path)
            except NotDerived:
                continue
        raise ToolRefused(
            f"nothing recorded: {named(candidates[0])} is not a derived memory file "
            "(it does not exist, or its frontmatter has no derived_from)"
        )

    def _watch(self) -> WatchedRefresh:
        """The folder's refresh with its watch, opened at the first call (under the guard)."""
        if self._watched is None:
            self._watched = WatchedRefresh(self._open)
        return self._watched

    # -- the resources and the prompt ------------------------------------------

    def resource_text(self, uri: str) -> str:
        report = self.refresh()
        if uri == STALE_URI:
            return prompt_block(report, max_lines=self.max_lines, more_hint=list_hint(report.root, self.options))
        if uri == GRAPH_URI:
            return graph_json(report)
        if uri == INDEX_URI:
            with self._guard:
                return self._printed_index()
        raise ToolRefused(f"there is no resource {named(uri)}")

    def prompt_text(self, path: str | None) -> str:
        """The instructions of ``rederive_stale_memory`` for ``path`` (or the first file to repair)."""
        report = self.refresh()
        if path is None:
            stale = repair_order(report.stale)
            if not stale:
                return "No derived memory file has changed sources: there is nothing to re-derive."
            path = stale[0].path
        return REDERIVE.format(path=safe_name(path), why=self._explain(self.candidates(path)).rstrip("\n"))

    # -- subscriptions ---------------------------------------------------------

    def subscribe(self, session: ServerSession, uri: str, wanted: bool) -> None:
        uris = self._sessions.setdefault(session, set())
        (uris.add if wanted else uris.discard)(uri)
        if not uris:
            del self._sessions[session]

    async def watch(self) -> None:
        """While a client is subscribed, tell it each time a resource changes, whichever call saw it."""
        while True:
            await anyio.sleep(POLL_SECONDS)
            if self._sessions or self.bus.listening:
                await self.look()
            with self._changes:
                changed, self._changed = sorted(self._changed), set()
            if changed and (self._sessions or self.bus.listening):
                await self._notify(changed)

    async def look(self) -> None:
        """Refresh in a worker thread; on a subscription, the state a later change is told against."""
        try:
            await anyio.to_thread.run_sync(self.refresh)
        except Exception as error:  # the folder may come back: the next look tries again
            log_warning(f"provgraph could not check the memory folder {self.root}: {one_line(error)}")

    async def _notify(self, uris: list[str]) -> None:
        for uri in uris:
            await self.bus.publish(ResourceUpdated(uri=uri))
            for session, wanted in list(self._sessions.items()):
                if uri in wanted:
                    try:
                        await session.send_resource_updated(uri)
                    except Exception:  # the client went away: it subscribes again if it comes back
                        self._sessions.pop(session, None)


class _CountedBus(InMemorySubscriptionBus):
    """The SDK's in-process bus, counting the streams that listen: the folder is looked at
    only while someone is there to hear of a change."""

    def __init__(self) -> None:
        super().__init__()
        self.listening: set[object] = set()

    def subscribe(self, listener: Callable[[ServerEvent], None]) -> Callable[[], None]:
        unsubscribe, token = super().subscribe(listener), object()
        self.listening.add(token)

        def once() -> None:
            self.listening.discard(token)
            unsubscribe()

        return once


def _bounded(text: str, more: str) -> str:
    """``text`` cut to ``LINEAGE_MAX_CHARS`` at a line, saying how to see the rest."""
    if len(text) <= LINEAGE_MAX_CHARS:
        return text
    shown = text[: LINEAGE_MAX_CHARS - MORE_RESERVE].rsplit("\n", 1)[0]
    return f"{shown}\n… cut at {LINEAGE_MAX_CHARS:,} characters; {more} for a shorter answer."


def _listing(listed: Callable[[], _Listed]) -> Callable[..., Awaitable[_Listed]]:
    """A ``*/list`` handler: all at once, on one page."""

    async def answer(ctx: _Context, params: types.PaginatedRequestParams | None) -> _Listed:
        return listed()

    return answer


async def _call_tool(ctx: _Context, params: types.CallToolRequestParams) -> types.CallToolResult:
    memory: MemoryServer = ctx.lifespan_context
    try:
        text = await anyio.to_thread.run_sync(memory.call, params.name, dict(params.arguments or {}))
    except (ProvgraphError, OSError) as error:  # a tool answers in words, marked as an error
        return types.CallToolResult(content=[types.TextContent(text=one_line(error))], is_error=True)
    return types.CallToolResult(content=[types.TextContent(text=text)])


async def _read_resource(ctx: _Context, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
    memory: MemoryServer = ctx.lifespan_context
    uri = str(params.uri)
    mime = next((resource.mime_type for resource in RESOURCES if resource.uri == uri), None)
    try:
        text = await anyio.to_thread.run_sync(memory.resource_text, uri)
    except (ProvgraphError, OSError) as error:
        raise _error(error) from None
    return types.ReadResourceResult(contents=[types.TextResourceContents(uri=uri, text=text, mime_type=mime)])


async def _subscribe(ctx: _Context, params: types.SubscribeRequestParams | types.UnsubscribeRequestParams) -> Any:
    """``resources/subscribe`` and ``unsubscribe``, of the clients before protocol 2026-07-28."""
    wanted = ctx.method == "resources/subscribe"
    if wanted:
        await ctx.lifespan_context.look()
    ctx.lifespan_context.subscribe(ctx.session, str(params.uri), wanted)
    return types.EmptyResult()


async def _listen(ctx: _Context, params: types.SubscriptionsListenRequestParams) -> types.SubscriptionsListenResult:
    await ctx.lifespan_context.look()
    return await ctx.lifespan_context.listen(ctx, params)


async def _get_prompt(ctx: _Context, params: types.GetPromptRequestParams) -> types.GetPromptResult:
    memory: MemoryServer = ctx.lifespan_context
    if params.name != PROMPT:
        raise _error(ToolRefused(f"there is no prompt {named(params.name)}"))
    path = (params.arguments or {}).get("path") or None
    try:
        text = await anyio.to_thread.run_sync(memory.prompt_text, path)
    except (ProvgraphError, OSError) as error:
        raise _error(error) from None
    message = types.PromptMessage(role="user", content=types.TextContent(text=text))
    return types.GetPromptResult(description=PROMPTS[0].description, messages=[message])


def build(memory: MemoryServer) -> Server[MemoryServer]:
    """The SDK server answering from ``memory`` (each handler's ``ctx.lifespan_context``), which
    watches the folder for its subscribers while the server runs."""

    @asynccontextmanager
    async def watching(server: Server[MemoryServer]) -> AsyncIterator[MemoryServer]:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(memory.watch)
            try:
                yield memory
            finally:
                tasks.cancel_scope.cancel()
                memory.close()

    return Server(
        NAME,
        version=VERSION,
        instructions=f"Memory lineage of {memory.root}: which memory files were derived from files that "
        f"changed afterwards. Read {STALE_URI}, or call `{LIST_TOOL}`, before relying on a derived memory; "
        f"call `{INDEX_TOOL}` when it says the memory index disagrees with the files.",
        lifespan=watching,
        on_list_tools=_listing(lambda: types.ListToolsResult(tools=list(TOOLS))),
        on_call_tool=_call_tool,
        on_list_resources=_listing(lambda: types.ListResourcesResult(resources=list(RESOURCES))),
        on_read_resource=_read_resource,
        on_subscribe_resource=_subscribe,
        on_unsubscribe_resource=_subscribe,
        on_subscriptions_listen=_listen,
        on_list_prompts=_listing(lambda: types.ListPromptsResult(prompts=list(PROMPTS))),
        on_get_prompt=_get_prompt,
    )


def _error(error: Exception) -> MCPError:
    """A protocol error with the one line of ``error``, for a request that is not a tool call."""
    return MCPError(types.INVALID_PARAMS, one_line(error))


def serve(memory: MemoryServer) -> None:
    """Answer one client over stdin and stdout until it closes them."""
    server = build(memory)

    async def run() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(run)


CONFIG = """\
# Claude Code, from a shell (add --scope user for every project):
{claude}

# Claude Code, shared with a project: .mcp.json at the project's root
{project}

# Claude Desktop: claude_desktop_config.json (Settings > Developer > Edit Config)
{servers}

# Cursor: .cursor/mcp.json in a project, or ~/.cursor/mcp.json for every project
{servers}
"""


def config_text(root: str, options: tuple[str, ...] = ()) -> str:
    """The snippets that add this server to Claude Code, Claude Desktop and Cursor, with the
    absolute command of this install (a client's ``PATH`` seldom holds its virtual environment)."""
    program = installed_program()
    entry = {"command": program[0], "args": [*program[1:], "mcp", root, *options]}
    return CONFIG.format(
        claude=" ".join(map(shlex.quote, ("claude", "mcp", "add", NAME, "--", *program, "mcp", root, *options))),
        project=json.dumps({"mcpServers": {NAME: {"type": "stdio", **entry}}}, indent=2),
        servers=json.dumps({"mcpServers": {NAME: entry}}, indent=2),
    )
