"""Appending the middleware changes nothing the host agent does, and one note per hint whatever the concurrency,
whether it reads the folder directly or through a sandbox.

The model here answers at once, as AgentScope's own mock model does: the
memory middleware's retrieval (started with the reply) then finishes only
when something yields to the event loop, and the step at which its hint
lands shows whether the middleware did.  So that the host agent alone
always behaves the same, its memory middleware reads the folder through
``InstantLocalBackend``, which answers each call at once instead of in a
worker thread; the middleware under test reads the same folder as usual.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from extras import needs
from test_agentscope import EDITED, FILES, MOVED, OLD, adopt, write

pytestmark = needs("agentscope")


@pytest.fixture(autouse=True, scope="module")
def agentscope_loaded() -> None:
    """Imported when this file's first test runs, not when it is collected (``extras.py``)."""
    global Agent, HintBlock, ImmediateModel, InjectionConfig, InstantLocalBackend, memory_middleware
    global ProvenanceMiddleware, RetrievalWaitingTool, SandboxBackend, tool_call, Toolkit, UserMsg
    from agentscope.agent import Agent, InjectionConfig
    from agentscope.message import HintBlock, UserMsg
    from agentscope.tool import Toolkit
    from sandbox_backend import SandboxBackend
    from scripted_agent import ImmediateModel, InstantLocalBackend, RetrievalWaitingTool, memory_middleware, tool_call

    from provgraph.integrations.agentscope import ProvenanceMiddleware


RUNS = 50
NOTE = "Note: profile.md: source(s) changed since derived (2026-11-18): user-facts.md changed"


def context_shape(agent: Agent) -> list[tuple[str, list[str]]]:
    """Each message of the context as its role and the kinds of its blocks, in order."""
    return [(message.role, [block.type for block in message.content]) for message in agent.state.context]


async def one_reply(middlewares: list, steps: int = 2) -> Agent:
    """One reply that reasons ``steps`` times (a tool call before each but the last)."""
    model = ImmediateModel(script=[tool_call(RetrievalWaitingTool.name)] * (steps - 1), selected=["profile.md"])
    agent = Agent(
        name="assistant",
        system_prompt="You are helpful.",
        model=model,
        toolkit=Toolkit(tools=[RetrievalWaitingTool(middlewares[0])]),
        middlewares=middlewares,
        injection_config=InjectionConfig(inject_runtime_state=False),
    )
    await agent.reply(UserMsg(name="user", content="what do you remember?"))
    return agent


def hint_texts(agent: Agent) -> list[str]:
    return [block.hint for message in agent.state.context for block in message.content if isinstance(block, HintBlock)]


@pytest.fixture
def stale_workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A workdir whose profile is stale for a middleware that adopted it first."""
    for relative, text in FILES.items():
        write(tmp_path / "work" / "Memory", relative, text, OLD)
    asyncio.run(adopt(ProvenanceMiddleware(workdir=str(tmp_path / "work")), monkeypatch))
    write(tmp_path / "work" / "Memory", "user-facts.md", MOVED, EDITED)
    return tmp_path / "work"


def watching(through: str, stale_workdir: Path, tmp_path: Path) -> ProvenanceMiddleware:
    """A middleware reading the folder directly or through a sandbox, for which the profile is stale."""
    backend = SandboxBackend() if through == "sandbox" else None
    options = {"state": tmp_path / "sandbox-state.json"} if backend else {}
    provenance = ProvenanceMiddleware(workdir=str(stale_workdir), backend=backend, **options)
    if backend is not None:
        write(stale_workdir / "Memory", "user-facts.md", FILES["user-facts.md"], OLD)
        asyncio.run(provenance.on_system_prompt(None, ""))  # adopted before the edit, as the local one was
        write(stale_workdir / "Memory", "user-facts.md", MOVED, EDITED)
    return provenance


@pytest.mark.parametrize("through", ["local", "sandbox"])
def test_appending_the_middleware_does_not_move_the_retrieval_hint(
    through: str, stale_workdir: Path, tmp_path: Path
) -> None:
    provenance = watching(through, stale_workdir, tmp_path)

    async def runs() -> tuple[list, list, list[list[str]]]:
        alone, both, notes = [], [], []
        for _ in range(RUNS):
            instant = InstantLocalBackend()
            without = await one_reply([memory_middleware(stale_workdir, instant, retrieval_async=True)])
            with_it = await one_reply([memory_middleware(stale_workdir, instant, retrieval_async=True), provenance])
            alone.append(context_shape(without))
            both.append(context_shape(with_it))
            notes.append([hint for hint in hint_texts(with_it) if hint.endswith(NOTE)])
        return alone, both, notes

    alone, both, notes = asyncio.run(runs())

    assert alone[0] == [("user", ["text"]), ("assistant", ["tool_call", "tool_result", "hint", "text"])]
    assert both == alone
    assert all(len(found) == 1 for found in notes)


@pytest.mark.parametrize("through", ["local", "sandbox"])
def test_one_middleware_shared_by_concurrent_agents_adds_one_note_per_hint(
    through: str, stale_workdir: Path, tmp_path: Path
) -> None:
    provenance = watching(through, stale_workdir, tmp_path)
    backend = provenance.backend if through == "sandbox" else None

    async def together() -> list[Agent]:
        replies = []
        for _ in range(6):
            memory = memory_middleware(stale_workdir, backend, retrieval_async=True)
            replies.append(one_reply([memory, provenance], steps=4))
        return await asyncio.gather(*replies)

    agents = asyncio.run(together())

    for agent in agents:
        [hint] = hint_texts(agent)
        assert hint.count("Note: profile.md: ") == 1
