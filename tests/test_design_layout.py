"""docs/design.md's layout names every module of the package, and nothing that is not there.

The layout is where an operator or a new contributor finds their room; a list that drifts
from the code sends them to a module that moved or hides one that exists. The rules of the
list are written above it in design.md; `read_layout` is their one reader, and the tests at
the end hold it to made-up trees, so that a layout test which passes is known to be able to
fail.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DESIGN = ROOT / "docs" / "design.md"
PACKAGE = "iri_gateway"
INDENT = 2
_LINE = re.compile(r"^(?P<indent> *)(?P<name>\S+)(?P<rest>.*)$")
_NAME = re.compile(r"^[A-Za-z0-9_.-]+(?:/|\.py)$")


@dataclass
class Layout:
    """What a layout block says: the folders and modules it names (paths relative to the
    repository), and every line that breaks the rules, with why."""

    folders: list[str] = field(default_factory=list)
    modules: list[str] = field(default_factory=list)
    broken: list[str] = field(default_factory=list)


def layout_block(markdown: str) -> list[str]:
    """The lines of the one fenced block of the `## Layout` section."""
    section = markdown.split("\n## Layout\n", 1)
    if len(section) != 2:
        raise AssertionError("docs/design.md has no '## Layout' section")
    body = section[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", body, flags=re.MULTILINE | re.DOTALL)
    if len(blocks) != 1:
        raise AssertionError(f"the Layout section has {len(blocks)} fenced blocks, not one")
    return str(blocks[0]).splitlines()


def read_layout(lines: list[str]) -> Layout:
    """Folders and modules of a layout block: each line starts, two spaces a level deeper
    than its folder, with `name/` or `name.py`, then two spaces and its job."""
    layout = Layout()
    parents: list[str] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"layout line {number} {line.strip()!r}"
        entry = _LINE.match(line)
        assert entry is not None  # any line that is not blank
        indent, name, rest = entry["indent"], entry["name"], entry["rest"]
        if not _NAME.match(name):
            layout.broken.append(f"{where}: starts with neither a folder/ nor a module.py")
            continue
        if rest and not rest.startswith("  "):
            layout.broken.append(f"{where}: two spaces or more between the name and its job")
            continue
        if len(indent) % INDENT or len(indent) // INDENT > len(parents):
            layout.broken.append(
                f"{where}: indented {len(indent)} spaces; a line is {INDENT} spaces deeper "
                "than its folder, and at most one level deeper than the line above"
            )
            continue
        del parents[len(indent) // INDENT :]
        path = "/".join([*parents, name.rstrip("/")])
        if name.endswith("/"):
            parents.append(name.rstrip("/"))
            layout.folders.append(path)
        else:
            layout.modules.append(path)
            if not rest.strip():
                layout.broken.append(f"{where}: no job written after the module")
    return layout


def _defines_something(module: Path) -> bool:
    tree = ast.parse(module.read_text(encoding="utf-8"))
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return any(isinstance(node, kinds) for node in tree.body)


def package_modules(root: Path) -> set[str]:
    """The modules the layout must list: every `.py` under the package, but an `__init__.py`
    only when it defines a function or class (a package's face is not a room)."""
    return {
        module.relative_to(root).as_posix()
        for module in (root / PACKAGE).rglob("*.py")
        if module.name != "__init__.py" or _defines_something(module)
    }


def disagreements(layout: Layout, root: Path) -> list[str]:
    """Everything wrong with `layout` against the tree at `root`, each said in full."""
    found = list(layout.broken)
    listed = [m for m in layout.modules if m.startswith(f"{PACKAGE}/")]
    actual = package_modules(root)
    found += [f"{m}: exists, missing from the layout" for m in sorted(actual - set(listed))]
    found += [f"{m}: in the layout, no such module" for m in sorted(set(listed) - actual)]
    found += [
        f"{m}: in the layout, no such module"
        for m in layout.modules
        if m not in listed and not (root / m).is_file()
    ]
    found += [
        f"{d}/: in the layout, no such folder" for d in layout.folders if not (root / d).is_dir()
    ]
    found += [f"{m}: listed twice" for m in sorted({m for m in listed if listed.count(m) > 1})]
    return found


def test_design_md_lists_every_module_and_only_real_ones() -> None:
    layout = read_layout(layout_block(DESIGN.read_text(encoding="utf-8")))
    assert disagreements(layout, ROOT) == []
    assert len(layout.modules) == len(package_modules(ROOT)), "every module, once"


# ---- the reader itself, on made-up trees ---------------------------------------------------


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A package with a face, an `__init__.py` that defines something, and three modules."""
    for name, text in {
        "iri_gateway/__init__.py": '"""face"""\nfrom iri_gateway.a import x\n',
        "iri_gateway/a.py": "x = 1\n",
        "iri_gateway/sub/__init__.py": "def discover() -> None: ...\n",
        "iri_gateway/sub/b.py": "",
        "iri_gateway/sub/deeper/c.py": "",
        "docs/design.md": "",
    }.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


GOOD = """\
docs/              the pages
iri_gateway/       the package
  a.py             one job
  sub/             a folder
    __init__.py    finds things
    b.py           another job
    deeper/        deeper still
      c.py         the last job
"""


def test_a_complete_layout_has_no_disagreement(tree: Path) -> None:
    layout = read_layout(GOOD.splitlines())
    assert layout.modules == [
        "iri_gateway/a.py",
        "iri_gateway/sub/__init__.py",
        "iri_gateway/sub/b.py",
        "iri_gateway/sub/deeper/c.py",
    ]
    assert disagreements(layout, tree) == []


def test_a_module_missing_from_the_layout_is_named(tree: Path) -> None:
    text = GOOD.replace("    b.py           another job\n", "")
    assert disagreements(read_layout(text.splitlines()), tree) == [
        "iri_gateway/sub/b.py: exists, missing from the layout"
    ]


def test_an_init_that_defines_something_must_be_listed(tree: Path) -> None:
    text = GOOD.replace("    __init__.py    finds things\n", "")
    assert disagreements(read_layout(text.splitlines()), tree) == [
        "iri_gateway/sub/__init__.py: exists, missing from the layout"
    ]


def test_a_module_or_folder_that_does_not_exist_is_named(tree: Path) -> None:
    text = GOOD + "  gone.py          moved away\n  old/             gone too\n"
    assert disagreements(read_layout(text.splitlines()), tree) == [
        "iri_gateway/gone.py: in the layout, no such module",
        "iri_gateway/old/: in the layout, no such folder",
    ]


def test_a_module_under_the_wrong_folder_is_both_missing_and_unknown(tree: Path) -> None:
    text = GOOD.replace("      c.py ", "    c.py   ")
    assert disagreements(read_layout(text.splitlines()), tree) == [
        "iri_gateway/sub/deeper/c.py: exists, missing from the layout",
        "iri_gateway/sub/c.py: in the layout, no such module",
    ]


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("  a.py", "no job written after the module"),
        ("  a.py one space", "two spaces or more between the name and its job"),
        ("  a.py:          a colon", "starts with neither a folder/ nor a module.py"),
        ("   a.py          odd indent", "indented 3 spaces"),
        ("      a.py       two levels down", "indented 6 spaces"),
        ("  and the rest of a sentence", "starts with neither a folder/ nor a module.py"),
    ],
)
def test_lines_breaking_the_rules_are_refused(tree: Path, line: str, why: str) -> None:
    text = GOOD.replace("  a.py             one job", line)
    found = disagreements(read_layout(text.splitlines()), tree)
    assert found and why in found[0], found


def test_the_layout_block_is_found_and_must_be_one() -> None:
    page = "# Design\n\n## Layout\n\ntext\n\n```\na.py  x\n```\n\n## Next\n\n```\nb.py  y\n```\n"
    assert layout_block(page) == ["a.py  x"]
    with pytest.raises(AssertionError, match="2 fenced blocks"):
        layout_block(page.replace("## Next", "more"))
    with pytest.raises(AssertionError, match="no '## Layout' section"):
        layout_block("# Design\n")
