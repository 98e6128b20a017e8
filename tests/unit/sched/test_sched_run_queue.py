"""RunQueue: the executor's queue, pure (no threads): order, coalescing, promotion, removal."""

from __future__ import annotations

from workers.sched.executor_types import CancelToken, Priority
from workers.sched.run_queue import Job, RunQueue


def job(key: str, priority: int, result: str = "") -> Job:
    def body(token: CancelToken) -> object:
        return result or key

    return Job(key, body, priority, None, None, None)


def drain_order(queue: RunQueue) -> list[str]:
    keys = []
    while (next_job := queue.pop_next()) is not None:
        keys.append(next_job.key)
    return keys


def test_most_urgent_first_and_fifo_within_a_priority() -> None:
    queue = RunQueue()
    for key, priority in [("c", Priority.PERIODIC), ("a1", Priority.URGENT), ("d", Priority.PURGE)]:
        queue.push(job(key, priority))
    queue.push(job("a2", Priority.URGENT))
    queue.push(job("b", Priority.CHANGE))
    assert len(queue) == 5 and "a2" in queue
    assert drain_order(queue) == ["a1", "a2", "b", "c", "d"]
    assert len(queue) == 0 and queue.pop_next() is None


def test_coalescing_keeps_the_place_and_takes_the_latest_body_and_the_most_urgent_priority() -> None:
    queue = RunQueue()
    queue.push(job("a", Priority.PERIODIC))
    queue.push(job("b", Priority.PERIODIC))
    queue.coalesce(job("a", Priority.PURGE, result="newer"))  # less urgent: place kept
    assert len(queue) == 2
    first = queue.pop_next()
    assert first is not None and first.key == "a" and first.priority == Priority.PERIODIC
    assert first.fn(CancelToken()) == "newer"
    queue.push(job("c", Priority.PERIODIC))
    queue.coalesce(job("c", Priority.URGENT))  # more urgent: ahead of b
    assert drain_order(queue) == ["c", "b"]


def test_promote_moves_a_queued_key_up_only() -> None:
    queue = RunQueue()
    for key in ("a", "b", "c"):
        queue.push(job(key, Priority.PERIODIC))
    queue.push(job("u", Priority.URGENT))
    assert queue.promote("c", Priority.URGENT)  # behind the job already at URGENT
    assert queue.promote("a", Priority.PURGE)  # queued, but a lower priority changes nothing
    assert not queue.promote("missing", Priority.URGENT)
    assert drain_order(queue) == ["u", "c", "a", "b"]


def test_remove_and_drain() -> None:
    queue = RunQueue()
    for key in ("a", "b", "c"):
        queue.push(job(key, Priority.PERIODIC))
    removed = queue.remove("b")
    assert removed is not None and removed.key == "b" and "b" not in queue
    assert queue.remove("b") is None
    queue.push(job("b", Priority.URGENT))  # a removed key may be queued again
    assert [j.key for j in queue.drain()] == ["a", "c", "b"]
    assert len(queue) == 0 and queue.pop_next() is None
