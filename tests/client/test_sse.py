"""The SDK's Server-Sent Events parser (client/sse.py) against the WHATWG grammar and hostile
input: line ends of every kind and split anywhere, comments, multi-line data, ids, retry, and
the bounds that keep a hostile server from growing the client's memory."""

from __future__ import annotations

import pytest

from iri_gateway.client.sse import ServerSentEvent, SSEDecoder, StreamTooLarge

STREAM = (
    "\ufeffretry: 1500\n"
    ": a comment\n"
    "id: 7\n"
    "event: job\n"
    "data: first\n"
    "data:second\n"
    "data\n"
    "\n"
    "data: no type, same id\n"
    "\n"
    "unknown: field\n"
    "id\n"
    "data: {}\n"
    "\n"
    "data: never dispatched"
)
EXPECTED = [
    ServerSentEvent("job", "first\nsecond\n", "7"),
    ServerSentEvent("message", "no type, same id", "7"),
    ServerSentEvent("message", "{}", ""),
]


def decode(pieces: list[str], decoder: SSEDecoder | None = None) -> list[ServerSentEvent]:
    decoder = decoder or SSEDecoder()
    events: list[ServerSentEvent] = []
    for piece in pieces:
        events += decoder.feed(piece)
    return events


@pytest.mark.parametrize("end", ["\n", "\r", "\r\n"])
def test_every_line_end_in_pieces_of_every_size(end: str) -> None:
    text = STREAM.replace("\n", end)
    for size in (1, 2, 3, 7, len(text)):
        decoder = SSEDecoder()
        pieces = [text[i : i + size] for i in range(0, len(text), size)]
        assert decode(pieces, decoder) == EXPECTED, (end, size)
        assert decoder.retry == 1500


def test_cr_then_lf_across_pieces_is_one_line_end() -> None:
    # A blank line between the CR and the LF would dispatch "a" early and lose nothing, but a
    # CR LF split must not count twice: "data: a\r" + "\n" + "data: b\n\n" is one event.
    assert decode(["data: a\r", "\ndata: b\n\n"]) == [ServerSentEvent("message", "a\nb", "")]
    assert decode(["data: a\r", "", "\ndata: b\n\n"]) == [ServerSentEvent("message", "a\nb", "")]


def test_ids_holding_nul_are_ignored_and_ids_persist() -> None:
    events = decode(["id: 1\ndata: a\n\nid: 2\x003\ndata: b\n\ndata: c\n\n"])
    assert [e.last_event_id for e in events] == ["1", "1", "1"]


def test_retry_takes_digits_only() -> None:
    decoder = SSEDecoder()
    decode(["retry: 10\n", "retry: -5\n", "retry: 1e3\n", "retry: ٣\n\n"], decoder)
    assert decoder.retry == 10


def test_a_huge_line_is_refused_not_kept() -> None:
    decoder = SSEDecoder(max_line=1000)
    with pytest.raises(StreamTooLarge, match="longer than 1000"):
        decode(["data: " + "x" * 2000 + "\n\n"], decoder)


def test_endless_data_without_a_newline_is_refused_early() -> None:
    decoder = SSEDecoder(max_line=10_000)
    fed = 0
    with pytest.raises(StreamTooLarge):
        while fed < 10_000_000:
            decoder.feed("y" * 4096)
            fed += 4096
    assert fed <= 10_000 + 4096


def test_an_event_growing_without_end_is_refused() -> None:
    decoder = SSEDecoder(max_event=100_000)
    with pytest.raises(StreamTooLarge, match="characters of data"):
        for _ in range(1000):
            decoder.feed("data: " + "z" * 1000 + "\n")


def test_a_ten_megabyte_comment_stream_is_refused() -> None:
    with pytest.raises(StreamTooLarge):
        SSEDecoder().feed(":" + "c" * 10 * 1024 * 1024)
