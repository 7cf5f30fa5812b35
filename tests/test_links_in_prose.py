"""A ``derived_from`` value that holds links declares those links; prose is never a source.

Wikis write lineage as Dataview fields mixed with prose (``derived_from:: [[a]] adds
telemetry, battery, and more``): the links are what a reader sees as sources, and the
words around them are not.  An entry that cannot name a file at all (a sentence, a
paragraph, a NUL character) is a ``bad-entry`` of the declaring file, at its line.
"""

from __future__ import annotations

import pytest
from conftest import MemoryFolder
from depth import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from provgraph import EdgeStatus, ProblemKind
from provgraph.declarations import Lookup, read_declaration, resolve_entries, unfit_name


def entries(text: str) -> tuple[str, ...]:
    """The entries a file holding ``text`` declares; it must declare them without a problem."""
    declaration = read_declaration(text.encode())
    assert declaration.problems == ()
    return declaration.entries


def frontmatter(*lines: str) -> str:
    return "---\n" + "\n".join(lines) + "\n---\n# Title\n\nThe body.\n"


def body(*lines: str) -> str:
    return "---\ntags: [wiki]\n---\n# Title\n\n" + "\n".join(lines) + "\n"


# -- a value that holds links declares exactly those links ------------------------------------


@pytest.mark.parametrize(
    ("text", "links"),
    [
        pytest.param(
            body("derived_from::[[telemetry]] adds a supervised mode, battery, and controller telemetry"),
            ("[[telemetry]]",),
            id="field-then-prose-with-commas",
        ),
        pytest.param(
            body("derived_from:: [[thermal#Overview]], [[firmware]] and [[fusion]] (for the perception part)"),
            ("[[thermal#Overview]]", "[[firmware]]", "[[fusion]]"),
            id="links-joined-by-and",
        ),
        pytest.param(
            body("derived_from:: [[retro]], transcribed by hand, so spelling may differ"),
            ("[[retro]]",),
            id="prose-after-a-comma",
        ),
        pytest.param(
            body("**derived_from**:: [[call]], [[trial]]: both as of April"),
            ("[[call]]", "[[trial]]"),
            id="bold-key",
        ),
        pytest.param(
            body("- derived_from:: [[telemetry]], [[capture|the capture mode]] as of May"),
            ("[[telemetry]]", "[[capture|the capture mode]]"),
            id="list-item",
        ),
        pytest.param(
            body("Readiness [derived_from:: [[risks]], [[questions|the open questions]]] as of late April."),
            ("[[risks]]", "[[questions|the open questions]]"),
            id="in-brackets",
        ),
        pytest.param(
            body("derived_from:: the call ([summary](../s/call.md)) and [March trial](../s/trial.md), plus caveats"),
            ("[summary](../s/call.md)", "[March trial](../s/trial.md)"),
            id="markdown-links-in-prose",
        ),
        pytest.param(
            frontmatter('derived_from: "[[datasheet]] and [[trial]]"'),
            ("[[datasheet]]", "[[trial]]"),
            id="frontmatter-scalar",
        ),
        pytest.param(
            frontmatter("derived_from:", '  - "[[datasheet-v3]], page 2 only (the rest is marketing)"', "  - b.md"),
            ("[[datasheet-v3]]", "b.md"),
            id="frontmatter-list-items",
        ),
        pytest.param(
            frontmatter("metadata:", "  type: summary", "  derived_from: '[[a]] and, later, [[b]]'"),
            ("[[a]]", "[[b]]"),
            id="metadata-nested",
        ),
        pytest.param(
            frontmatter("description: Note: not YAML", "derived_from: [[a]] and [[b]]"),
            ("[[a]]", "[[b]]"),
            id="frontmatter-that-is-not-yaml",
        ),
    ],
)
def test_a_value_holding_links_declares_exactly_those_links(text: str, links: tuple[str, ...]) -> None:
    assert entries(text) == links


@pytest.mark.parametrize(
    "field",
    [
        "The Mk2 replaced the Mk1 (derived_from:: [[firmware-notes]] index-2) and runs the new loop.",
        "Labelled at once (derived_from:: [[capture-mode]] section 2), which saves a day.",
        "(derived_from:: [[firmware-notes]] (2.4.1 only; 2.3.x is not here)): one line per summary.",
    ],
)
def test_prose_inside_a_dataview_field_in_parentheses_is_ignored(field: str) -> None:
    assert len(entries(body(field))) == 1
    assert entries(body(field))[0] in ("[[firmware-notes]]", "[[capture-mode]]")


def test_file_names_listed_beside_links_are_still_entries() -> None:
    """A comma list of Markdown links and plain names (SPEC 1) keeps every name."""
    assert entries(frontmatter("derived_from: [A](a.md), b.md, /notes/c.md")) == ("[A](a.md)", "b.md", "/notes/c.md")
    assert entries(body("derived_from:: [[a]], my facts.md")) == ("[[a]]", "my facts.md")


# -- a value with no link keeps the plain path rules ------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(frontmatter("derived_from: a.md, notes/b.md"), ("a.md", "notes/b.md"), id="comma-list"),
        pytest.param(frontmatter("derived_from: [a.md, b.md]"), ("a.md", "b.md"), id="inline-list"),
        pytest.param(frontmatter("derived_from:", "  - a.md", "  - b.md"), ("a.md", "b.md"), id="block-list"),
        pytest.param(body("derived_from:: notes/plain.md, ../other.md"), ("notes/plain.md", "../other.md"), id="field"),
        pytest.param(
            frontmatter("derived_from: my facts.md, Meeting notes 2026-01.md, notes from March"),
            ("my facts.md", "Meeting notes 2026-01.md", "notes from March"),
            id="names-of-several-words",
        ),
    ],
)
def test_a_value_without_links_keeps_the_plain_path_rules(text: str, expected: tuple[str, ...]) -> None:
    assert entries(text) == expected


# -- an entry that cannot be a file name ------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "line"),
    [
        pytest.param(
            body("A page.", "", "derived_from:: ask the rotation lead before changing this section."),
            8,
            id="a-sentence",
        ),
        pytest.param(body("derived_from:: " + "the numbers the lead read out " * 10), 6, id="a-paragraph"),
        pytest.param(body("", "derived_from:: a hallway chat: nothing written down"), 7, id="a-clause"),
        pytest.param(frontmatter("name: x", "derived_from: ask the lead before changing this."), 3, id="frontmatter"),
        pytest.param(frontmatter("derived_from:", "  - a.md", '  - "a\\x00b.md"'), 4, id="a-nul-character"),
        pytest.param(frontmatter("derived_from:", "  - a.md", "  - " + "x" * 256 + ".md"), 4, id="too-long"),
        pytest.param(body("derived_from:: [[" + "y" * 300 + "]]"), 6, id="a-link-too-long"),
    ],
)
def test_an_entry_that_cannot_be_a_file_name_is_a_bad_entry_naming_its_line(text: str, line: int) -> None:
    declaration = read_declaration(text.encode())
    assert declaration.entries in ((), ("a.md",))
    ((kind, detail),) = declaration.problems
    assert kind == ProblemKind.BAD_ENTRY
    assert detail.startswith(f"line {line}: ")
    assert len(detail) < 200


@pytest.mark.parametrize(
    "entry",
    [
        "ask the rotation lead before changing this section.",
        "and a hallway chat: nothing written down yet",
        "notes; then the rest",
        "the driver's own remarks as quoted there",
        "a\x00b.md",
        "x" * 256,
        "[[" + "y" * 300 + "]]",
    ],
)
def test_a_sentence_a_nul_character_or_an_overlong_name_cannot_name_a_file(entry: str) -> None:
    assert unfit_name(entry)


@pytest.mark.parametrize(
    "entry",
    [
        "a.md",
        "my facts.md",
        "Meeting notes 2026-01.md",
        "notes from March",
        "notes.",
        "../facts.md",
        "Notes from the offsite.md",
        "[[How we decided to ship in April]]",
        "[a long text: with a colon, and more words than a name](a.md)",
        "x" * 255,
        "tab\there.md",
        "semi;colon and [brackets](x).md",
        "a/" * 200 + "b.md",
        "日記" * 40 + ".md",
    ],
)
def test_a_name_of_several_words_or_a_long_path_still_names_a_file(entry: str) -> None:
    assert unfit_name(entry) is None


def test_a_bad_entry_is_a_problem_of_the_declaring_file_never_a_missing_source(memory: MemoryFolder) -> None:
    memory.write("facts.md", "The user likes tea.\n")
    memory.write(
        "notes/ops.md",
        "# Ops\n\nderived_from:: ask the rotation lead before changing this section.\n"
        "derived_from:: [[facts]] and a remark, with a comma\n",
    )
    report = memory.open().refresh()
    assert {(edge.derived, edge.source, edge.status) for edge in report.edges} == {
        ("notes/ops.md", "facts.md", EdgeStatus.CLEAN)
    }
    assert [(problem.path, problem.kind) for problem in report.problems] == [("notes/ops.md", ProblemKind.BAD_ENTRY)]
    assert report.problems[0].detail.startswith("line 3: ")
    assert not report.stale


# -- the property: random prose with links in it ----------------------------------------------

_WORD = st.sampled_from(
    ["adds", "a", "supervised", "mode", "battery", "and", "the", "vendor's", "2.4.1", "notes", "page", "2", "as", "of"]
)
_CLAUSE = st.lists(_WORD, min_size=1, max_size=5).map(" ".join)
_NAME = st.sampled_from(["telemetry", "field-trial-2026-03", "notes/fusion", "raw/log.md", "Rover Alpha"])
_LINK = st.one_of(
    st.builds(lambda name, extra: f"[[{name}{extra}]]", _NAME, st.sampled_from(["", "", "|the alias", "#Heading"])),
    st.builds(lambda text, name: f"[{text}](../{name.replace(' ', '-')}.md)", _CLAUSE, _NAME),
)
_JOIN = st.sampled_from([" ", ", ", " and ", "; ", ": ", ", and ", " (", ") "])


@st.composite
def prose_with_links(draw: st.DrawFn) -> tuple[str, list[str]]:
    """A value of prose with links in it (parentheses balanced), and its links in order."""
    links = draw(st.lists(_LINK, min_size=1, max_size=4))
    parts: list[str] = [draw(_CLAUSE)] if draw(st.booleans()) else []
    for link in links:
        parts += [link, draw(_CLAUSE)] if draw(st.booleans()) else [link]
    text, opened = parts[0], 0
    for part in parts[1:]:
        join = draw(_JOIN)
        if join == ") " and not opened:
            join = ", "
        opened += join.count("(") - join.count(")")
        text += join + part
    return text + ")" * opened, links


_FIELD = st.sampled_from(
    [
        "derived_from:: {}",
        "- derived_from::{}",
        "**derived_from**:: {}",
        "Seen (derived_from:: {}) here.",
        "[derived_from:: {}]",
    ]
)
_FORM = st.sampled_from(['derived_from: "{}"', 'derived_from:\n  - "{}"', 'metadata:\n  derived_from: "{}"'])


@settings(max_examples=examples(400), deadline=None)
@given(prose_with_links(), _FIELD)
def test_the_entries_of_prose_with_links_in_a_field_are_exactly_its_links(
    value: tuple[str, list[str]], field: str
) -> None:
    prose, links = value
    assert list(entries(body(field.format(prose)))) == links


@settings(max_examples=examples(400), deadline=None)
@given(prose_with_links(), _FORM)
def test_the_entries_of_prose_with_links_in_the_frontmatter_are_exactly_its_links(
    value: tuple[str, list[str]], form: str
) -> None:
    prose, links = value
    assert list(entries(frontmatter(form.format(prose)))) == links


def test_a_link_in_prose_resolves_as_obsidian_resolves_it() -> None:
    """A path from the root, else the one file of that name anywhere; several are a problem."""
    lookup = Lookup(frozenset({"raw/log.md", "notes/fusion.md", "a/overview.md", "b/overview.md", "log.md"}))
    declared = entries(body("derived_from:: [[log]] and [[fusion|the fusion page]], as of May"))
    assert resolve_entries("wiki/page.md", declared, lookup) == (("log.md", "notes/fusion.md"), ())
    declared = entries(body("derived_from:: [[overview]] and the rest"))
    sources, (problem,) = resolve_entries("wiki/page.md", declared, lookup)
    assert sources == ()
    assert problem.kind == ProblemKind.BAD_ENTRY
    assert "a/overview.md" in problem.detail and "b/overview.md" in problem.detail
