"""The documented wiring for AgentScope's agent service (docs/agentscope.md), run as written.

The service calls the factory once per chat turn with the session's
workspace, appends what it returns to its own middlewares, and collects
every middleware's tools into the agent's toolkit.  The test does the same
with a real ``LocalWorkspace`` and a real ``Agent``, and checks that
``create_app`` takes the factory.
"""

from __future__ import annotations

import asyncio
import re
import tempfile
from pathlib import Path

import pytest
from extras import needs
from test_agentscope import EDITED, FILES, MARKER, MOVED, OLD, adopt, write

pytestmark = needs("agentscope")


@pytest.fixture(autouse=True, scope="module")
def agentscope_loaded() -> None:
    """Imported when this file's first test runs, not when it is collected (``extras.py``)."""
    global Agent, AgenticMemoryMiddleware, InjectionConfig, LINEAGE_TOOL, LIST_TOOL, LocalWorkspace
    global ProvenanceMiddleware, RECORD_TOOL, ScriptedModel, tool_call, Toolkit, UserMsg
    from agentscope.agent import Agent, InjectionConfig
    from agentscope.message import UserMsg
    from agentscope.middleware import AgenticMemoryMiddleware
    from agentscope.tool import Toolkit
    from agentscope.workspace import LocalWorkspace
    from scripted_agent import ScriptedModel, tool_call

    from provgraph.integrations.agentscope import LINEAGE_TOOL, LIST_TOOL, RECORD_TOOL, ProvenanceMiddleware


PAGE = Path(__file__).resolve().parent.parent / "docs" / "agentscope.md"


def service_snippet() -> dict:
    """The Python block of the "In AgentScope's agent service" section, executed."""
    text = PAGE.read_text(encoding="utf-8")
    section = text[text.index("## In AgentScope's agent service") :]
    [code] = re.findall(r"```python\n(.*?)```", section, re.S)[:1]
    namespace: dict = {}
    exec(compile(code, "docs/agentscope.md", "exec"), namespace)
    return namespace


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

    snippet = service_snippet()
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
