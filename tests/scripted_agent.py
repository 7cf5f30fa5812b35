"""The AgentScope side of the AgentScope tests: every class they derive from AgentScope's,
and the helpers that drive a real ``Agent`` with a scripted model (no network).

Importing this module imports AgentScope, which takes seconds.  The test files import it
from a fixture, when their first test runs, not when they are collected: every parallel
worker of the run collects every test file, and only the workers that run these tests
should pay for AgentScope.

- ``ScriptedModel`` replays one response per agent model call and records the system
  prompt of each; ``ImmediateModel`` answers at once, never waiting on the event loop;
  ``ThinkingModel`` takes a while, as a real model does.
- ``DictBackend`` is a sandbox-like backend held in a dict; ``InstantLocalBackend`` the
  local disk answered without leaving the event loop; ``Workspace`` a ``SandboxBackend``
  whose ``/workspace`` is a local folder.
- ``RetrievalWaitingTool`` is a tool during which the memory retrieval finishes;
  ``ScriptedReMe`` is AgentScope's ReMe middleware with its search scripted.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import posixpath
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace

from agentscope.agent import Agent, InjectionConfig
from agentscope.credential import CredentialBase
from agentscope.formatter import OpenAIChatFormatter
from agentscope.message import HintBlock, TextBlock, ToolCallBlock, ToolResultBlock, UserMsg
from agentscope.middleware import AgenticMemoryMiddleware, ReMeMiddleware
from agentscope.model import ChatModelBase, ChatResponse, StructuredResponse
from agentscope.permission import PermissionBehavior, PermissionContext, PermissionDecision, PermissionMode
from agentscope.state import AgentState
from agentscope.tool import BackendBase, Edit, ExecResult, Read, ToolBase, ToolChunk, Toolkit, Write
from sandbox_backend import MOUNT, SandboxBackend
from test_agentscope import BASE_PROMPT, FILES, OLD

from provgraph.integrations.agentscope import LINEAGE_TOOL, ProvenanceMiddleware

WORKDIR = MOUNT
"""Where a ``Workspace`` sandbox sees its folder."""

# -- a scripted model ------------------------------------------------------------


class ScriptedModel(ChatModelBase):
    """Replays one response per agent model call and records the system prompt of each.

    It also answers the memory middleware's retrieval call (a structured
    output naming the relevant files) with ``selected``.  Before answering
    the agent it waits until every other task of the event loop is done: the
    retrieval started with the reply then always finishes during the first
    model call, as it does behind a real model's latency.
    """

    def __init__(self, script: Sequence[ChatResponse] = (), selected: Sequence[str] = ()) -> None:
        super().__init__(
            credential=CredentialBase(),
            model="scripted",
            parameters=ChatModelBase.Parameters(),
            stream=False,
            max_retries=0,
        )
        self.formatter = OpenAIChatFormatter()
        self.script = list(script)
        self.system_prompts: list[str] = []
        self.inputs: list[list] = []
        self.tool_names: list[list[str]] = []
        self.selected = list(selected)
        self.retrievals = 0

    async def _call_api(self, model_name, messages, tools=None, tool_choice=None, **kwargs):
        names = [tool["function"]["name"] for tool in tools or []]
        if names == ["generate_structured_output"]:
            self.retrievals += 1
            return tool_call("generate_structured_output", selected_files=self.selected)
        others = asyncio.all_tasks() - {asyncio.current_task()}
        if others:
            await asyncio.wait(others)
        self.system_prompts.append(messages[0].get_text_content())
        self.inputs.append(copy.deepcopy(messages))
        self.tool_names.append(names)
        if self.script:
            return self.script.pop(0)
        return ChatResponse(content=[TextBlock(text="Done.")], is_last=True)


# -- driving an agent -----------------------------------------------------------


def tool_call(name: str, **arguments: object) -> ChatResponse:
    return ChatResponse(
        content=[ToolCallBlock(id=f"call-{name}", name=name, input=json.dumps(arguments))], is_last=True
    )


async def ask(
    middlewares: list, tools: Sequence = (), script: Sequence[ChatResponse] = (), selected: Sequence[str] = ()
) -> ScriptedModel:
    """One reply of a real Agent; returns the model with what it received."""
    model = ScriptedModel(script, selected)
    agent = Agent(
        name="assistant",
        system_prompt=BASE_PROMPT,
        model=model,
        toolkit=Toolkit(tools=list(tools)),
        middlewares=middlewares,
        injection_config=InjectionConfig(inject_runtime_state=False),
    )
    await agent.reply(UserMsg(name="user", content="Where does the user live?"))
    return model


async def reply(
    middlewares: list,
    calls: Sequence,
    extra_tools: Sequence = (),
    selected: Sequence[str] = (),
    backend: BackendBase | None = None,
):
    """One reply in which the model makes ``calls`` one after the other; returns the model."""
    script = [tool_call(name, **arguments) for name, arguments in calls]
    for number, response in enumerate(script):
        response.content[0].id = f"call-{number}"
    model = ScriptedModel(script, selected)
    agent = Agent(
        name="assistant",
        system_prompt=BASE_PROMPT,
        model=model,
        toolkit=Toolkit(tools=[Read(backend=backend), Write(backend=backend), Edit(backend=backend), *extra_tools]),
        middlewares=middlewares,
        state=AgentState(permission_context=PermissionContext(mode=PermissionMode.BYPASS)),
        injection_config=InjectionConfig(inject_runtime_state=False),
    )
    await agent.reply(UserMsg(name="user", content="Keep my memory up to date."))
    return model


def tool_results(model: ScriptedModel, call: int) -> list[str]:
    texts = []
    for message in model.inputs[call]:
        for block in message.content:
            if isinstance(block, ToolResultBlock):
                texts += [part.text for part in block.output if isinstance(part, TextBlock)]
    return texts


def memory_middleware(workdir: Path | str, backend: BackendBase | None = None, **parameters) -> AgenticMemoryMiddleware:
    options = AgenticMemoryMiddleware.Parameters(**{"retrieval_async": False, **parameters})
    return AgenticMemoryMiddleware(workdir=str(workdir), backend=backend, parameters=options)


def lineage(provenance: ProvenanceMiddleware, path: str) -> str:
    """The lineage tool's answer, called as the agent's toolkit calls it."""
    [tool] = [tool for tool in asyncio.run(provenance.list_tools()) if tool.name == LINEAGE_TOOL]
    chunk = asyncio.run(tool.call(path=path))
    [text] = [block.text for block in chunk.content]
    return text


def hints(model: ScriptedModel, call: int) -> list[str]:
    """The text hints the model received in one call."""
    return [
        block.hint
        for message in model.inputs[call]
        for block in message.content
        if isinstance(block, HintBlock) and isinstance(block.hint, str)
    ]


def retrieved(middlewares: list, tools: Sequence, selected: Sequence[str]) -> ScriptedModel:
    """A reply with retrieval on, and a tool call so that the model is called twice.

    The retrieved files reach the model at the latest in the second call: the
    memory middleware adds them once its retrieval has finished, at the start
    of a model call, and the scripted model lets it finish during the first.
    """
    script = [tool_call(LINEAGE_TOOL, path="user-facts.md")]
    return asyncio.run(ask(middlewares, tools=tools, script=script, selected=selected))


# -- backends --------------------------------------------------------------------


class DictBackend(BackendBase):
    """A sandbox-like backend held in a dict, with no shell and no local paths.

    ``listing`` chooses how ``list_dir(recursive=True)`` names entries, as real
    backends differ: absolute paths, paths relative to the listed folder, or
    relative paths with the folders listed too.  ``failing`` makes every
    read fail as a lost connection does; ``listing_fails`` makes the
    recursive listing come back empty, as AgentScope's ``list_dir`` answers
    a failed listing (``"twice"``: the plain listing too); reading a path in ``hanging_paths`` never returns.
    """

    def __init__(self, listing: str = "absolute") -> None:
        self.files: dict[str, tuple[bytes, float]] = {}
        self.listing = listing
        self.failing = False
        self.listing_fails: bool | str = False
        self.hanging_paths: set[str] = set()

    def put(self, path: str, text: str, when: datetime) -> None:
        self.files[posixpath.normpath(path)] = (text.encode(), when.timestamp())

    async def exec_shell(self, command, *, cwd=None, timeout=None):
        return ExecResult(exit_code=127, stdout=b"", stderr=b"no shell")

    async def read_file(self, path: str) -> bytes:
        if self.failing:
            raise ConnectionError("sandbox unreachable")
        if path in self.hanging_paths:
            await asyncio.Event().wait()
        try:
            return self.files[posixpath.normpath(path)][0]
        except KeyError:
            raise FileNotFoundError(path) from None

    async def write_file(self, path: str, data: bytes) -> None:
        self.files[posixpath.normpath(path)] = (bytes(data), datetime.now().timestamp())

    async def file_exists(self, path: str) -> bool:
        return posixpath.normpath(path) in self.files or await self.is_dir(path)

    async def is_dir(self, path: str) -> bool:
        prefix = posixpath.normpath(path) + "/"
        return any(key.startswith(prefix) for key in self.files)

    async def list_dir(self, path: str, *, recursive: bool = False) -> list[str]:
        prefix = posixpath.normpath(path) + "/"
        keys = sorted(key for key in self.files if key.startswith(prefix))
        if not recursive:
            return [] if self.listing_fails == "twice" else sorted({key[len(prefix) :].split("/")[0] for key in keys})
        if self.listing_fails:
            return []
        if self.listing == "absolute":
            return keys
        relative = [key[len(prefix) :] for key in keys]
        if self.listing == "with-folders":
            relative += sorted({posixpath.dirname(key) for key in relative if "/" in key})
        return relative

    async def stat_mtime(self, path: str) -> float | None:
        entry = self.files.get(posixpath.normpath(path))
        return entry[1] if entry else None


def remote_workdir(listing: str = "absolute") -> DictBackend:
    backend = DictBackend(listing)
    for relative, text in FILES.items():
        backend.put(f"/sandbox/work/Memory/{relative}", text, OLD)
    return backend


# -- what the host agent's tests use ----------------------------------------------


class ImmediateModel(ScriptedModel):
    """Answers at once, the retrieval's file selection included, and never waits on the event loop."""

    async def _call_api(self, model_name, messages, tools=None, tool_choice=None, **kwargs):
        self.system_prompts.append(messages[0].get_text_content())
        return self.script.pop(0) if self.script else ChatResponse(content=[TextBlock(text="Done.")], is_last=True)

    async def _call_api_with_structured_output(self, model_name, messages, structured_model, **kwargs):
        self.retrievals += 1
        return StructuredResponse(content={"selected_files": self.selected})


class ThinkingModel(ImmediateModel):
    """Answers after ``latency`` seconds, as a real model does, and records when each call began and ended."""

    def __init__(self, script: Sequence[ChatResponse], latency: float) -> None:
        super().__init__(script)
        self.latency = latency
        self.calls: list[tuple[float, float]] = []

    async def _call_api(self, model_name, messages, tools=None, tool_choice=None, **kwargs):
        began = time.monotonic()
        await asyncio.sleep(self.latency)
        response = await super()._call_api(model_name, messages, tools, tool_choice, **kwargs)
        self.calls.append((began, time.monotonic()))
        return response


class InstantLocalBackend(BackendBase):
    """The local disk, each call answered without leaving the event loop: the host agent becomes deterministic."""

    async def exec_shell(self, command, *, cwd=None, timeout=None) -> ExecResult:
        return ExecResult(exit_code=127, stdout=b"", stderr=b"no shell")

    async def read_file(self, path: str) -> bytes:
        return Path(path).read_bytes()

    async def write_file(self, path: str, data: bytes) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_bytes(data)

    async def file_exists(self, path: str) -> bool:
        return os.path.exists(path)

    async def is_dir(self, path: str) -> bool:
        return os.path.isdir(path)

    async def list_dir(self, path: str, *, recursive: bool = False) -> list[str]:
        if not recursive:
            return sorted(os.listdir(path))
        return sorted(str(found) for found in Path(path).rglob("*") if found.is_file())

    async def stat_mtime(self, path: str) -> float | None:
        return os.stat(path).st_mtime if os.path.exists(path) else None


class RetrievalWaitingTool(ToolBase):
    """A tool during which the memory middleware's retrieval finishes, as behind any real tool's latency.

    It waits for that retrieval by the memory middleware's own task, so the
    step at which the hint lands depends only on what yields before the
    tool: in the host agent alone, nothing does.  Its call makes the agent
    reason a second time.
    """

    name = "wait_for_retrieval"
    description = "Returns once the memory retrieval has finished."
    input_schema = {"type": "object", "properties": {}}
    is_concurrency_safe = True
    is_read_only = True
    is_external_tool = False
    is_mcp = False

    def __init__(self, memory: AgenticMemoryMiddleware) -> None:
        self.memory = memory

    async def check_permissions(self, tool_input, context) -> PermissionDecision:
        return PermissionDecision(behavior=PermissionBehavior.ALLOW, message="always allowed")

    async def __call__(self, **kwargs) -> ToolChunk:
        retrieval = self.memory._retrieval_task
        if retrieval is not None:
            await asyncio.wait({retrieval})
        return ToolChunk(content=[TextBlock(text="tool result")])


class ScriptedReMe(ReMeMiddleware):
    """AgentScope's ReMe middleware with its embedded ReMe app scripted: a search returns ``chunks``."""

    def __init__(self, chunks: list[dict]) -> None:
        super().__init__(workspace_dir="unused", parameters=ReMeMiddleware.Parameters(mode="static_control"))
        self.chunks = chunks

    async def _run_job(self, name: str, **kwargs):
        return SimpleNamespace(success=True, answer="", metadata={"results": self.chunks} if name == "search" else {})


class Workspace(SandboxBackend):
    """A sandbox whose ``/workspace`` is the folder ``host``; its writes can be made to fail
    (``answer_lost``: the next write lands, but its answer never comes back), and a coroutine
    can run just before the next temporary file is written."""

    def __init__(self, host: Path) -> None:
        super().__init__(host=str(host))
        self.failing_writes = False
        self.before_temporary_write = None
        self.answer_lost = False

    async def write_file(self, path: str, data: bytes) -> None:
        if self.failing_writes:
            self.calls += 1
            raise ConnectionError("sandbox unreachable")
        hook, self.before_temporary_write = self.before_temporary_write, None
        if hook is not None and path.endswith(".tmp"):
            await hook()
        await super().write_file(path, data)
        if self.answer_lost:
            self.answer_lost = False
            raise ConnectionError("connection lost")
