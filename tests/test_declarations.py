"""Reading ``derived_from`` / ``derived_at`` (SPEC 1) and resolving entries to root paths."""

from __future__ import annotations

import itertools
import posixpath
import re

import pytest
from depth import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from provgraph import ProblemKind, declarations
from provgraph.declarations import FRONTMATTER_LIMIT, Lookup, read_declaration, resolve_entries


def declared(text: str | bytes, declaring: str = "notes/x.md") -> tuple[tuple[str, ...], list[ProblemKind]]:
    """Sources a file at ``declaring`` declares, and the kinds of every problem found."""
    declaration = read_declaration(text.encode() if isinstance(text, str) else text)
    sources, refused = resolve_entries(declaring, declaration.entries)
    kinds = [kind for kind, _ in declaration.problems] + [problem.kind for problem in refused]
    return sources, kinds


def frontmatter(*lines: str) -> str:
    return "---\n" + "\n".join(lines) + "\n---\nThe body.\n"


BOTH = ("notes/a.md", "notes/b.md")


# -- the forms of SPEC 1 all mean the same -------------------------------------------------


@pytest.mark.parametrize(
    "lines",
    [
        pytest.param(["derived_from: a.md, b.md"], id="comma-separated"),
        pytest.param(["derived_from: a.md,b.md"], id="comma-no-space"),
        pytest.param(["derived_from: [a.md, b.md]"], id="inline-list"),
        pytest.param(["derived_from:", "  - a.md", "  - b.md"], id="block-list"),
        pytest.param(["derived_from:", "- a.md", "- b.md", "type: user"], id="block-list-column-0"),
        pytest.param(["derived_from: [User facts](a.md), [Prefs](b.md)"], id="links-comma-separated"),
        pytest.param(['derived_from: ["[User facts](a.md)", "[Prefs](b.md)"]'], id="links-inline-list"),
        pytest.param(["derived_from:", "  - '[User facts](a.md)'", "  - '[Prefs](b.md)'"], id="links-block-list"),
        pytest.param(["derived_from: [Facts, the raw ones](a.md), [Prefs, all of them](b.md)"], id="link-text-commas"),
        pytest.param(["derived_from: [A](a.md \"The title\"), [B](b.md 'other')"], id="link-titles"),
        pytest.param(["derived_from: [A](<a.md>), [B](<b.md>)"], id="angle-targets"),
        pytest.param(["derived_from: <a.md>, <b.md>"], id="angle-bare"),
        pytest.param(["derived_from: [A](a.md#facts), [B](b.md#top)"], id="fragments"),
        pytest.param(['derived_from: "a.md, b.md"'], id="double-quoted-scalar"),
        pytest.param(["derived_from: 'a.md, b.md'"], id="single-quoted-scalar"),
        pytest.param(["derived_from: ['a.md', \"b.md\"]"], id="quoted-items"),
        pytest.param(["derived_from:", '  - "a.md"', "  - 'b.md'"], id="quoted-block-items"),
        pytest.param(["derived_from: a.md, b.md  # the raw facts"], id="trailing-comment"),
        pytest.param(["derived_from:  # sources", "  - a.md  # first", "  # a note", "  - b.md"], id="block-comments"),
        pytest.param(["derived_from: b.md, a.md"], id="other-order"),
        pytest.param(["derived_from: a.md, b.md, a.md, ./b.md"], id="duplicates"),
        pytest.param(["name: Profile", "derived_from: a.md, b.md", "type: user"], id="among-other-keys"),
    ],
)
def test_every_declaration_form_means_the_same(lines: list[str]) -> None:
    assert declared(frontmatter(*lines)) == (BOTH, [])


@pytest.mark.parametrize(
    "lines",
    [
        pytest.param(
            ["name: Profile", "description: When you tailor an answer: read this first.", "derived_from: a.md, b.md"],
            id="unquoted-colon",
        ),
        pytest.param(
            ["description: Use it: always", "derived_from: [A](a.md), [B, and more](b.md)"], id="unquoted-links"
        ),
        pytest.param(["description: Use it: always", "derived_from:", "  - [A](a.md)", "  - b.md"], id="block-list"),
        pytest.param(["description: Use it: always", "derived_from:", "- a.md", "- b.md", "type: user"], id="column-0"),
        pytest.param(["description: Use it: always", "derived_from: [a.md, b.md]"], id="inline-list"),
    ],
)
def test_frontmatter_that_is_not_yaml_still_declares(lines: list[str]) -> None:
    assert declared(frontmatter(*lines)) == (BOTH, [])


def test_link_targets_are_decoded() -> None:
    text = frontmatter('derived_from: [Notes](my%20notes.md#today), [More](<more notes.md> "title")')
    assert declared(text) == (("notes/more notes.md", "notes/my notes.md"), [])


def test_derived_at_is_read_as_written() -> None:
    assert (
        read_declaration(frontmatter("derived_from: a.md", "derived_at: 2024-03-01").encode()).derived_at
        == "2024-03-01"
    )
    stamp = read_declaration(frontmatter("derived_at: '2024-03-01T10:00:00Z'", "derived_from: a.md").encode())
    assert stamp.derived_at == "2024-03-01T10:00:00Z"
    assert read_declaration(frontmatter("derived_from: a.md").encode()).derived_at is None


def test_bom_and_crlf_are_accepted() -> None:
    text = "\ufeff---\r\nname: x\r\nderived_from: a.md, b.md\r\nderived_at: 2024-03-01\r\n---\r\nbody\r\n"
    declaration = read_declaration(text.encode())
    assert resolve_entries("notes/x.md", declaration.entries) == (BOTH, ())
    assert declaration.derived_at == "2024-03-01"
    block = "---\r\nderived_from:\r\n  - a.md\r\n  - b.md\r\n---\r\n"
    assert declared(block) == (BOTH, [])


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("No frontmatter at all.\nderived_from: a.md\n", id="no-frontmatter"),
        pytest.param("Intro\n---\nderived_from: a.md\n---\n", id="not-leading"),
        pytest.param(frontmatter("name: Profile", "type: user"), id="no-key"),
        pytest.param(frontmatter("derived_from:"), id="empty-value"),
        pytest.param(frontmatter("sources: a.md"), id="other-key"),
        pytest.param("---\nname: x\n---\nderived_from: a.md\n", id="key-in-body"),
    ],
)
def test_files_without_a_declaration_declare_nothing(text: str) -> None:
    assert declared(text) == ((), [])


# -- declarations that cannot be honoured --------------------------------------------------


@pytest.mark.parametrize(
    "lines",
    [
        pytest.param(["derived_from:", "  facts: a.md"], id="mapping"),
        pytest.param(["derived_from: {facts: a.md}"], id="inline-mapping"),
        pytest.param(["derived_from: 42"], id="number"),
        pytest.param(["derived_from: 2024-03-01"], id="date"),
        pytest.param(["derived_from: true"], id="boolean"),
        pytest.param(["derived_from: [[a.md], b.md]"], id="nested-list"),
        pytest.param(["derived_from:", "  - - a.md", "  - b.md"], id="nested-block-list"),
        pytest.param(["derived_from: [a.md, 7]"], id="list-with-number"),
        pytest.param(["description: Use it: always", "derived_from: 42"], id="number-in-non-yaml"),
    ],
)
def test_wrong_types_are_a_problem_and_declare_nothing(lines: list[str]) -> None:
    assert declared(frontmatter(*lines)) == ((), [ProblemKind.BAD_FRONTMATTER])


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("a.md, , b.md", id="empty-between"),
        pytest.param("a.md, b.md,", id="trailing-comma"),
        pytest.param("https://example.com/c.md, a.md, b.md", id="https"),
        pytest.param("a.md, file:///etc/passwd, b.md", id="file-url"),
        pytest.param("a.md, b.md, mailto:someone@example.com", id="mailto"),
        pytest.param("[Site](https://example.com/x.md), a.md, b.md", id="link-to-url"),
    ],
)
def test_empty_and_url_entries_are_ignored_with_a_problem(value: str) -> None:
    assert declared(frontmatter(f"derived_from: {value}")) == (BOTH, [ProblemKind.BAD_ENTRY])


def test_unterminated_frontmatter_is_a_problem() -> None:
    assert declared("---\nname: x\nderived_from: a.md\nThe body never closes the block.\n") == (
        (),
        [ProblemKind.BAD_FRONTMATTER],
    )


def test_frontmatter_beyond_the_limit_is_a_problem() -> None:
    text = "---\nderived_from: a.md\ndescription: " + "x" * FRONTMATTER_LIMIT + "\n---\n"
    head = text.encode()
    declaration = read_declaration(head[:FRONTMATTER_LIMIT], truncated=True)
    assert declaration.entries == ()
    assert [kind for kind, _ in declaration.problems] == [ProblemKind.BAD_FRONTMATTER]
    assert "64 KiB" in declaration.problems[0][1]


def test_invalid_utf8_in_the_frontmatter_is_unreadable() -> None:
    assert declared(b"---\nname: caf\xe9\nderived_from: a.md\n---\n") == ((), [ProblemKind.UNREADABLE])


def test_invalid_utf8_in_the_body_does_not_matter() -> None:
    assert declared(b"---\nderived_from: a.md, b.md\n---\n\xff\xfe binary body\n") == (BOTH, [])


# -- resolving entries ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("declaring", "entry", "expected"),
    [
        ("x.md", "a.md", "a.md"),
        ("notes/x.md", "a.md", "notes/a.md"),
        ("notes/x.md", "./a.md", "notes/a.md"),
        ("notes/x.md", "../a.md", "a.md"),
        ("notes/deep/x.md", "../../topics/a.md", "topics/a.md"),
        ("notes/x.md", "sub/../a.md", "notes/a.md"),
        ("notes/x.md", "/a.md", "a.md"),
        ("notes/x.md", "/topics/./a.md", "topics/a.md"),
        ("notes/x.md", "data.csv", "notes/data.csv"),
        ("notes/x.md", "[Facts](../topics/facts.md)", "topics/facts.md"),
        ("notes/x.md", "[Facts](/topics/facts.md)", "topics/facts.md"),
    ],
)
def test_entries_resolve_relative_to_the_declaring_folder(declaring: str, entry: str, expected: str) -> None:
    assert resolve_entries(declaring, (entry,)) == ((expected,), ())


@pytest.mark.parametrize(
    ("declaring", "entry"),
    [
        ("x.md", "../a.md"),
        ("notes/x.md", "../../a.md"),
        ("notes/x.md", "../../etc/passwd"),
        ("x.md", "/../a.md"),
        ("x.md", "a/../../b.md"),
        ("x.md", "~/secrets.md"),
        ("x.md", "~root/secrets.md"),
        ("x.md", "C:\\Users\\me\\a.md"),
        ("x.md", "c:/Users/me/a.md"),
        ("x.md", "\\\\server\\share\\a.md"),
        ("x.md", "[Up](../../a.md)"),
    ],
)
def test_entries_outside_the_root_are_refused(declaring: str, entry: str) -> None:
    sources, refused = resolve_entries(declaring, (entry,))
    assert sources == ()
    assert [(problem.path, problem.kind) for problem in refused] == [(declaring, ProblemKind.OUTSIDE_ROOT)]


def test_a_folder_or_provgraph_state_is_not_a_source() -> None:
    sources, refused = resolve_entries("x.md", ("notes/", ".", ".provgraph/state.json", "a.md"))
    assert sources == ("a.md",)
    assert [problem.kind for problem in refused] == [ProblemKind.BAD_ENTRY] * 3


def test_duplicates_collapse_and_entry_order_does_not_matter() -> None:
    entries = ("a.md", "./a.md", "[A](a.md)", "sub/../a.md", "/notes/a.md", "b.md", "c.md")
    results = {resolve_entries("notes/x.md", permutation) for permutation in itertools.permutations(entries)}
    assert results == {(("notes/a.md", "notes/b.md", "notes/c.md"), ())}


def test_declaration_order_does_not_matter_in_any_form() -> None:
    forms = [
        frontmatter("derived_from: c.md, a.md, b.md"),
        frontmatter("derived_from: [b.md, c.md, a.md]"),
        frontmatter("derived_from:", "  - a.md", "  - c.md", "  - b.md"),
    ]
    assert [declared(text) for text in forms] == [(("notes/a.md", "notes/b.md", "notes/c.md"), [])] * len(forms)


# -- through a scan of a memory folder -----------------------------------------------------


def test_frontmatter_over_the_limit_is_reported_and_the_file_declares_nothing(memory, clock) -> None:
    memory.write("a.md", "facts")
    huge = "---\nderived_from: a.md\ndescription: " + "x" * FRONTMATTER_LIMIT + "\n---\nbody\n"
    memory.write_bytes("huge.md", huge.encode())
    memory.write("long-body.md", "y" * (2 * FRONTMATTER_LIMIT), derived_from="a.md")
    report = memory.open().refresh(now=clock.now)
    assert report.derived == ("long-body.md",)
    assert [(p.path, p.kind) for p in report.problems] == [("huge.md", ProblemKind.BAD_FRONTMATTER)]


def test_problems_name_their_file_and_never_stop_the_scan(memory, clock) -> None:
    memory.write("a.md", "facts")
    memory.write_bytes("latin1.md", b"---\nname: caf\xe9\nderived_from: a.md\n---\n")
    memory.write_bytes("open.md", b"---\nderived_from: a.md\nno closing line\n")
    memory.write("typed.md", derived_from="42")
    memory.write("escape.md", derived_from="../../etc/passwd, a.md")
    memory.write("good.md", derived_from="a.md")
    report = memory.open().refresh(now=clock.now)
    assert report.derived == ("escape.md", "good.md")
    assert [(p.path, p.kind) for p in report.problems] == [
        ("escape.md", ProblemKind.OUTSIDE_ROOT),
        ("latin1.md", ProblemKind.UNREADABLE),
        ("open.md", ProblemKind.BAD_FRONTMATTER),
        ("typed.md", ProblemKind.BAD_FRONTMATTER),
    ]
    assert report.problems[0].detail == "../../etc/passwd"


@settings(max_examples=examples(1000), deadline=None)
@given(
    st.sampled_from(["x.md", "notes/x.md", "a/b/x.md", "/x.md", "a//b/x.md", ".provgraph/x.md"]),
    st.text(st.sampled_from("ab./-_ ~:\\#[]()<>|%\x00"), max_size=10),
    st.sampled_from([(), ("/srv/Memory",), ("/srv/Memory", "/srv"), ("/srv/Memory/",), ("/",)]),
)
def test_a_plain_path_entry_resolves_as_every_other_entry_does(
    declaring: str, entry: str, roots: tuple[str, ...]
) -> None:
    """Entries of plain path characters take shorter ways; each must end where the general one does."""
    lookup = Lookup(frozenset({"x.md", "a/b.md"}), roots)
    entries = (entry, "/srv/Memory/" + entry, "/srv/Memory" + entry, "/" + entry, "../" + entry, "a/../" + entry)
    quick = resolve_entries(declaring, entries, lookup)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(declarations, "_PLAIN_PATH", r"(?!)")
        patch.setattr(declarations, "_relative_path", lambda: re.compile(r"(?!)"))
        general = resolve_entries(declaring, entries, lookup)
    assert quick == general


@settings(max_examples=examples(2000), deadline=None)
@given(
    st.sampled_from(["x.md", "notes/x.md", "a/b/x.md", "/x.md", "a//b/x.md", ".provgraph/x.md"]),
    st.text(st.sampled_from("ab./-_ #<>()%:~\\\x00\"'"), max_size=6),
    st.sampled_from(["t", "", "a](b", "[t]"]),
    st.sampled_from([(), ("/srv/Memory",), ("/srv/Memory/",), ("/",)]),
)
def test_a_link_to_a_plain_path_resolves_as_every_other_link_does(
    declaring: str, target: str, text: str, roots: tuple[str, ...]
) -> None:
    """Links whose target is a plain path take a shorter way; each must end where the general
    one does, refusals and their messages included."""
    lookup = Lookup(frozenset({"x.md", "a/b.md"}), roots)
    targets = (target, "/srv/Memory/" + target, "/" + target, "../" + target, "a/../" + target, "../../" + target)
    entries = tuple(f"[{text}]({written})" for written in targets)
    quick = resolve_entries(declaring, entries, lookup)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(declarations, "_plain_link", lambda: re.compile(r"(?!)"))
        general = resolve_entries(declaring, entries, lookup)
    assert quick == general


@settings(max_examples=examples(400), deadline=None)
@given(st.text(st.sampled_from("ab/."), max_size=8))
def test_a_declaring_files_folder_is_the_one_dirname_gives(declaring: str) -> None:
    """Entries are joined to the declaring file's folder, found by a shorter way than
    ``posixpath.dirname``; it must be the same folder, with its ``/`` once."""
    folder = posixpath.dirname(declaring)
    prefix = f"{folder}/" if folder[-1:] not in ("/", "") else folder
    assert declarations._folder_and_prefix(declaring) == (folder, prefix)
