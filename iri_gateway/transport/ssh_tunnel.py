"""An SSH `direct-tcpip` channel handed to its caller as an ordinary socket.

The port proxy speaks to a job's port with asyncio, which needs a real socket; a paramiko
channel is not one. So the channel is bridged to one end of a `socketpair`, and the caller
gets the other end: two threads copy bytes, one each way, each ending its direction with a
half-close (EOF) when its source ends, and the last of them closes both. Closing the
caller's socket ends the bridge (the channel sees EOF, then is closed), as does the far end
closing the channel. Threads rather than a selector: a tunnel is a user's connection to
their own service, counted against `proxy_connections_per_user`, so their number is bounded.
"""

from __future__ import annotations

import contextlib
import socket
import threading

import paramiko

CHUNK = 65536


class _Bridge:
    """Bytes between a channel and the bridge's end of a socket pair, until both ends ended."""

    def __init__(self, channel: paramiko.Channel, end: socket.socket, name: str) -> None:
        self.channel, self.end = channel, end
        self._lock = threading.Lock()
        self._running = 2
        channel.settimeout(None)
        for target, direction in ((self._from_channel, "in"), (self._to_channel, "out")):
            threading.Thread(
                target=target, name=f"ssh-tunnel-{name}-{direction}", daemon=True
            ).start()

    def _from_channel(self) -> None:
        try:
            while data := self.channel.recv(CHUNK):
                self.end.sendall(data)
            self.end.shutdown(socket.SHUT_WR)
        except OSError:
            self._abort()
        finally:
            self._done()

    def _to_channel(self) -> None:
        try:
            while data := self.end.recv(CHUNK):
                self.channel.sendall(data)
            self.channel.shutdown_write()
        except (OSError, EOFError, paramiko.SSHException):
            self._abort()
        finally:
            self._done()

    def _abort(self) -> None:
        """One direction failed: end both at once (the other thread wakes with an error or
        an end)."""
        self.channel.close()
        with contextlib.suppress(OSError):
            self.end.shutdown(socket.SHUT_RDWR)

    def _done(self) -> None:
        with self._lock:
            self._running -= 1
            last = self._running == 0
        if last:
            self.channel.close()
            self.end.close()


def bridged(channel: paramiko.Channel, name: str) -> socket.socket:
    """The caller's end of a socket bridged to `channel`."""
    ours, theirs = socket.socketpair()
    _Bridge(channel, ours, name)
    return theirs
