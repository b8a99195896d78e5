"""paramiko's SSH transport, except that its reading thread never waits for a key re-exchange.

paramiko sends the replies its own reading thread makes (a channel's CLOSE answering the
server's, a reply to a channel request) through `_send_user_message`, which waits while
keys are being re-exchanged: on the very thread that must read the server's NEWKEYS to end
the exchange. paramiko starts a re-exchange every 512 MiB each way; when a remote command
ends during one, that thread waits 30 s, gives up, and the connection dies with every
command and stream on it (paramiko issue #822, open since 2016). Seen here as a 1 GiB
download through the login node cut 512 KiB short, and reproduced at will by lowering the
re-exchange threshold (tests/integration/test_ssh_rekey.py).

`RekeySafeTransport` holds those replies while an exchange is under way (RFC 4253 §7.1
forbids sending them then) and sends them, in order, as it ends: before any other thread's
message, since the exchange ends with the lock they wait for held.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol, cast

import paramiko


class _PrivateSending(Protocol):
    """The two paramiko internals this module relies on (checked when it is imported)."""

    def _send_user_message(self, data: paramiko.Message) -> None: ...
    def _send_message(self, data: paramiko.Message) -> None: ...


for _name in ("_send_user_message", "_send_message"):
    if not callable(getattr(paramiko.Transport, _name, None)):
        raise RuntimeError(f"paramiko {paramiko.__version__} has no Transport.{_name}: "
                           "iri_gateway.transport.ssh_rekey must be updated for it")


class _ClearToSend(threading.Event):
    """paramiko's "no exchange under way" flag; as it is set (paramiko holds
    `clear_to_send_lock` then), the held replies go out first."""

    def __init__(self, on_set: Callable[[], None]) -> None:
        super().__init__()
        self._on_set = on_set

    def set(self) -> None:
        self._on_set()
        super().set()


class RekeySafeTransport(paramiko.Transport):
    """A paramiko Transport whose reading thread holds its replies during a key re-exchange
    instead of waiting for the exchange it alone can finish (module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._held: list[paramiko.Message] = []
        self.clear_to_send = _ClearToSend(self._send_held)

    def _send_user_message(self, data: paramiko.Message) -> None:
        original = cast(_PrivateSending, super())
        if threading.current_thread() is not self:
            original._send_user_message(data)
            return
        with self.clear_to_send_lock:
            if self.clear_to_send.is_set():
                cast(_PrivateSending, self)._send_message(data)
            else:
                self._held.append(data)

    def _send_held(self) -> None:
        """Send the replies held during the exchange that is ending (the caller, paramiko's
        reading thread, holds `clear_to_send_lock`)."""
        held, self._held = self._held, []
        for message in held:
            cast(_PrivateSending, self)._send_message(message)
