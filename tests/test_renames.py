"""Rename hints: a missing source whose stamped content now lives in another memory file."""

from __future__ import annotations

import json

from provgraph import EdgeStatus
from provgraph.render import prompt_block


def test_a_renamed_source_is_missing_with_a_hint_to_where_its_content_went(memory, clock) -> None:
    memory.write("facts.md", "Lives in Lyon.")
    memory.write("profile.md", "Profile", derived_from="facts.md")
    memory.write("digest.md", "Digest", derived_from="profile.md")
    mem = memory.open()
    mem.refresh(now=clock.now)

    memory.path("notes").mkdir()
    memory.path("facts.md").rename(memory.path("notes/facts.md"))
    report = mem.refresh(now=clock.advance(days=1))

    profile, digest = report.entry("profile.md"), report.entry("digest.md")
    assert profile is not None and digest is not None
    (cause,) = profile.causes
    assert (cause.source, cause.kind, cause.moved_to) == ("facts.md", EdgeStatus.MISSING, "notes/facts.md")
    assert digest.causes[0].moved_to == "notes/facts.md"
    block = prompt_block(report)
    assert "facts.md missing (its stamped content is now at notes/facts.md)" in block
    assert "via profile.md <- facts.md (missing; its stamped content is now at notes/facts.md)" in block


def test_no_hint_when_the_content_changed_too_or_the_file_is_gone(memory, clock) -> None:
    memory.write("facts.md", "Lives in Lyon.")
    memory.write("other.md", "Unrelated.")
    memory.write("profile.md", "Profile", derived_from="facts.md, other.md")
    mem = memory.open()
    mem.refresh(now=clock.now)

    memory.write("moved/facts.md", "Lives in Paris.")  # renamed and edited: not the stamped content
    memory.path("facts.md").unlink()
    memory.path("other.md").unlink()
    report = mem.refresh(now=clock.advance(days=1))
    entry = report.entry("profile.md")
    assert entry is not None
    assert [(c.source, c.kind, c.moved_to) for c in entry.causes] == [
        ("facts.md", EdgeStatus.MISSING, None),
        ("other.md", EdgeStatus.MISSING, None),
    ]


def test_the_hint_reaches_status_json_and_why_and_is_never_applied(memory, clock, run) -> None:
    memory.write("MEMORY.md", "# index")
    memory.write("facts.md", "Lives in Lyon.")
    memory.write("profile.md", "Profile", derived_from="facts.md")
    before = memory.path("profile.md").read_bytes()
    code, _, _ = run("status", str(memory.root), cwd=memory.root, now=clock.now)
    assert code == 0
    memory.path("facts.md").rename(memory.path("user-facts.md"))

    code, out, _ = run("status", "--json", str(memory.root), cwd=memory.root, now=clock.advance(days=1))
    assert code == 0
    (entry,) = json.loads(out)["stale"]
    assert entry["causes"] == [
        {
            "source": "facts.md",
            "kind": "missing",
            "changed_on": clock.day,
            "via": "facts.md",
            "depth": 1,
            "moved_to": "user-facts.md",
        }
    ]
    code, out, _ = run("why", str(memory.path("profile.md")), cwd=memory.root, now=clock.now)
    assert code == 0
    assert "its stamped content is now at user-facts.md" in out
    # the hint is kept in the saved result, which an unchanged folder is answered from
    code, out, _ = run("status", "--json", str(memory.root), cwd=memory.root, now=clock.now)
    assert json.loads(out)["stale"][0]["causes"][0]["moved_to"] == "user-facts.md"
    assert memory.path("profile.md").read_bytes() == before
    assert not memory.path("facts.md").exists()
