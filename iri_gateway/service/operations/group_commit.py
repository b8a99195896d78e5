"""Group commit: writes asked for at the same time by several threads share one transaction.

Sixteen submitters that each record a native id the moment their `sbatch` answers would
take turns on the database, one commit each; with the interpreter shared by all of them the
turn passes slowly, and a bulk launch of a thousand jobs spent most of its time in that
queue. Here the first caller becomes the leader and writes every request waiting at that
moment in one transaction; those arriving meanwhile wait for the next leader, which takes
them all. Under no load a request is written at once, alone, as before. No library offers
this for SQLAlchemy sessions; it is a few lines on two locks.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar, cast

Request = TypeVar("Request")
Answer = TypeVar("Answer")


@dataclass
class _Waiting(Generic[Request, Answer]):
    request: Request
    done: bool = False
    answer: Answer | None = None
    error: BaseException | None = None


class GroupCommit(Generic[Request, Answer]):
    """Calls `write` with the requests waiting together (in the order they came); `write`
    answers each, in order, with its answer or the exception for that request alone (the
    others still commit). An exception `write` raises is every one of the batch's."""

    def __init__(self, write: Callable[[Sequence[Request]], Sequence[Answer | BaseException]]):
        self._write = write
        self._waiting: list[_Waiting[Request, Answer]] = []
        self._lock = threading.Lock()  # guards `_waiting`
        self._leader = threading.Lock()  # held by the caller writing a batch

    def __call__(self, request: Request) -> Answer:
        mine: _Waiting[Request, Answer] = _Waiting(request)
        with self._lock:
            self._waiting.append(mine)
        with self._leader:
            if not mine.done:
                with self._lock:
                    batch, self._waiting = self._waiting, []
                self._run(batch)
        if mine.error is not None:
            raise mine.error
        return cast(Answer, mine.answer)  # set for every request done without an error

    def _run(self, batch: list[_Waiting[Request, Answer]]) -> None:
        try:
            answers = self._write([waiting.request for waiting in batch])
            if len(answers) != len(batch):
                raise RuntimeError(f"a group write answered {len(answers)} of {len(batch)}")
        except BaseException as error:
            for waiting in batch:
                waiting.error, waiting.done = error, True
            return
        for waiting, answer in zip(batch, answers, strict=True):
            if isinstance(answer, BaseException):
                waiting.error = answer
            else:
                waiting.answer = answer
            waiting.done = True
