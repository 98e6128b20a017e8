"""A batch system (seed 004, TiKV): per-key state machines driven by messages, polled in batches.

Every FSM has a mailbox. Sending to an idle mailbox marks it *notified* and puts it on the ready
queue exactly once; a poller thread takes a batch of ready mailboxes and hands each FSM all (up
to ``max_messages_per_handle``) of its pending messages in one ``handle`` call. A mailbox goes
back on the ready queue only after its FSM returned, so no two pollers ever hold one FSM, and
messages of one FSM are handled in send order. FSM code is therefore single-threaded per key
(seed 000 risk 3: no shared mutable retry state between scheduler and workers).

``handle`` must be quick (decide, then submit long work to the executor): a poller holds its
whole batch while it works through it.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from typing import Any, Protocol

log = logging.getLogger(__name__)


class Fsm(Protocol):
    def handle(self, messages: list[Any]) -> None:
        """Process messages in order; exceptions are logged and the messages are not retried."""
        ...


class _Mailbox:
    __slots__ = ("key", "fsm", "messages", "notified", "closed")

    def __init__(self, key: str, fsm: Fsm) -> None:
        self.key = key
        self.fsm = fsm
        self.messages: deque[Any] = deque()
        self.notified = False  # on the ready queue or being handled
        self.closed = False  # unregistered: a poller holding it drops it


class BatchSystem:
    """FSMs by key, each with its mailbox, handled by ``pollers`` threads (or ``run_pending``).

    ``name`` prefixes the poller threads and the log lines.
    """

    def __init__(
        self,
        pollers: int = 2,
        batch_size: int = 32,
        *,
        name: str = "fsm",
        max_messages_per_handle: int = 256,
    ) -> None:
        if pollers < 1 or batch_size < 1 or max_messages_per_handle < 1:
            raise ValueError("pollers, batch_size and max_messages_per_handle must be >= 1")
        self.name = name
        self._pollers = pollers
        self._batch_size = batch_size
        self._per_handle = max_messages_per_handle
        self._cond = threading.Condition()
        self._boxes: dict[str, _Mailbox] = {}
        self._ready: deque[_Mailbox] = deque()
        self._threads: list[threading.Thread] = []
        self._stopping = False

    # ------------------------------------------------------------------ registry

    def register(self, key: str, fsm: Fsm) -> None:
        with self._cond:
            if key in self._boxes:
                raise ValueError(f"{self.name}: an FSM is already registered for {key!r}")
            self._boxes[key] = _Mailbox(key, fsm)

    def unregister(self, key: str) -> Fsm | None:
        """Remove ``key``'s FSM and drop its pending messages. A ``handle`` in progress finishes."""
        with self._cond:
            box = self._boxes.pop(key, None)
            if box is None:
                return None
            box.closed = True
            box.messages.clear()
            return box.fsm

    def __contains__(self, key: object) -> bool:
        with self._cond:
            return key in self._boxes

    def __len__(self) -> int:
        with self._cond:
            return len(self._boxes)

    def keys(self) -> list[str]:
        with self._cond:
            return list(self._boxes)

    def pending(self) -> int:
        """Messages not yet handed to an FSM."""
        with self._cond:
            return sum(len(box.messages) for box in self._boxes.values())

    # ------------------------------------------------------------------ messages

    def send(self, key: str, message: Any) -> bool:
        """Queue ``message`` for ``key``'s FSM; False if there is no such FSM."""
        with self._cond:
            box = self._boxes.get(key)
            if box is None:
                return False
            box.messages.append(message)
            self._notify_locked(box)
            return True

    def broadcast(self, message: Any) -> None:
        with self._cond:
            for box in self._boxes.values():
                box.messages.append(message)
                self._notify_locked(box)

    def _notify_locked(self, box: _Mailbox) -> None:
        if not box.notified:
            box.notified = True
            self._ready.append(box)
            self._cond.notify()

    # ------------------------------------------------------------------ polling

    def start(self) -> None:
        """Start the poller threads (no-op if running)."""
        with self._cond:
            if self._threads:
                return
            self._stopping = False
            self._threads = [
                threading.Thread(target=self._poll, name=f"{self.name}-poller-{i}", daemon=True)
                for i in range(self._pollers)
            ]
            threads = list(self._threads)
        for thread in threads:
            thread.start()

    def stop(self, timeout_s: float | None = None) -> None:
        """Stop the pollers after their current batch; undelivered messages stay queued."""
        with self._cond:
            self._stopping = True
            threads, self._threads = self._threads, []
            self._cond.notify_all()
        for thread in threads:
            if thread is not threading.current_thread():  # an FSM may stop the system it runs in
                thread.join(timeout_s)

    def run_pending(self) -> int:
        """Handle everything ready on the calling thread until nothing is; returns messages handled.

        Messages sent by FSMs while this runs are handled too, so an FSM that keeps messaging
        itself makes this loop forever.
        """
        handled = 0
        while True:
            with self._cond:
                if not self._ready:
                    return handled
                box = self._ready.popleft()
            handled += self._handle(box)

    def _poll(self) -> None:
        while True:
            with self._cond:
                while not self._ready and not self._stopping:
                    self._cond.wait()
                if self._stopping:
                    return
                take = min(self._batch_size, len(self._ready))
                batch = [self._ready.popleft() for _ in range(take)]
            for box in batch:
                self._handle(box)

    def _handle(self, box: _Mailbox) -> int:
        """Give ``box``'s FSM its messages; the caller owns ``box`` (taken off the ready queue)."""
        with self._cond:
            if box.closed:
                return 0
            n = min(len(box.messages), self._per_handle)
            messages = [box.messages.popleft() for _ in range(n)]
        if messages:
            try:
                box.fsm.handle(messages)
            except Exception:
                log.exception("%s: FSM %s failed on %d message(s)", self.name, box.key, len(messages))
        with self._cond:
            if box.messages and not box.closed:
                self._ready.append(box)  # still notified: to the back, so busy FSMs cannot starve others
                self._cond.notify()
            else:
                box.notified = False
        return len(messages)
