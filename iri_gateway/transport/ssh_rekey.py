"""paramiko's SSH transport, except that no thread waits for a key re-exchange.

paramiko sends the replies its own reading thread makes (a channel's CLOSE answering the
server's, a reply to a channel request) through `_send_user_message`, which waits while
keys are being re-exchanged: on the very thread that must read the server's NEWKEYS to end
the exchange. paramiko starts a re-exchange every 512 MiB each way; when a remote command
ends during one, that thread waits 30 s, gives up, and the connection dies with every
command and stream on it (paramiko issue #822, open since 2016). Seen here as a 1 GiB
download through the login node cut 512 KiB short, and reproduced at will by lowering the
re-exchange threshold (tests/integration/test_ssh_rekey.py).

`RekeySafeTransport` holds every message made while an exchange is under way (RFC 4253
§7.1 forbids sending them then), whichever thread makes it, and sends them in the order
they were made as the exchange ends, before anything made after. Holding only the reading
thread's messages is not enough: a command's input closed by our thread (its EOF, waiting
for the exchange) and the server's CLOSE answered by the reading thread (held) then went
out CLOSE first, and OpenSSH ends the whole connection on an EOF for a channel it has
freed ("ieof packet referred to nonexistent channel"). While held, a message costs only
memory: channel data is bounded by the channel's window, which is counted before.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol, cast

import paramiko


class _PrivateSending(Protocol):
    """The paramiko internal this module sends with (checked when it is imported, with the
    one it replaces)."""

    def _send_message(self, data: paramiko.Message) -> None: ...


for _name in ("_send_user_message", "_send_message"):
    if not callable(getattr(paramiko.Transport, _name, None)):
        raise RuntimeError(
            f"paramiko {paramiko.__version__} has no Transport.{_name}: "
            "iri_gateway.transport.ssh_rekey must be updated for it"
        )


class _ClearToSend(threading.Event):
    """paramiko's "no exchange under way" flag; as it is set (paramiko holds
    `clear_to_send_lock` then), the held messages go out first."""

    def __init__(self, on_set: Callable[[], None]) -> None:
        super().__init__()
        self._on_set = on_set

    def set(self) -> None:
        self._on_set()
        super().set()


class RekeySafeTransport(paramiko.Transport):
    """A paramiko Transport that holds the messages made during a key re-exchange and sends
    them, in order, as it ends, instead of making their threads wait for it: its reading
    thread among them, which alone can end it (module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._held: list[paramiko.Message] = []
        self.clear_to_send = _ClearToSend(self._send_held)

    def _send_user_message(self, data: paramiko.Message) -> None:
        """Send `data` now, or hold it while keys are being exchanged (paramiko's own waits
        for the exchange instead: module docstring); dropped once the connection is dead,
        as paramiko does."""
        with self.clear_to_send_lock:
            if self.clear_to_send.is_set():
                cast(_PrivateSending, self)._send_message(data)
            elif self.is_active():
                self._held.append(data)

    def _send_held(self) -> None:
        """Send the messages held during the exchange that is ending, in the order they were
        made (the caller, paramiko's reading thread, holds `clear_to_send_lock`)."""
        held, self._held = self._held, []
        for message in held:
            cast(_PrivateSending, self)._send_message(message)
