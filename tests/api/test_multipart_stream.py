"""The streaming multipart reader of uploads: the same bytes however the body is cut into
chunks (boundary-like bytes inside the file included), and a malformed body is refused."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from iri_gateway.api.plumbing.multipart import FilePart, MultipartError, boundary_of

BOUNDARY = b"b0undary"


def body(data: bytes, *, before: bytes = b"", after: bytes = b"") -> bytes:
    return (
        before + b'--b0undary\r\nContent-Disposition: form-data; name="note"\r\n\r\n'
        b'not the file\r\n--b0undary\r\nContent-Disposition: form-data; name="file"; '
        b'filename="x"\r\nContent-Type: application/octet-stream\r\n\r\n'
        + data
        + b"\r\n--b0undary--\r\n"
        + after
    )


def read(whole: bytes, cuts: list[int]) -> bytes:
    part = FilePart(BOUNDARY, "file")
    got = bytearray()
    start = 0
    for cut in [*sorted(c % (len(whole) + 1) for c in cuts), len(whole)]:
        for piece in part.feed(whole[start : max(cut, start)]):
            got += piece
        start = max(cut, start)
    part.close()
    return bytes(got)


@given(st.binary(max_size=300), st.lists(st.integers(min_value=0), max_size=12))
def test_the_file_part_is_read_whole_whatever_the_chunks(data: bytes, cuts: list[int]) -> None:
    assert read(body(data, before=b"preamble\r\n", after=b"epilogue"), cuts) == data


@pytest.mark.parametrize("data", [b"\r\n--b0undar", b"--b0undary", b"\r\n-", b"\r\n", b""])
def test_bytes_that_resemble_the_boundary_stay_in_the_file(data: bytes) -> None:
    whole = body(data)
    assert read(whole, list(range(len(whole)))) == data


@pytest.mark.parametrize(
    ("whole", "says"),
    [
        (body(b"x")[:-20], "ended before"),
        (
            b'--b0undary\r\nContent-Disposition: form-data; name="other"\r\n\r\nx\r\n--b0undary--',
            "no 'file' part",
        ),
        (b"--b0undaryXY", "neither a line break"),
    ],
)
def test_malformed_bodies_are_refused_with_a_reason(whole: bytes, says: str) -> None:
    part = FilePart(BOUNDARY, "file")
    with pytest.raises(MultipartError, match=says):
        part.feed(whole)
        part.close()


def test_two_file_parts_are_refused() -> None:
    twice = (
        b'--b0undary\r\nContent-Disposition: form-data; name="file"\r\n\r\na\r\n'
        b'--b0undary\r\nContent-Disposition: form-data; name="file"\r\n\r\nb\r\n'
        b"--b0undary--\r\n"
    )
    with pytest.raises(MultipartError, match="more than one"):
        FilePart(BOUNDARY, "file").feed(twice)


def test_the_boundary_comes_from_the_content_type() -> None:
    assert boundary_of('multipart/form-data; boundary="ab c"') == b"ab c"
    assert boundary_of("application/octet-stream") is None
    with pytest.raises(MultipartError, match="no boundary"):
        boundary_of("multipart/form-data")
