"""Reading what `qstat -F json` prints, which is not always JSON.

The real OpenPBS 23.06.06 escapes '"', newlines and tabs in values, but not a '\\' (an
account `back\\slash` comes out as `"back\\slash"`: an invalid escape), prints other control
characters raw or as `^C`, and shows every byte above 0x7f in a caret form of its own: `é`
becomes `^<0x03>^<0xe9>`, and the first byte of `€` (0xe2) becomes `^"`, an unescaped quote
(tests/data/pbs/real-*.json). One job with such a value in any attribute (its account, a
variable of its environment) would make the whole answer unreadable, and with it the status of
every job of the query. So the reader tries, in turn:

1. JSON, accepting raw control characters;
2. the same with each '\\' that starts no JSON escape read as itself;
3. qstat's own layout: one `"name":value` per line, `"name":{` opening an object and `}`
   closing it (qstat.c writes nothing else), a string value being everything between the
   quotes that open and end its line.
"""

from __future__ import annotations

import json
import re
from typing import Any

_JSON_ESCAPE = re.compile(r"\\.", re.DOTALL)  # a backslash and the character after it
_JSON_ESCAPES = frozenset('"\\/bfnrtu')
_OPEN = re.compile(r'^"((?:[^"\\]|\\.)*)":\{$')
_PAIR = re.compile(r'^"((?:[^"\\]|\\.)*)":(.*?),?$')


def loads(text: str) -> Any:
    """The document qstat printed; json.JSONDecodeError when even its layout cannot be read."""
    try:
        return json.loads(text, strict=False)
    except json.JSONDecodeError as error:
        first = error
    try:
        return json.loads(_JSON_ESCAPE.sub(_escape_lone_backslash, text), strict=False)
    except json.JSONDecodeError:
        pass
    try:
        return _by_lines(text)
    except ValueError:
        raise first from None


def _escape_lone_backslash(match: re.Match[str]) -> str:
    pair = match.group()
    return pair if pair[1] in _JSON_ESCAPES else "\\\\" + pair[1]


def _by_lines(text: str) -> dict[str, Any]:
    """qstat's layout, line by line; ValueError when a line has another form."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines or lines[0] != "{" or lines[-1] != "}":
        raise ValueError("not qstat's layout: no outer braces")
    root: dict[str, Any] = {}
    stack = [root]
    for line in lines[1:-1]:
        if line in ("}", "},"):
            if len(stack) == 1:
                raise ValueError("not qstat's layout: '}' closes nothing")
            stack.pop()
        elif opened := _OPEN.match(line):
            child: dict[str, Any] = {}
            stack[-1][_string(opened.group(1))] = child
            stack.append(child)
        elif pair := _PAIR.match(line):
            stack[-1][_string(pair.group(1))] = _value(pair.group(2))
        else:
            raise ValueError(f"not qstat's layout: {line[:60]!r}")
    if len(stack) != 1:
        raise ValueError("not qstat's layout: an object is not closed")
    return root


def _value(raw: str) -> Any:
    if len(raw) >= 2 and raw.startswith('"') and raw.endswith('"'):
        return _string(raw[1:-1])
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        raise ValueError(f"not qstat's layout: value {raw[:60]!r}") from None


def _string(inner: str) -> str:
    """The text between the quotes: JSON-unescaped where it can be, else as printed."""
    try:
        value: str = json.loads(f'"{inner}"', strict=False)
        return value
    except json.JSONDecodeError:
        return inner
