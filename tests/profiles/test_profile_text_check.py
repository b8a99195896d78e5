"""`text_check.check_text` on arbitrary text: whatever a client sends, the answer is a check
or a ProfileError with located issues, never another exception (which the API would answer
with a 500). The shipped local profile with one line dropped, doubled or indented with a tab
is the text an admin is likeliest to send."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from iri_gateway.errors import ProfileError
from iri_gateway.profiles.text_check import check_text
from iri_gateway.shipped import shipped_dir

LINES = (shipped_dir("facility_profiles") / "local.yaml").read_text(encoding="utf-8").split("\n")


def _checked_or_refused(text: str) -> None:
    try:
        result = check_text(text, "fuzz.yaml", None)
    except ProfileError as error:
        assert error.issues
        assert all(issue.file == "fuzz.yaml" for issue in error.issues)
        assert all(issue.line is None or issue.line >= 1 for issue in error.issues)
    else:
        assert result.rows


@settings(max_examples=60, deadline=None)
@given(st.text(st.characters(), max_size=300))
def test_any_text_is_checked_or_refused_with_issues(text: str) -> None:
    _checked_or_refused(text)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, len(LINES) - 1), st.sampled_from(["drop", "double", "tab", "surrogate"]))
def test_a_damaged_local_profile_is_checked_or_refused(index: int, damage: str) -> None:
    lines = list(LINES)
    if damage == "drop":
        del lines[index]
    elif damage == "double":
        lines.insert(index, lines[index])
    elif damage == "tab":
        lines[index] = "\t" + lines[index]
    else:
        lines[index] += "\ud800"
    _checked_or_refused("\n".join(lines))
