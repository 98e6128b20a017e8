"""BatchSystem: per-FSM order, one poller per FSM at a time, synchronous draining."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from workers.sched.mailbox import BatchSystem, Fsm

WAIT = 10.0


class Recording:
    def __init__(self) -> None:
        self.batches: list[list[Any]] = []

    def handle(self, messages: list[Any]) -> None:
        self.batches.append(list(messages))

    @property
    def messages(self) -> list[Any]:
        return [m for batch in self.batches for m in batch]


def test_run_pending_delivers_in_order_per_fsm() -> None:
    system = BatchSystem(pollers=2, batch_size=4)
    fsms = {key: Recording() for key in ("mv:a", "mv:b", "mvlog:t")}
    for key, fsm in fsms.items():
        system.register(key, fsm)
    for i in range(10):
        for key in fsms:
            assert system.send(key, (key, i))
    assert system.pending() == 30
    assert system.run_pending() == 30
    assert system.run_pending() == 0
    for key, fsm in fsms.items():
        assert fsm.messages == [(key, i) for i in range(10)]
        assert len(fsm.batches) == 1  # everything pending was handed over in one handle call


def test_messages_per_handle_are_bounded_and_ordered() -> None:
    system = BatchSystem(max_messages_per_handle=2)
    fsm = Recording()
    system.register("k", fsm)
    for i in range(5):
        system.send("k", i)
    assert system.run_pending() == 5
    assert fsm.batches == [[0, 1], [2, 3], [4]]


def test_send_to_unknown_and_unregister() -> None:
    system = BatchSystem()
    fsm = Recording()
    assert system.send("nobody", 1) is False
    system.register("k", fsm)
    with pytest.raises(ValueError):
        system.register("k", Recording())
    assert "k" in system and len(system) == 1 and system.keys() == ["k"]
    system.send("k", 1)
    assert system.unregister("k") is fsm
    assert system.unregister("k") is None
    assert system.send("k", 2) is False
    assert system.run_pending() == 0  # the pending message went with the FSM
    assert fsm.messages == []


def test_broadcast_reaches_every_fsm() -> None:
    system = BatchSystem()
    fsms = [Recording() for _ in range(3)]
    for i, fsm in enumerate(fsms):
        system.register(str(i), fsm)
    system.broadcast("tick")
    assert system.run_pending() == 3
    assert all(fsm.messages == ["tick"] for fsm in fsms)


def test_a_failing_fsm_does_not_stop_the_others() -> None:
    class Broken:
        def handle(self, messages: list[Any]) -> None:
            raise RuntimeError("bug")

    system = BatchSystem()
    ok = Recording()
    system.register("broken", Broken())
    system.register("ok", ok)
    system.send("broken", 1)
    system.send("ok", 2)
    assert system.run_pending() == 2
    assert ok.messages == [2]


def test_messages_sent_while_handling_are_handled_later_in_order() -> None:
    system = BatchSystem()

    class Chatty:
        def __init__(self) -> None:
            self.seen: list[int] = []

        def handle(self, messages: list[Any]) -> None:
            for m in messages:
                self.seen.append(m)
                if m < 3:
                    system.send("c", m + 1)  # to itself, while being handled

    chatty = Chatty()
    system.register("c", chatty)
    system.send("c", 0)
    assert system.run_pending() == 4
    assert chatty.seen == [0, 1, 2, 3]


class OverlapDetector:
    """Counts concurrent handle calls on one FSM and checks per-sender message order."""

    def __init__(
        self, expected: int, done: threading.Event, counter: list[int], lock: threading.Lock
    ) -> None:
        self.active = 0
        self.overlaps = 0
        self.last: dict[int, int] = {}
        self.out_of_order = 0
        self.expected = expected
        self.done = done
        self.counter = counter
        self.lock = lock
        self.guard = threading.Lock()  # only for counting ``active``; not what serialises handle

    def handle(self, messages: list[Any]) -> None:
        with self.guard:
            self.active += 1
            if self.active > 1:
                self.overlaps += 1
        for sender, seq in messages:
            if seq != self.last.get(sender, -1) + 1:
                self.out_of_order += 1
            self.last[sender] = seq
            sum(range(1000))  # a little work, so another poller has a chance to interleave
        with self.guard:
            self.active -= 1
        with self.lock:
            self.counter[0] += len(messages)
            if self.counter[0] == self.expected:
                self.done.set()


@pytest.fixture
def fast_switching() -> Iterator[None]:
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # make threads interleave as often as possible
    yield
    sys.setswitchinterval(previous)


@pytest.mark.usefixtures("fast_switching")
def test_two_pollers_never_handle_one_fsm_at_once() -> None:
    system = BatchSystem(pollers=2, batch_size=1, max_messages_per_handle=3)
    senders, per_sender, n_fsms = 3, 800, 4
    done, counter, lock = threading.Event(), [0], threading.Lock()
    total = senders * per_sender * n_fsms
    fsms = [OverlapDetector(total, done, counter, lock) for _ in range(n_fsms)]
    for i, fsm in enumerate(fsms):
        system.register(f"mv:{i}", fsm)
    system.start()
    system.start()  # idempotent

    def send_all(sender: int) -> None:
        for seq in range(per_sender):
            for i in range(n_fsms):
                assert system.send(f"mv:{i}", (sender, seq))

    threads = [threading.Thread(target=send_all, args=(s,)) for s in range(senders)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT)
    assert done.wait(WAIT), f"handled {counter[0]} of {total}"
    system.stop(timeout_s=WAIT)
    assert sum(f.overlaps for f in fsms) == 0
    assert sum(f.out_of_order for f in fsms) == 0
    assert all(f.last == {s: per_sender - 1 for s in range(senders)} for f in fsms)


def test_stop_leaves_messages_for_run_pending() -> None:
    system = BatchSystem(pollers=2)
    handled = threading.Event()

    class Signal:
        def handle(self, messages: list[Any]) -> None:
            handled.set()

    fsm = Recording()
    system.register("s", Signal())
    system.register("r", fsm)
    system.start()
    system.send("s", "ping")
    assert handled.wait(WAIT)
    system.stop(timeout_s=WAIT)
    system.stop()  # idempotent
    system.send("r", "after stop")
    assert fsm.messages == []
    assert system.run_pending() == 1
    assert fsm.messages == ["after stop"]


def test_fsm_protocol_is_structural() -> None:
    fsm: Fsm = Recording()
    assert hasattr(fsm, "handle")
