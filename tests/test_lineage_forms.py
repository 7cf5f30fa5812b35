"""The lineage people already write: wiki links, ``metadata:`` blocks, inline
``derived_from::`` fields, a sources heading, absolute paths of the memory folder,
and the "did you mean" hint of a missing source (parser and resolver, pure)."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from provgraph import ProblemKind
from provgraph.declarations import Lookup, did_you_mean, read_declaration, resolve_entries

FILES = Lookup(frozenset({"notes/a.md", "notes/b.md", "top.md", "data/table.csv.md"}))
BOTH = ("notes/a.md", "notes/b.md")


def declared(
    text: str, lookup: Lookup = FILES, declaring: str = "notes/x.md", heading: str | None = None
) -> tuple[tuple[str, ...], list[ProblemKind]]:
    declaration = read_declaration(text.encode(), sources_heading=heading)
    sources, refused = resolve_entries(declaring, declaration.entries, lookup)
    return sources, [kind for kind, _ in declaration.problems] + [problem.kind for problem in refused]


def frontmatter(*lines: str, body: str = "The body.\n") -> str:
    return "---\n" + "\n".join(lines) + "\n---\n" + body


# -- wiki links, in every form an entry takes -------------------------------------------------


@pytest.mark.parametrize(
    "lines",
    [
        pytest.param(["derived_from: [[a]], [[b]]"], id="comma-string"),
        pytest.param(["derived_from: [[a]],[[b]]"], id="comma-no-space"),
        pytest.param(["derived_from: [[[a]], [[b]]]"], id="flow-list-unquoted"),
        pytest.param(['derived_from: ["[[a]]", "[[b]]"]'], id="flow-list-quoted"),
        pytest.param(['derived_from: "[[a]], [[b]]"'], id="quoted-string"),
        pytest.param(["derived_from:", "  - [[a]]", "  - [[b]]"], id="block-list-unquoted"),
        pytest.param(["derived_from:", "  - '[[a]]'", '  - "[[b]]"'], id="block-list-quoted"),
        pytest.param(["derived_from:", "- [[a]]", "- [[b]]", "type: user"], id="block-list-column-0"),
        pytest.param(["derived_from: [[a.md]], [[notes/b.md]]"], id="with-extension-and-path"),
        pytest.param(["derived_from: [[notes/a|the facts]], [[b#Section]]"], id="alias-and-heading"),
        pytest.param(["derived_from: [[a#^block]], [[b|B, and more]]"], id="block-ref-and-comma-alias"),
        pytest.param(["derived_from: [[a]], b.md"], id="mixed-with-a-path"),
        pytest.param(["derived_from: [[a]], [B](b.md)"], id="mixed-with-a-markdown-link"),
        pytest.param(["description: Use it: always", "derived_from: [[a]], [[b]]"], id="not-yaml-comma"),
        pytest.param(["description: Use it: always", "derived_from:", "  - [[a]]", "  - [[b]]"], id="not-yaml-block"),
        pytest.param(["description: Use it: always", "derived_from: [[[a]], [[b]]]"], id="not-yaml-flow"),
    ],
)
def test_wiki_links_are_entries_in_every_form(lines: list[str]) -> None:
    assert declared(frontmatter(*lines)) == (BOTH, [])


def test_an_unquoted_wiki_link_alone_is_a_link_not_a_nested_list() -> None:
    assert declared(frontmatter("derived_from: [[a]]")) == (("notes/a.md",), [])
    assert declared(frontmatter("derived_from:", "  - [[a]]")) == (("notes/a.md",), [])


@pytest.mark.parametrize(
    "value", ["[[a.md], b.md]", "[[a.md, b.md], c.md]", "[[a], [b]]"], ids=["nested", "nested-pair", "lists"]
)
def test_nested_lists_that_are_not_wiki_links_stay_a_problem(value: str) -> None:
    assert declared(frontmatter(f"derived_from: {value}")) == ((), [ProblemKind.BAD_FRONTMATTER])


def test_a_wiki_path_is_relative_to_the_root_not_to_the_declaring_folder() -> None:
    lookup = Lookup(frozenset({"notes/a.md", "sub/a.md"}))
    assert declared(frontmatter("derived_from: [[sub/a]]"), lookup) == (("sub/a.md",), [])
    assert declared(frontmatter("derived_from: [[/sub/a]]"), lookup) == (("sub/a.md",), [])


def test_a_bare_name_at_the_root_wins_over_one_elsewhere() -> None:
    lookup = Lookup(frozenset({"facts.md", "x/facts.md"}))
    assert declared(frontmatter("derived_from: [[facts]]"), lookup) == (("facts.md",), [])


def test_a_bare_name_not_at_the_root_is_the_one_file_of_that_name() -> None:
    lookup = Lookup(frozenset({"x/deep/facts.md", "x/other.md"}))
    assert declared(frontmatter("derived_from: [[facts]]"), lookup) == (("x/deep/facts.md",), [])


def test_two_files_of_the_name_are_a_bad_entry_naming_both() -> None:
    lookup = Lookup(frozenset({"x/facts.md", "y/facts.md"}))
    declaration = read_declaration(frontmatter("derived_from: [[facts]], [[other]]").encode())
    sources, problems = resolve_entries("profile.md", declaration.entries, lookup)
    assert sources == ("other.md",)
    (problem,) = problems
    assert problem.kind is ProblemKind.BAD_ENTRY
    assert "x/facts.md" in problem.detail and "y/facts.md" in problem.detail


@pytest.mark.parametrize(
    ("files", "value", "expected"),
    [
        ({"Log.md"}, "[[log]]", "Log.md"),
        ({"Ext.md"}, "[[Ext.MD]]", "Ext.md"),
        ({"Notes/Plan.md"}, "[[notes/plan]]", "Notes/Plan.md"),
        ({"x/deep/Log.md"}, "[[LOG]]", "x/deep/Log.md"),
        ({"log.md", "Log.md"}, "[[Log]]", "Log.md"),
        ({"Log.md", "x/log.md"}, "[[log]]", "x/log.md"),
    ],
    ids=["root", "extension", "path", "elsewhere", "exact-wins", "exact-name-wins-over-case"],
)
def test_a_wiki_name_in_another_case_finds_its_file_as_in_obsidian(files: set[str], value: str, expected: str) -> None:
    assert declared(frontmatter(f"derived_from: {value}"), Lookup(frozenset(files))) == ((expected,), [])


def test_two_files_in_other_cases_are_a_bad_entry_naming_both() -> None:
    lookup = Lookup(frozenset({"x/Log.md", "y/LOG.md"}))
    declaration = read_declaration(frontmatter("derived_from: [[log]]").encode())
    sources, (problem,) = resolve_entries("profile.md", declaration.entries, lookup)
    assert sources == () and problem.kind is ProblemKind.BAD_ENTRY
    assert "x/Log.md" in problem.detail and "y/LOG.md" in problem.detail


def test_a_wiki_link_to_nothing_names_the_md_file_at_the_root() -> None:
    assert declared(frontmatter("derived_from: [[nowhere]]")) == (("nowhere.md",), [])
    assert declared(frontmatter("derived_from: [[img/diagram.png]]")) == (("img/diagram.png",), [])


@pytest.mark.parametrize(
    ("value", "kind"),
    [("[[../outside]]", ProblemKind.OUTSIDE_ROOT), ("[[|alias]]", ProblemKind.BAD_ENTRY)],
    ids=["parent", "empty"],
)
def test_wiki_links_that_cannot_be_honoured_are_problems(value: str, kind: ProblemKind) -> None:
    assert declared(frontmatter(f"derived_from: {value}")) == ((), [kind])


# -- metadata: ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "lines",
    [
        pytest.param(["metadata:", "  derived_from: a.md, b.md"], id="comma-string"),
        pytest.param(["metadata:", "  type: user", "  derived_from:", "    - a.md", "    - b.md"], id="block-list"),
        pytest.param(["metadata:", "    derived_from: [a.md, b.md]", "name: x"], id="flow-list-then-key"),
        pytest.param(["metadata:", "  derived_from: [[a]], [[b]]"], id="wiki-links"),
        pytest.param(
            ["description: Use it: always", "metadata:", "  derived_from:", "    - [A](a.md)", "    - b.md"],
            id="not-yaml",
        ),
        pytest.param(["derived_from: a.md", "metadata:", "  derived_from: b.md"], id="merged-with-the-top"),
        pytest.param(["metadata: {type: user, derived_from: [a.md, b.md]}"], id="flow-mapping"),
        pytest.param(["metadata: {derived_from: [[[a]], [[b]]]}", "name: x"], id="flow-mapping-wiki-links"),
    ],
)
def test_derived_from_under_metadata_counts_as_at_the_top(lines: list[str]) -> None:
    assert declared(frontmatter(*lines)) == (BOTH, [])


def test_derived_at_under_metadata_counts_too() -> None:
    text = frontmatter("metadata:", "  derived_from: a.md", "  derived_at: 2026-11-10")
    assert read_declaration(text.encode()).derived_at == "2026-11-10"
    text = frontmatter("derived_at: 2026-11-12", "metadata:", "  derived_from: a.md", "  derived_at: 2026-11-10")
    assert read_declaration(text.encode()).derived_at == "2026-11-12"


def test_derived_at_in_a_metadata_flow_mapping_counts_too() -> None:
    text = frontmatter("metadata: {derived_from: a.md, derived_at: 2026-11-10}")
    assert read_declaration(text.encode()).derived_at == "2026-11-10"


@pytest.mark.parametrize("metadata", ["metadata:\n  derived_from: 42", "metadata: {derived_from: 42}"])
def test_a_wrong_type_under_metadata_is_a_problem(metadata: str) -> None:
    assert declared(frontmatter(metadata)) == ((), [ProblemKind.BAD_FRONTMATTER])


def test_a_nested_mapping_other_than_metadata_declares_nothing() -> None:
    assert declared(frontmatter("extra:", "  derived_from: a.md")) == ((), [])


# -- inline fields in the body -------------------------------------------------------------------


def test_an_inline_field_declares_sources_without_frontmatter() -> None:
    assert declared("# Digest\n\nSome text.\n\nderived_from:: [[a]], [[b]]\n") == (BOTH, [])


def test_inline_fields_merge_with_the_frontmatter() -> None:
    text = frontmatter("derived_from: a.md", body="Text.\n- derived_from:: [[notes/b.md]]\n")
    assert declared(text) == (BOTH, [])


@pytest.mark.parametrize(
    "line",
    ["**derived_from**:: [[a]], [[b]]", "- *derived_from*:: [[a]], [[b]]", "> `derived_from`:: [[a]], [[b]]"],
    ids=["bold", "italic-list-item", "code-quote"],
)
def test_an_inline_field_key_may_carry_markdown_emphasis_as_dataview_allows(line: str) -> None:
    assert declared(f"# Digest\n\n{line}\n") == (BOTH, [])


def test_an_unbalanced_emphasis_is_no_field() -> None:
    assert declared("**derived_from*:: [[a]]\n") == ((), [])


def test_every_inline_field_line_counts() -> None:
    assert declared("derived_from:: [[a]]\nText\nderived_from:: [B](b.md)\n") == (BOTH, [])


def test_inline_fields_in_code_blocks_and_other_fields_declare_nothing() -> None:
    text = "```\nderived_from:: [[a]]\n```\nrelates_to:: [[b]]\nThe derived_from:: [[b]] mid-line.\n"
    assert declared(text) == ((), [])


def test_bracketed_inline_fields_count_anywhere_in_a_line() -> None:
    text = "Rotation [derived_from:: [[a]]] relies on (derived_from:: [B](b.md)) daily.\n"
    assert declared(text) == (BOTH, [])
    assert declared("Left open [derived_from:: [[a]]\n") == ((), [])


# -- the sources heading (opt-in) -----------------------------------------------------------------

DIGEST = """---
name: digest
---
# Digest

Mentions [[top]] in prose.

## Sources

- [[a]]
- [B](b.md) and [the site](https://example.com/x)

### Details

- [[notes/a|again]]

## Next

- [[top]]
"""


def test_links_under_the_sources_heading_are_not_lineage_by_default() -> None:
    assert declared(DIGEST) == ((), [])


def test_links_under_the_sources_heading_declare_sources_when_asked() -> None:
    assert declared(DIGEST, heading="## Sources") == (BOTH, [])


def test_another_heading_can_be_chosen() -> None:
    assert declared(DIGEST, heading="## Next") == (("top.md",), [])
    assert declared(DIGEST, heading="## Provenance") == ((), [])


# -- absolute paths of the memory folder -----------------------------------------------------------

ROOTS = Lookup(frozenset({"facts.md"}), ("/workspace/Memory", "/srv/agent/Memory"))


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ("/srv/agent/Memory/facts.md", "facts.md"),
        ("/workspace/Memory/notes/a.md", "notes/a.md"),
        ("/facts.md", "facts.md"),
        ("/srv/agent/MemoryX/a.md", "srv/agent/MemoryX/a.md"),
        ("[Facts](/srv/agent/Memory/facts.md)", "facts.md"),
        ("[[/srv/agent/Memory/facts]]", "facts.md"),
    ],
)
def test_an_entry_with_the_folders_absolute_path_means_the_file_under_the_root(entry: str, expected: str) -> None:
    assert resolve_entries("notes/x.md", (entry,), ROOTS) == ((expected,), ())


@pytest.mark.parametrize(
    ("entry", "kind"),
    [("/srv/agent/Memory", ProblemKind.BAD_ENTRY), ("/srv/agent/Memory/../x.md", ProblemKind.OUTSIDE_ROOT)],
)
def test_the_folder_itself_or_a_way_out_of_it_is_refused(entry: str, kind: ProblemKind) -> None:
    sources, (problem,) = resolve_entries("x.md", (entry,), ROOTS)
    assert sources == () and problem.kind is kind


# -- did you mean ------------------------------------------------------------------------------------

HINTS = Lookup(frozenset({"facts.md", "Notes/Plan.md", "x/deep/prefs.md", "a/dup.md", "b/dup.md"}))


@pytest.mark.parametrize(
    ("missing", "hint"),
    [
        ("facts", "facts.md"),
        ("FACTS.md", "facts.md"),
        ("notes/plan.md", "Notes/Plan.md"),
        ("prefs.md", "x/deep/prefs.md"),
        ("other/prefs", "x/deep/prefs.md"),
        ("dup.md", None),
        ("unrelated.md", None),
    ],
)
def test_a_missing_source_that_is_probably_a_typo_gets_a_hint(missing: str, hint: str | None) -> None:
    assert did_you_mean(missing, HINTS) == hint


# -- the documented examples (docs/declaring.md) --------------------------------------------------


def _documented_declaration_examples() -> list[tuple[str, str]]:
    page = (Path(__file__).parent.parent / "docs" / "declaring.md").read_text(encoding="utf-8")
    section = page[: page.index("\n## Semantics in short\n")]
    return re.findall(r"^ *```(yaml|markdown)\n(.*?)^ *```", section, re.S | re.M)


def test_every_documented_declaration_example_declares_the_same_two_sources() -> None:
    examples = _documented_declaration_examples()
    assert len(examples) >= 7
    lookup = Lookup(frozenset({"user-facts.md", "preferences.md"}))
    for language, example in examples:
        text = textwrap.dedent(example)
        if language == "yaml":
            text = f"---\n{text}---\n"
        heading = "## Sources" if "## Sources" in text else None
        declaration = read_declaration(text.encode(), sources_heading=heading)
        assert resolve_entries("profile.md", declaration.entries, lookup) == (
            ("preferences.md", "user-facts.md"),
            (),
        ), example
        if heading:
            assert read_declaration(text.encode()).entries == ()


FOLDERS = ["", "x/", "x/deep/", "y/"]
NAMES = ["facts", "plan", "Facts"]


@given(
    present=st.sets(st.tuples(st.sampled_from(FOLDERS), st.sampled_from(NAMES)), max_size=8),
    name=st.sampled_from(NAMES),
    declaring=st.sampled_from(["profile.md", "x/profile.md", "y/deep/profile.md"]),
)
def test_a_bare_wiki_name_follows_the_rules_whatever_files_exist(
    present: set[tuple[str, str]], name: str, declaring: str
) -> None:
    files = frozenset(f"{folder}{stem}.md" for folder, stem in present)
    sources, problems = resolve_entries(declaring, (f"[[{name}]]",), Lookup(files))
    wanted = f"{name}.md"
    tiers = [  # the first tier that holds a file decides, as docs/declaring.md says
        [wanted] if wanted in files else [],
        sorted(path for path in files if path.rsplit("/", 1)[-1] == wanted),
        sorted(path for path in files if path.casefold() == wanted.casefold()),
        sorted(path for path in files if path.rsplit("/", 1)[-1].casefold() == wanted.casefold()),
    ]
    chosen = next((tier for tier in tiers if tier), [wanted])
    if len(chosen) == 1:
        assert (sources, problems) == ((chosen[0],), ())
    else:
        (problem,) = problems
        assert sources == () and problem.kind is ProblemKind.BAD_ENTRY
        assert all(path in problem.detail for path in chosen)
