"""The documented wiring for AgentScope's agent service (docs/agentscope.md), run as written:
the very code the sandbox benchmark measures (``tests.bench.sandbox.service_wiring``).

The service calls the factory once per chat turn with the session's
workspace, appends what it returns to its own middlewares, and collects
every middleware's tools into the agent's toolkit.  The test does the same
with a real ``LocalWorkspace`` and a real ``Agent``, and checks that
``create_app`` takes the factory.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import pytest
from extras import needs
from test_agentscope import EDITED, FILES, MARKER, MOVED, OLD, adopt, write
from test_agentscope_sandbox import a_year_later  # noqa: F401 (a fixture)

from tests.bench.sandbox import service_wiring

pytestmark = needs("agentscope")


@pytest.fixture(autouse=True, scope="module")
def agentscope_loaded() -> None:
    """Imported when this file's first test runs, not when it is collected (``extras.py``)."""
    global Agent, AgenticMemoryMiddleware, InjectionConfig, LINEAGE_TOOL, LIST_TOOL, LocalWorkspace
    global ProvenanceMiddleware, RECORD_TOOL, SandboxWorkspace, ScriptedModel, tool_call, Toolkit, UserMsg
    from agentscope.agent import Agent, InjectionConfig
    from agentscope.message import UserMsg
    from agentscope.middleware import AgenticMemoryMiddleware
    from agentscope.tool import Toolkit
    from agentscope.workspace import LocalWorkspace
    from sandbox_backend import SandboxWorkspace
    from scripted_agent import ScriptedModel, tool_call

    from provgraph.integrations.agentscope import LINEAGE_TOOL, LIST_TOOL, RECORD_TOOL, ProvenanceMiddleware


async def one_turn(factory, workspace: LocalWorkspace, script: list) -> ScriptedModel:
    """One chat turn assembled as the service assembles it: the factory's middlewares and their tools."""
    middlewares = await factory("user-1", "agent-1", "session-1", workspace)
    tools = [tool for middleware in middlewares for tool in await middleware.list_tools()]
    model = ScriptedModel(script)
    agent = Agent(
        name="assistant",
        system_prompt="You are helpful.",
        model=model,
        toolkit=Toolkit(tools=tools),
        middlewares=middlewares,
        injection_config=InjectionConfig(inject_runtime_state=False),
    )
    await agent.reply(UserMsg(name="user", content="Where does the user live?"))
    return model


def test_the_service_wiring_in_the_readme_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("agentscope.app", reason="the agent service needs agentscope[service] (the dev extra)")
    from agentscope.app.message_bus import InMemoryMessageBus
    from agentscope.app.workspace_manager import LocalWorkspaceManager

    snippet = service_wiring()
    factory = snippet["memory_middlewares"]
    workspace = LocalWorkspace(workdir=str(tmp_path / "workspace"))
    for relative, text in FILES.items():
        write(Path(workspace.workdir) / "Memory", relative, text, OLD)
    memory, provenance = asyncio.run(factory("user-1", "agent-1", "session-1", workspace))
    asyncio.run(adopt(provenance, monkeypatch))
    write(Path(workspace.workdir) / "Memory", "user-facts.md", MOVED, EDITED)

    model = asyncio.run(one_turn(factory, workspace, [tool_call(RECORD_TOOL, path="profile.md")]))
    app = snippet["build_app"](None, InMemoryMessageBus(), LocalWorkspaceManager(tempfile.mkdtemp(dir=tmp_path)))

    assert isinstance(memory, AgenticMemoryMiddleware) and isinstance(provenance, ProvenanceMiddleware)
    assert provenance.memory_path == str(Path(workspace.workdir) / "Memory")
    assert {RECORD_TOOL, LIST_TOOL, LINEAGE_TOOL} <= set(model.tool_names[0])
    assert MARKER in model.system_prompts[0].splitlines()
    assert MARKER not in model.system_prompts[1]  # recorded through the collected tool
    assert app.state.extra_agent_middlewares is factory


# -- sandboxed workspaces, all mounted at /workspace -------------------------------------


def sandboxed(tmp_path: Path, name: str) -> SandboxWorkspace:
    """A sandboxed workspace holding the profile, its sources and 100 more notes."""
    host = tmp_path / name
    for relative, text in FILES.items():
        write(host / "Memory", relative, text, OLD)
    for number in range(100):
        write(host / "Memory", f"notes/note-{number}.md", f"---\nname: note {number}\n---\nbody\n", OLD)
    return SandboxWorkspace(str(host), workspace_id=f"id-of-{name}")


@pytest.fixture
def wiring(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The service wiring's factory, with its default state folder in the test's folder."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return service_wiring()["memory_middlewares"]


def new_turn(factory, workspace: SandboxWorkspace) -> ProvenanceMiddleware:
    """The provenance middleware of a new chat turn, made as the service makes it."""
    return asyncio.run(factory("user-1", "agent-1", "session-1", workspace))[1]


def checked(provenance: ProvenanceMiddleware, workspace: SandboxWorkspace) -> tuple[str, int, int]:
    """A check, as a model call asks for it: its prompt, and the backend calls and bytes it took."""
    backend = workspace.get_backend()
    backend.calls = backend.bytes = 0
    prompt = asyncio.run(provenance.on_system_prompt(None, "prompt"))
    return prompt, backend.calls, backend.bytes


@pytest.mark.usefixtures("a_year_later")
def test_each_sandboxed_workspace_keeps_its_own_warm_cache_though_all_are_mounted_at_the_same_path(
    wiring, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    one, other = sandboxed(tmp_path, "one"), sandboxed(tmp_path, "other")
    write(tmp_path / "other" / "Memory", "user-facts.md", MOVED, EDITED)
    for workspace in (one, other):
        asyncio.run(adopt(new_turn(wiring, workspace), monkeypatch))
    write(tmp_path / "one" / "Memory", "user-facts.md", MOVED, EDITED)
    checked(new_turn(wiring, one), one)

    turns = [checked(new_turn(wiring, workspace), workspace) for workspace in (one, other, one, other)]

    assert [(MARKER in prompt, calls) for prompt, calls, _ in turns] == [(True, 1), (False, 1)] * 2
    assert new_turn(wiring, one).state_path != new_turn(wiring, other).state_path


@pytest.mark.usefixtures("a_year_later")
def test_a_new_turn_on_an_unchanged_workspace_costs_what_a_warm_check_costs(
    wiring, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workspace = sandboxed(tmp_path, "one")
    provenance = new_turn(wiring, workspace)
    asyncio.run(adopt(provenance, monkeypatch))
    _, warm_calls, warm_bytes = checked(provenance, workspace)

    prompt, calls, read = checked(new_turn(wiring, workspace), workspace)

    assert prompt == "prompt"
    assert warm_calls == calls == 1
    assert read <= 1.2 * warm_bytes
