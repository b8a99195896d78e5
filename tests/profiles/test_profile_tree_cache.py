"""The command line's cache of parsed profile trees (`iri_gateway.profiles.tree_cache`).

A cached tree must give exactly the profile that parsing gives, must never outlive the bytes it
was parsed from (whatever the file's modification time says), must not hide the file:line of a
profile's errors, and must never be needed: a broken or unwritable cache means a parse.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from iri_gateway.errors import ProfileError
from iri_gateway.profiles import loading
from iri_gateway.profiles.loading import ProfileRegistry, load_profile
from iri_gateway.profiles.tree_cache import NotPlain, ProfileTreeCache, plain_tree
from tests.conftest import TEST_PROFILE

SHIPPED_FILES = ProfileRegistry.builtin_files()


def rt_tree(text: str) -> Any:
    return YAML(typ="rt").load(text)


@pytest.fixture
def trees(tmp_path: Path) -> ProfileTreeCache:
    return ProfileTreeCache(tmp_path / "cache")


def copy_profile(source: Path, folder: Path) -> Path:
    target = folder / source.name
    target.write_bytes(source.read_bytes())
    return target


@pytest.mark.parametrize("path", [*SHIPPED_FILES, TEST_PROFILE], ids=lambda p: p.name)
def test_a_cached_tree_gives_the_profile_that_parsing_gives(
    path: Path, trees: ProfileTreeCache
) -> None:
    parsed = load_profile(path)
    assert load_profile(path, trees) == parsed  # parsed, and kept
    assert trees.get(path, path.read_bytes()) is not None
    cached = load_profile(path, trees)
    assert cached == parsed
    assert cached.model_dump_json() == parsed.model_dump_json()


def test_a_second_load_does_not_parse(
    trees: ProfileTreeCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = ProfileRegistry.builtin(trees)

    def refuse(*args: object) -> None:
        raise AssertionError("parsed although the cache holds the tree")

    monkeypatch.setattr(loading, "parse_yaml_mapping", refuse)
    second = ProfileRegistry.builtin(trees)
    assert second.ids() == first.ids()
    assert [r.profile for r in second] == [r.profile for r in first]


def test_an_edit_that_keeps_size_and_mtime_is_parsed_again(
    tmp_path: Path, trees: ProfileTreeCache
) -> None:
    path = copy_profile(TEST_PROFILE, tmp_path)
    before = load_profile(path, trees)
    stat = path.stat()
    text = path.read_text()
    edited = text.replace(
        f"name: {before.facility.name}", "name: " + "X" * len(before.facility.name), 1
    )
    assert edited != text and len(edited) == len(text)
    path.write_text(edited)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_mtime_ns == stat.st_mtime_ns and path.stat().st_size == stat.st_size
    after = load_profile(path, trees)
    assert after.facility.name == "X" * len(before.facility.name)


def test_errors_keep_their_lines_with_a_cache(tmp_path: Path, trees: ProfileTreeCache) -> None:
    path = copy_profile(TEST_PROFILE, tmp_path)
    path.write_text(path.read_text() + "unknown_top_level_key: 1\n")
    with pytest.raises(ProfileError) as without:
        load_profile(path)
    with pytest.raises(ProfileError) as with_cache:
        load_profile(path, trees)
    assert with_cache.value.issues == without.value.issues
    assert without.value.issues[0].line == len(path.read_text().splitlines())
    assert trees.get(path, path.read_bytes()) is None  # a broken profile is never kept


def test_a_cached_tree_the_models_refuse_is_parsed_again(
    tmp_path: Path, trees: ProfileTreeCache
) -> None:
    """A tree kept by an older gateway whose models changed since: the file decides."""
    path = copy_profile(TEST_PROFILE, tmp_path)
    parsed = load_profile(path, trees)
    (entry_file,) = trees.folder.glob("*.json")
    entry = json.loads(entry_file.read_text())
    entry["tree"]["no_such_field"] = True
    entry_file.write_text(json.dumps(entry))
    assert load_profile(path, trees) == parsed


@pytest.mark.parametrize("garbage", [b"", b"{not json", b"[]", b'{"key": 1}'])
def test_a_broken_entry_is_a_miss_and_is_replaced(
    tmp_path: Path, trees: ProfileTreeCache, garbage: bytes
) -> None:
    path = copy_profile(TEST_PROFILE, tmp_path)
    parsed = load_profile(path, trees)
    (entry_file,) = trees.folder.glob("*.json")
    entry_file.write_bytes(garbage)
    assert load_profile(path, trees) == parsed
    assert trees.get(path, path.read_bytes()) is not None


def test_an_unwritable_cache_only_means_parsing(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    trees = ProfileTreeCache(blocker / "cache")
    assert load_profile(TEST_PROFILE, trees) == load_profile(TEST_PROFILE)
    assert trees.get(TEST_PROFILE, TEST_PROFILE.read_bytes()) is None


def test_entries_are_per_file_and_private(tmp_path: Path, trees: ProfileTreeCache) -> None:
    ProfileRegistry.builtin(trees)
    ProfileRegistry.builtin(trees)
    entries = sorted(trees.folder.iterdir())
    assert len(entries) == len(SHIPPED_FILES)  # rewritten in place, never piling up
    assert trees.folder.stat().st_mode & 0o777 == 0o700
    assert all(entry.stat().st_mode & 0o077 == 0 for entry in entries)


def test_ruamel_scalars_become_the_plain_values() -> None:
    tree = rt_tree(
        "a: 0x10\nb: 1_000\nc: 1.50\nd: |\n  two\n  lines\ne: [x, {f: no}]\n"
        "g: &anchor {h: 1}\ni:\n  <<: *anchor\n  j: 2\n"
    )
    plain = plain_tree(tree)
    assert plain == {
        "a": 16,
        "b": 1000,
        "c": 1.5,
        "d": "two\nlines\n",
        "e": ["x", {"f": "no"}],
        "g": {"h": 1},
        "i": {"j": 2, "h": 1},
    }
    assert json.loads(json.dumps(plain)) == plain

    def kinds(node: Any) -> set[type]:
        if isinstance(node, dict):
            return {dict}.union(*(kinds(v) for v in node.values()))
        if isinstance(node, list):
            return {list}.union(*(kinds(v) for v in node))
        return {type(node)}

    assert kinds(plain) <= {dict, list, str, int, float, bool}


@pytest.mark.parametrize(
    "text",
    [
        "when: 2024-01-01\n",  # a date
        "flag: &yes true\nagain: *yes\n",  # anchored: ruamel.yaml's ScalarBoolean, an int
        "1: one\n",  # a key that is not a string
        "big: .inf\n",  # JSON has no infinity
        "tags: !!set {a, b}\n",  # a set
    ],
    ids=["date", "anchored-bool", "int-key", "infinity", "set"],
)
def test_trees_json_would_change_are_refused(text: str) -> None:
    with pytest.raises(NotPlain):
        plain_tree(rt_tree(text))


def test_a_profile_with_a_value_json_would_change_is_parsed_every_time(
    tmp_path: Path, trees: ProfileTreeCache
) -> None:
    path = copy_profile(TEST_PROFILE, tmp_path)
    text = path.read_text()
    anchor = "    name: Test GPU cluster\n"
    assert anchor in text
    path.write_text(
        text.replace(anchor, anchor + "    labels: {fast_disk: &on true, shared: *on}\n", 1)
    )
    parsed = load_profile(path)
    assert parsed.resources[0].labels.keys() == {"fast_disk", "shared"}
    assert load_profile(path, trees) == parsed
    assert trees.get(path, path.read_bytes()) is None
    assert load_profile(path, trees) == parsed


def test_the_user_cache_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert ProfileTreeCache.for_user() == ProfileTreeCache(
        tmp_path / "iri-gateway" / "profile-trees"
    )
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert ProfileTreeCache.for_user() == ProfileTreeCache(
        tmp_path / "home" / ".cache" / "iri-gateway" / "profile-trees"
    )
