"""Claude Code: a SessionStart hook that adds the block to the session's context.

Claude Code keeps its auto memory as ``MEMORY.md`` plus topic files with the
same frontmatter; ``provgraph hook claude-code ROOT`` prints the hook's JSON
when something there is stale, and nothing at all otherwise.
"""

from __future__ import annotations

import orjson

from ..model import Report
from ..render import prompt_block

__all__ = ["session_start_output"]


def session_start_output(report: Report, *, max_lines: int = 20) -> str:
    """The hook's stdout: ``hookSpecificOutput.additionalContext``, or "" when nothing is stale."""
    hint = f"run `provgraph status {report.root}` to list them all"
    advice = f"After re-deriving one, record it with `provgraph stamp --root {report.root} FILE`."
    block = prompt_block(report, max_lines=max_lines, advice=advice, more_hint=hint)
    if not block:
        return ""
    payload = {"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": block}}
    return orjson.dumps(payload).decode() + "\n"
