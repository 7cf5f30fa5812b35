"""When nothing is declared but a folder writes lineage in other words, ``status`` says
once per form which form or option would read it."""

from __future__ import annotations

import json

import pytest

from provgraph import Memory

FORMS = {
    "## Sources": ("# Digest\n\n## Sources\n\n- [[facts]]\n", "run with --sources-heading to read them"),
    "sources:": ("---\nsources: [facts.md]\n---\nA digest.\n", "provgraph reads derived_from:"),
    "source_files:": ("---\nsource_files:\n  - facts.md\n---\nA digest.\n", "provgraph reads derived_from:"),
    "derives_from::": ("A digest.\n\nderives_from:: [[facts]]\n", "provgraph reads derived_from::"),
    "derived-from::": ("A digest.\n\nderived-from:: [[facts]]\n", "provgraph reads derived_from::"),
    "sources::": ("A digest.\n\nsources:: [[facts]]\n", "provgraph reads derived_from::"),
}


@pytest.mark.parametrize("form", sorted(FORMS))
def test_status_names_what_would_read_each_form_of_lineage_in_other_words(memory, run, form) -> None:
    text, reads = FORMS[form]
    memory.write("facts.md", "Lives in Lyon.\n")
    for name in ("one.md", "two.md"):
        memory.write(name, text)
    code, out, _ = run("status", cwd=memory.root)
    (hint,) = [line for line in out.splitlines() if line.startswith("hint: ")]
    assert code == 0 and hint.startswith("hint: 2 files") and form in hint and reads in hint
    _, out, _ = run("status", "--json", cwd=memory.root)
    assert json.loads(out)["hints"] == [hint.removeprefix("hint: ")]


def test_a_folder_that_declares_something_gets_no_hint(memory) -> None:
    memory.write("facts.md", "Lives in Lyon.\n")
    memory.write("old.md", FORMS["sources:"][0])
    memory.write("profile.md", derived_from="facts.md")
    assert Memory(memory.root).refresh().hints == ()


def test_a_heading_the_run_reads_is_not_hinted_and_another_is_named_in_full(memory) -> None:
    memory.write("facts.md", "Lives in Lyon.\n")
    memory.write("digest.md", "# Digest\n\n### Sources\n\nFrom the facts.\n")
    (hint,) = Memory(memory.root).refresh().hints
    assert "--sources-heading='### Sources'" in hint
    assert Memory(memory.root, sources_heading="### Sources").refresh().hints == ()


def test_prose_that_mentions_sources_is_no_hint(memory) -> None:
    memory.write("facts.md", "Our sources: the wiki, derived from talks.\nSources matter.\n")
    assert Memory(memory.root).refresh().hints == ()
