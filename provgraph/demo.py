"""``provgraph demo``: in a temporary folder, a fact in an agent's memory changes and nobody
re-derives the profile and digest built on it; what provgraph then tells the agent and a person."""

from __future__ import annotations

import os
import tempfile
import textwrap
from datetime import datetime, timedelta
from pathlib import Path
from typing import NamedTuple, TextIO

from .api import Memory
from .render import explanation_text, prompt_block, status_text

__all__ = ["build_demo_memory", "run_demo"]

DAY_ONE = datetime(2026, 11, 10, 9, 0).astimezone()
A_WEEK_LATER = DAY_ONE + timedelta(days=7)

_FILES = {
    "MEMORY.md": """\
        # Memory index
        - [User facts](user-facts.md) - where the user lives and works
        - [Preferences](preferences.md) - how the user likes answers
        - [Current project](work/current-project.md) - what the user is building
        - [User profile](profile.md) - read this first when tailoring an answer
        - [Weekly digest](digest.md) - what happened this week
        """,
    "user-facts.md": """\
        ---
        name: User facts
        description: Stable facts the user told us
        type: user
        ---
        - Lives in Lyon, works remotely for a Berlin company.
        - Time zone: Europe/Paris.
        """,
    "preferences.md": """\
        ---
        name: Preferences
        description: How the user likes answers
        type: feedback
        ---
        - Short answers first, details on request.
        - Metric units.
        """,
    "work/current-project.md": """\
        ---
        name: Current project
        description: What the user is building
        type: project
        ---
        A CLI that syncs notes between laptops.
        """,
    "profile.md": """\
        ---
        name: User profile
        description: When you tailor an answer to the user, read this first.
        type: user
        derived_from: user-facts.md, preferences.md
        ---
        Remote engineer based in Lyon (Europe/Paris), likes short, metric answers.
        """,
    "digest.md": """\
        ---
        name: Weekly digest
        description: Summary of the user and their work this week
        type: project
        derived_from:
          - profile.md
          - work/current-project.md
        ---
        A Lyon-based remote engineer building a note-sync CLI.
        """,
}


def build_demo_memory(root: Path) -> None:
    """Write the demo's memory folder (day one) under ``root``."""
    for name, text in _FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(textwrap.dedent(text), encoding="utf-8")


def run_demo(out: TextIO) -> int:
    with tempfile.TemporaryDirectory(prefix="provgraph-demo-") as folder:
        root = Path(folder) / "Memory"
        build_demo_memory(root)
        memory, say = Memory(root), _Narrator(out)

        say.step(f"Day one ({DAY_ONE:%Y-%m-%d}). An agent's memory folder, {root}:")
        for path in sorted(root.rglob("*.md")):
            say.text(f"  {path.relative_to(root).as_posix()}")
        say.text("profile.md declares `derived_from: user-facts.md, preferences.md`;")
        say.text("digest.md is derived from profile.md and work/current-project.md.")
        say.command("provgraph status", status_text(memory.refresh(now=DAY_ONE)))

        facts = root / "user-facts.md"
        facts.write_text(facts.read_text().replace("Lives in Lyon", "Moved to Paris in November"), encoding="utf-8")
        edited = (A_WEEK_LATER - timedelta(hours=2)).timestamp()
        os.utime(facts, (edited, edited))
        say.step(f"A week later ({A_WEEK_LATER:%Y-%m-%d}) the user says they moved to Paris.")
        say.text("The agent updates user-facts.md, and nothing else.")
        report = memory.refresh(now=A_WEEK_LATER)
        say.command("provgraph status", status_text(report))
        say.command("provgraph why digest.md", explanation_text(memory.explain("digest.md", report)))
        say.step("What the agent finds at the end of its system prompt on its next model call:")
        say.command("provgraph prompt", prompt_block(report))

        say.step("The agent re-derives profile.md and digest.md, and records it:")
        for path in (root / "profile.md", root / "digest.md"):
            path.write_text(path.read_text().replace("Lyon", "Paris"), encoding="utf-8")
        report = memory.stamp(["profile.md", "digest.md"], now=A_WEEK_LATER)
        say.command("provgraph stamp profile.md digest.md", status_text(report))
        say.text("provgraph never edited, hid or deleted a memory file; the agent decided what to do.")
    return 0


class _Narrator(NamedTuple):
    out: TextIO

    def step(self, text: str) -> None:
        self.out.write(f"\n== {text}\n")

    def text(self, text: str) -> None:
        self.out.write(f"   {text}\n")

    def command(self, command: str, output: str) -> None:
        self.out.write(f"\n$ {command}\n" + (output or "(no output: nothing is stale)\n"))
