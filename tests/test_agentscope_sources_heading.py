"""``ProvenanceMiddleware(sources_heading=...)``: a digest that lists its sources
under a heading is marked stale through the real AgentScope middleware; and
``volatile_fields=``."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from extras import needs

pytestmark = needs("agentscope")


@pytest.fixture(autouse=True, scope="module")
def agentscope_loaded() -> None:
    """Imported when this file's first test runs, not when it is collected (``extras.py``)."""
    global ProvenanceMiddleware
    from provgraph.integrations.agentscope import ProvenanceMiddleware


DIGEST = "---\nname: digest\n---\n# Auth\n\nJWT rotation.\n\n## Sources\n\n- [[daily/2026-11-10]]\n"
MARKER = "- digest/auth.md: source(s) changed since derived (2026-11-18): daily/2026-11-10.md changed"


def _checked(provenance: ProvenanceMiddleware, monkeypatch: pytest.MonkeyPatch, now: str) -> str:
    monkeypatch.setenv("PROVGRAPH_NOW", now)
    return asyncio.run(provenance.on_system_prompt(None, "prompt"))


@pytest.mark.parametrize("heading", [None, "## Sources"])
def test_the_sources_heading_reaches_the_middlewares_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, heading: str | None
) -> None:
    folder = tmp_path / "Memory"
    (folder / "daily").mkdir(parents=True)
    (folder / "digest").mkdir()
    (folder / "daily/2026-11-10.md").write_text("Rotate keys every 30 days.\n")
    (folder / "digest/auth.md").write_text(DIGEST)
    provenance = ProvenanceMiddleware(workdir=str(tmp_path), sources_heading=heading)
    assert _checked(provenance, monkeypatch, "2026-11-10T09:00:00+00:00") == "prompt"

    (folder / "daily/2026-11-10.md").write_text("Rotate keys every 24 hours.\n")
    prompt = _checked(provenance, monkeypatch, "2026-11-18T09:00:00+00:00")
    if heading is None:
        assert prompt == "prompt"
    else:
        assert prompt.startswith("prompt\n\n") and MARKER in prompt.splitlines()


def test_the_volatile_fields_reach_the_middlewares_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``volatile_fields=`` as ``--volatile-field``: an edit of only such a field marks nothing."""
    folder = tmp_path / "Memory"
    folder.mkdir()
    (folder / "facts.md").write_text("---\nreviewed: 2026-11-01\n---\nRotate keys every 30 days.\n")
    (folder / "summary.md").write_text("---\nderived_from: facts.md\n---\nKeys rotate monthly.\n")
    provenance = ProvenanceMiddleware(workdir=str(tmp_path), volatile_fields=["reviewed"])
    assert _checked(provenance, monkeypatch, "2026-11-10T09:00:00+00:00") == "prompt"

    (folder / "facts.md").write_text("---\nreviewed: 2026-11-17\n---\nRotate keys every 30 days.\n")
    assert _checked(provenance, monkeypatch, "2026-11-17T09:00:00+00:00") == "prompt"
    (folder / "facts.md").write_text("---\nreviewed: 2026-11-18\n---\nRotate keys every 24 hours.\n")
    prompt = _checked(provenance, monkeypatch, "2026-11-18T09:00:00+00:00")
    assert "- summary.md: source(s) changed since derived (2026-11-18): facts.md changed" in prompt.splitlines()
