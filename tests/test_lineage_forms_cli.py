"""The lineage forms end to end: through ``provgraph status --json``, ``why`` and
``prompt``, through the API's settings, and against the cache and the no-change path."""

from __future__ import annotations

import json
import os
import re
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

from conftest import PROVGRAPH
from hypothesis import given
from hypothesis import strategies as st

from provgraph import Memory
from provgraph.declarations import FRONTMATTER_LIMIT
from provgraph.model import EdgeStatus, Report, StaleEntry
from provgraph.render import prompt_block, repair_order

LATER = "2024-03-09T12:00:00+00:00"
NOW = datetime(2026, 11, 20, 9, 30, tzinfo=UTC)


def status(run, root: Path, *options: str, now: str = "2024-03-02T12:00:00+00:00") -> dict:
    code, out, err = run("status", "--json", *options, cwd=root, now=now)
    assert (code, err) == (0, ""), err
    return json.loads(out)


def edges_of(document: dict) -> set[str]:
    return {problem["detail"] for problem in document["problems"]}


def sources(memory: Memory, derived: str) -> list[tuple[str, EdgeStatus]]:
    report = memory.refresh(now=NOW)
    return [(edge.source, edge.status) for edge in report.edges if edge.derived == derived]


def test_wiki_links_through_status_json(memory, run) -> None:
    memory.write("user-facts.md", "Lives in Lyon.")
    memory.write("work/current-project.md", "provgraph")
    memory.write("notes/prefs.md", "Short answers.")
    memory.write("profile.md", derived_from="[[user-facts]], [[work/current-project.md|the project]], [[prefs#Tone]]")
    memory.write("digest.md", derived_from=["[[profile]]"])
    first = status(run, memory.root)
    assert first["counts"] == {"files": 5, "derived": 2, "stale": 0, "cycles": 0, "problems": 0}

    memory.write("notes/prefs.md", "Long answers.")
    later = status(run, memory.root, now=LATER)
    assert [(entry["path"], entry["direct"]) for entry in later["stale"]] == [
        ("digest.md", False),
        ("profile.md", True),
    ]
    assert later["stale"][1]["causes"][0]["source"] == "notes/prefs.md"


def test_two_candidates_for_a_wiki_link_are_a_bad_entry_in_status_json(memory, run) -> None:
    memory.write("x/facts.md", "one")
    memory.write("y/facts.md", "two")
    memory.write("profile.md", derived_from="[[facts]]")
    (problem,) = status(run, memory.root)["problems"]
    assert problem["path"] == "profile.md" and problem["kind"] == "bad-entry"
    assert "x/facts.md" in problem["detail"] and "y/facts.md" in problem["detail"]


def test_metadata_and_inline_fields_through_status_json(memory, run) -> None:
    memory.write("a.md", "A")
    memory.write("b.md", "B")
    memory.write_bytes("nested.md", b"---\nname: x\nmetadata:\n  type: user\n  derived_from: a.md\n---\nBody\n")
    memory.write_bytes("inline.md", b"# Digest\n\nText.\n\nderived_from:: [[a]], [[b]]\n")
    memory.write_bytes("both.md", b"---\nderived_from: a.md\n---\nText.\nderived_from:: [[b]]\n")
    memory.write_bytes(
        "not-yaml.md", b"---\ndescription: Use it: always\nmetadata:\n  derived_from:\n    - [B](b.md)\n---\n"
    )
    status(run, memory.root)
    memory.write("b.md", "B changed")
    stale = {entry["path"] for entry in status(run, memory.root, now=LATER)["stale"]}
    assert stale == {"inline.md", "both.md", "not-yaml.md"}
    memory.write("a.md", "A changed")
    stale = {entry["path"] for entry in status(run, memory.root, now=LATER)["stale"]}
    assert stale == {"nested.md", "inline.md", "both.md", "not-yaml.md"}


def test_a_new_derived_at_under_metadata_re_stamps_through_the_cli(memory, run) -> None:
    memory.write("a.md", "A")
    memory.write("b.md", "B")
    block = "---\nmetadata:\n  type: user\n  derived_from: a.md\n  derived_at: 2024-03-01\n---\nBody\n"
    flow = "---\nmetadata: {type: user, derived_from: [b.md], derived_at: 2024-03-01}\n---\n"
    memory.write_bytes("nested.md", block.encode())
    memory.write_bytes("flow.md", flow.encode())
    memory.write_bytes("bold.md", b"# Digest\n\n**derived_from**:: [[a]]\n")
    status(run, memory.root)
    memory.write("a.md", "A changed")
    memory.write("b.md", "B changed")
    stale = status(run, memory.root, now=LATER)["stale"]
    assert [entry["path"] for entry in stale] == ["bold.md", "flow.md", "nested.md"]
    memory.write_bytes("nested.md", block.replace("2024-03-01", "2024-03-09").encode())
    memory.write_bytes("flow.md", flow.replace("2024-03-01", "2024-03-09").encode())
    assert [entry["path"] for entry in status(run, memory.root, now=LATER)["stale"]] == ["bold.md"]


def test_inline_fields_are_searched_in_the_first_64_kib_only(memory, run) -> None:
    memory.write("a.md", "A")
    filler = "x" * 70 + "\n"
    memory.write("early.md", "derived_from:: [[a]]\n" + filler * (FRONTMATTER_LIMIT // len(filler) + 10))
    memory.write("late.md", filler * (FRONTMATTER_LIMIT // len(filler) + 10) + "derived_from:: [[a]]\n")
    document = status(run, memory.root)
    assert document["counts"]["derived"] == 1
    memory.write("a.md", "A changed")
    assert [entry["path"] for entry in status(run, memory.root, now=LATER)["stale"]] == ["early.md"]


DIGEST = "# Digest\n\nSee [[b]] too.\n\n## Sources\n\n- [[a]]\n- [The plan](plan.md)\n\n## Notes\n\n- [[b]]\n"


def test_the_sources_heading_is_off_by_default_and_on_with_the_option(memory, run) -> None:
    for name in ("a.md", "b.md", "plan.md"):
        memory.write(name, name)
    memory.write("digest.md", DIGEST)
    assert status(run, memory.root)["counts"]["derived"] == 0
    on = status(run, memory.root, "--sources-heading")
    assert on["counts"]["derived"] == 1
    memory.write("plan.md", "changed")
    stale = status(run, memory.root, "--sources-heading", now=LATER)["stale"]
    assert [(entry["path"], entry["causes"][0]["source"]) for entry in stale] == [("digest.md", "plan.md")]
    assert status(run, memory.root, now=LATER)["stale"] == stale


def test_a_heading_that_is_not_a_heading_is_one_error_line(memory, run) -> None:
    code, out, err = run("status", "--sources-heading", "memory", cwd=memory.root)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "--sources-heading" in err


def test_the_folders_own_absolute_path_in_an_entry_means_the_file(memory, run) -> None:
    memory.write("facts.md", "Lives in Lyon.")
    memory.write("profile.md", derived_from=f"{memory.root}/facts.md, /facts.md")
    document = status(run, memory.root)
    assert document["problems"] == [] and document["counts"]["derived"] == 1
    memory.write("facts.md", "Lives in Paris.")
    (entry,) = status(run, memory.root, now=LATER)["stale"]
    assert [cause["source"] for cause in entry["causes"]] == ["facts.md"]


def test_other_absolute_paths_of_the_folder_are_given_to_the_api(memory) -> None:
    memory.write("facts.md", "Lives in Lyon.")
    memory.write("profile.md", derived_from="/workspace/Memory/facts.md")
    plain = memory.open()
    assert sources(plain, "profile.md") == [("workspace/Memory/facts.md", EdgeStatus.MISSING)]
    known = Memory(memory.root, state=memory.root.parent / "aka", also_known_as=("/workspace/Memory/",))
    assert sources(known, "profile.md") == [("facts.md", EdgeStatus.CLEAN)]


def test_a_missing_source_that_is_a_typo_gets_a_hint_everywhere(memory, run) -> None:
    memory.write("facts.md", "Lives in Lyon.")
    memory.write("notes/deep/prefs.md", "Short answers.")
    memory.write("profile.md", derived_from="facts, Prefs.md, nothing.md")
    document = status(run, memory.root)
    (entry,) = document["stale"]
    hints = {cause["source"]: cause.get("did_you_mean") for cause in entry["causes"]}
    assert hints == {"facts": "facts.md", "Prefs.md": "notes/deep/prefs.md", "nothing.md": None}
    assert all("did_you_mean" in cause for cause in entry["causes"] if cause["source"] != "nothing.md")
    assert not any("did_you_mean" in cause for cause in entry["causes"] if cause["source"] == "nothing.md")

    code, out, _ = run("why", "profile.md", cwd=memory.root)
    assert code == 0 and "did you mean facts.md?" in out and "did you mean notes/deep/prefs.md?" in out
    code, out, _ = run("status", cwd=memory.root)
    assert "facts missing (did you mean facts.md?)" in out
    code, out, _ = run("prompt", cwd=memory.root)
    assert "facts missing (did you mean facts.md?)" in out
    code, out, _ = run("why", "profile.md", "--json", cwd=memory.root)
    assert {edge["source"]: edge.get("did_you_mean") for edge in json.loads(out)["sources"]} == hints


def test_why_on_a_broken_declaration_reports_the_problem(memory, run) -> None:
    memory.write("MEMORY.md", "index")
    memory.write_bytes("profile.md", b"---\nderived_from: 42\n---\nBody\n")
    code, out, _ = run("why", "profile.md", cwd=memory.root)
    assert code == 0
    assert "declares no sources" not in out
    assert "bad-frontmatter" in out and "derived_from must be a string or a list of strings" in out
    code, out, _ = run("why", "profile.md", "--json", cwd=memory.root)
    (problem,) = json.loads(out)["problems"]
    assert problem["kind"] == "bad-frontmatter"


def test_why_on_a_derived_file_with_a_refused_entry_lists_the_problem(memory, run) -> None:
    memory.write("MEMORY.md", "index")
    memory.write("facts.md", "A")
    memory.write("profile.md", derived_from="facts.md, ../../etc/passwd")
    code, out, _ = run("why", "profile.md", cwd=memory.root)
    assert code == 0 and "fresh" in out and "outside-root: ../../etc/passwd" in out


# -- repair order --------------------------------------------------------------------------------


def _report(stale: tuple[StaleEntry, ...]) -> Report:
    return Report("/m", NOW, len(stale), (), stale, (), ())


def _stale_chain(root: Path) -> Report:
    """x.md changed on day 2 under z1.md; y.md changed on day 1 under a2.md; aa.md derives
    from z1.md and ab.md from aa.md: alphabetically a2, aa, ab, z1."""
    for name, text in {"x.md": "x", "y.md": "y"}.items():
        (root / name).write_text(text)
    declared = {"z1.md": "x.md", "a2.md": "y.md", "aa.md": "z1.md", "ab.md": "aa.md"}
    for name, source in declared.items():
        (root / name).write_text(f"---\nderived_from: {source}\n---\n")
    memory = Memory(root)
    memory.refresh(now=NOW)
    (root / "y.md").write_text("y changed")
    memory.refresh(now=NOW + timedelta(days=1))
    (root / "x.md").write_text("x changed")
    return memory.refresh(now=NOW + timedelta(days=2))


def test_the_block_lists_files_whose_own_sources_changed_first(tmp_path: Path) -> None:
    report = _stale_chain(tmp_path)
    assert [entry.path for entry in report.stale] == ["a2.md", "aa.md", "ab.md", "z1.md"]
    assert [entry.path for entry in repair_order(report.stale)] == ["a2.md", "z1.md", "aa.md", "ab.md"]
    block = prompt_block(report, max_lines=2)
    lines = [line for line in block.splitlines() if line.startswith("- ")]
    assert [line.split(":")[0] for line in lines[:2]] == ["- a2.md", "- z1.md"]
    assert "and 2 more stale derived files" in lines[2]
    everything = [line.split(":")[0] for line in prompt_block(report).splitlines() if line.startswith("- ")]
    assert everything == ["- a2.md", "- z1.md", "- aa.md", "- ab.md"]


@given(
    st.lists(
        st.tuples(st.booleans(), st.integers(2, 6), st.integers(0, 5)),
        min_size=1,
        max_size=12,
        unique_by=lambda item: item,
    )
)
def test_repair_order_puts_direct_files_first_then_nearest(items: list[tuple[bool, int, int]]) -> None:
    from provgraph.model import Cause

    stale = tuple(
        StaleEntry(
            f"f{index}.md",
            float(day),
            direct,
            (
                Cause(
                    "src.md",
                    EdgeStatus.CHANGED,
                    float(day),
                    "src.md" if direct else f"c{length - 1}",
                    1 if direct else length,
                    path=f"f{index}.md",
                ),
            ),
        )
        for index, (direct, length, day) in enumerate(items)
    )
    ordered = repair_order(stale)
    assert sorted(ordered, key=lambda entry: entry.path) == sorted(stale, key=lambda entry: entry.path)
    keys = [(not entry.direct, entry.causes[0].depth, entry.since) for entry in ordered]
    assert keys == sorted(keys)
    assert _report(stale).stale == stale  # the report itself stays sorted by path for status and JSON


def test_the_prompts_list_them_all_command_works_pasted_and_keeps_the_heading(tmp_path, run) -> None:
    """The block's last line names a command that lists every stale file, read as the block was."""
    root = tmp_path / "my memory" / "it's"
    root.mkdir(parents=True)
    (root / "daily.md").write_text("Rotate keys monthly.\n")
    for name in ("a", "b", "c"):
        (root / f"{name}.md").write_text(f"# {name}\n\n## Sources\n\n- [[daily]]\n")
    assert run("prompt", root, "--sources-heading", cwd="/", now="2024-03-01T12:00:00+00:00") == (0, "", "")
    (root / "daily.md").write_text("Rotate keys daily.\n")

    code, out, _ = run("prompt", root, "--max-lines", "1", "--sources-heading", cwd="/", now=LATER)

    [command] = re.findall(r"run `(provgraph status [^`]*)` to list them all", out)
    shell = {**os.environ, "PATH": f"{PROVGRAPH.parent}:{os.environ['PATH']}", "PROVGRAPH_NOW": LATER}
    done = subprocess.run(["sh", "-c", command], cwd=tmp_path, env=shell, capture_output=True, text=True)
    assert (code, done.returncode, done.stderr) == (0, 0, "")
    assert done.stdout.startswith("4 memory files, 3 derived, 3 stale, 0 cycles, 0 problems")


def test_a_run_without_the_heading_reads_the_folder_as_the_lock_says(memory, run) -> None:
    """The heading is set once: the lock records it, and every later run reads with it."""
    memory.write("daily.md", "Rotate keys monthly.\n")
    memory.write("digest.md", "# Digest\n\n## Sources\n\n- [[daily]]\n")
    status(run, memory.root, "--sources-heading")
    memory.write("daily.md", "Rotate keys daily.\n")
    assert [entry["path"] for entry in status(run, memory.root, now=LATER)["stale"]] == ["digest.md"]
    assert [entry["path"] for entry in status(run, memory.root, "--sources-heading", now=LATER)["stale"]] == [
        "digest.md"
    ]
