"""The lineage forms under stress: wiki links resolve against the files that exist now,
so a scan that reuses cached declarations, and the no-change path, must answer as a scan
from scratch does; a hostile body is read in one pass."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from depth import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from scratch import scratch_folder

from provgraph import Memory
from provgraph.declarations import FRONTMATTER_LIMIT, read_declaration

from .helpers import NOW, OldFiles, watchdog

DIGEST = "# Digest\n\nSee [[b]] too.\n\n## Sources\n\n- [[a]]\n- [The plan](plan.md)\n\n## Notes\n\n- [[b]]\n"


def test_switching_the_sources_heading_reads_the_files_again(memory) -> None:
    memory.write("a.md", "A")
    memory.write("digest.md", DIGEST.replace("plan.md", "a.md"))
    files = OldFiles(memory.root)
    state = memory.root.parent / "state"
    assert Memory(memory.root, state=state, files=files).refresh(now=NOW).derived == ()
    with_heading = Memory(memory.root, state=state, files=files, sources_heading="## Sources")
    assert with_heading.refresh(now=NOW).derived == ("digest.md",)
    assert Memory(memory.root, state=state, files=files).refresh(now=NOW).derived == ("digest.md",)  # the lock's
    lock = state / "provgraph.lock"
    lock.write_text("".join(line for line in lock.read_text().splitlines(True) if not line.startswith("# options:")))
    assert Memory(memory.root, state=state, files=files).refresh(now=NOW).derived == ()


# -- the cache re-resolves wiki links against the current listing --------------------------------

POOL = ["facts.md", "x/facts.md", "y/facts.md", "x/Facts.md", "plan.md"]
DECLARING = {
    "profile.md": "derived_from: [[facts]], [[plan]]",
    "notes/digest.md": "derived_from: facts, [[x/facts]]",
}

_EDIT = st.one_of(
    st.tuples(st.just("create"), st.sampled_from(POOL)),
    st.tuples(st.just("delete"), st.sampled_from(POOL)),
    st.tuples(st.just("touch-declaring"), st.sampled_from(sorted(DECLARING))),
)


@settings(deadline=None, max_examples=examples(60))
@given(edits=st.lists(_EDIT, min_size=1, max_size=10))
def test_wiki_links_and_hints_follow_the_files_that_exist_like_a_scan_from_scratch(edits: list[tuple]) -> None:
    """A state that reuses cached declarations (and the no-change path) and one that
    reads everything go through the same creations and deletions of link targets:
    resolution and hints must agree at every step."""
    with scratch_folder() as temporary:
        root = Path(temporary) / "memory"
        root.mkdir()
        lengths: dict[str, int] = {}

        def put(path: str, text: str) -> None:
            lengths[path] = max(len(text), lengths.get(path, -1) + 1)
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_text(text + " " * (lengths[path] - len(text)))

        for path, line in DECLARING.items():
            put(path, f"---\n{line}\n---\n")
        cached = Memory(root, state=Path(temporary) / "cached.json", files=OldFiles(root))
        replay = Memory(root, state=Path(temporary) / "replay.json", files=OldFiles(root, trusts_stat=False))
        for step, (kind, path) in enumerate(edits):
            if kind == "create":
                put(path, f"content of {path}")
            elif kind == "delete":
                (root / path).unlink(missing_ok=True)
            else:
                put(path, f"---\n{DECLARING[path]}\n---\n")
            now = NOW + timedelta(hours=step)
            first, second = cached.refresh(now=now), replay.refresh(now=now)
            assert first == second, (step, kind, path)
            assert cached.refresh(now=now) == first


BODIES = {
    "links": b"## Sources\n" + b"[a](" * 16_000,
    "wiki": b"## Sources\n" + b"[[a" * 21_000,
    "inline-brackets": b"derived_from:: " + b"([<" * 21_000,
    "inline-wiki": b"derived_from:: " + b"[[a]" * 16_000,
    "nested-fields": b"x " + b"[derived_from:: " * 4_000,
    "open-fields": b"x " + b"[derived_from:: [[" * 3_600,
    "headings": b"## Sources\n" + b"# x\n## Sources\n" * 4_000,
    "fences": b"## Sources\n" + b"```\n" * 16_000,
}


def test_pathological_bodies_are_read_in_one_pass() -> None:
    """As for the frontmatter: a body search that rescans would take minutes here."""
    with watchdog(30):
        for content in BODIES.values():
            declaration = read_declaration(content[:FRONTMATTER_LIMIT], False, "## Sources")
            assert all(isinstance(entry, str) for entry in declaration.entries)
