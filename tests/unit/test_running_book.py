"""The round's running tasks in memory (``RunningBook``): what changed is read, every row only at
start and when the count says the book is wrong, and a share of the book again each round so
that every task is read again within RECHECK_ROUNDS rounds; a task whose end is being written
beside the round is not followed again meanwhile."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta

from tests.unit.fakes import (
    MemoryTaskStore,
    cluster,
    clusters_of,
    k8s_of,
    make_services,
    one_cluster,
    running,
)

from falcon.domain.lifecycle import Phase, PoolState, RoundSnapshot, succeeded
from falcon.domain.model import RunningRead, RunningTask, k8s_job_name_for
from falcon.domain.status import Status
from falcon.services import reconcile
from falcon.services.context import Services
from falcon.services.release import record_outcome
from falcon.services.running_book import OVERLAP, RECHECK_ROUNDS, RunningBook


class CountingStore(MemoryTaskStore):
    """The fake store, counting the reads of every running row (by the round's read, or apart)."""

    full_reads = 0
    rechecks: list[tuple[str, ...]]

    def running_tasks(self) -> list[RunningTask]:
        self.full_reads += 1
        return super().running_tasks()

    def round_snapshot(
        self, running: RunningRead, phases: Sequence[Phase], pool_states: Sequence[PoolState]
    ) -> RoundSnapshot:
        self.full_reads += running.since is None
        self.rechecks.append(running.recheck)
        return super().round_snapshot(running, phases, pool_states)


def _services() -> tuple[Services, CountingStore]:
    svc = make_services()
    store = CountingStore(svc.clock)
    store.rechecks = []
    store.add_cluster(cluster("c1"))
    return replace(svc, store=store), store


def _two_running_read_once(
    recheck_rounds: int = RECHECK_ROUNDS,
) -> tuple[Services, CountingStore, RunningBook]:
    """t1 and t2 running, and a book that read them (its one full read)."""
    svc, store = _services()
    running(svc, "t1")
    running(svc, "t2")
    book = RunningBook(recheck_rounds)
    _read(book, svc)
    return svc, store, book


def _read(book: RunningBook, svc: Services) -> list[str]:
    return sorted(task.id for task in _running(book, svc))


def _running(book: RunningBook, svc: Services) -> list[RunningTask]:
    """The book brought up to date as the round does it, from the round's read."""
    asked = book.next_read()
    read = svc.store.round_snapshot(asked, reconcile.SUPERVISED, [])
    return book.update(read.running, asked, svc.clock.now(), svc.store)


def test_the_first_read_is_every_row_and_the_next_only_what_reached_running_since() -> None:
    svc, store = _services()
    running(svc, "t1")
    book = RunningBook()
    assert _read(book, svc) == ["t1"]
    svc.clock.advance(1)
    running(svc, "t2")
    svc.clock.advance(1)
    assert _read(book, svc) == ["t1", "t2"]
    assert _read(book, svc) == ["t1", "t2"]
    assert store.full_reads == 1


def test_an_upstream_abort_reaches_a_task_the_book_holds_without_reading_every_row() -> None:
    svc, store, book = _two_running_read_once()
    svc.clock.advance(30)  # long past the overlap: t1 is not read as new again
    assert svc.store.request_abort("t1")
    tasks = {task.id: task.status for task in _running(book, svc)}
    assert tasks == {"t1": Status.ABORTING, "t2": Status.RUNNING}
    assert store.full_reads == 1


def test_the_tasks_the_round_ended_are_forgotten() -> None:
    svc, store, book = _two_running_read_once()
    assert record_outcome(svc, "t1", succeeded(svc.say), [Phase.RUNNING])
    book.forget(["t1"])
    svc.clock.advance(1)
    assert _read(book, svc) == ["t2"]
    assert store.full_reads == 1


def test_a_task_another_step_moved_out_of_running_sends_the_book_back_to_every_row() -> None:
    svc, store, book = _two_running_read_once()
    assert record_outcome(svc, "t2", succeeded(svc.say), [Phase.RUNNING])  # not told to the book
    svc.clock.advance(1)
    assert _read(book, svc) == ["t1"]
    assert store.rechecks[-1] == ("t1",)  # the book reads its tasks again in the order it took them
    assert store.full_reads == 2


def test_a_task_moved_out_of_running_found_by_its_recheck_is_dropped_without_reading_every_row() -> None:
    svc, store, book = _two_running_read_once()
    assert record_outcome(svc, "t1", succeeded(svc.say), [Phase.RUNNING])
    svc.clock.advance(1)
    assert _read(book, svc) == ["t2"]
    assert store.rechecks[-1] == ("t1",)
    assert store.full_reads == 1


def test_a_task_that_reached_running_before_the_overlap_is_found_by_the_count() -> None:
    svc, store = _services()
    book = RunningBook()
    assert _read(book, svc) == []
    svc.clock.advance(2 * OVERLAP.total_seconds())  # the full read not due yet
    running(svc, "late")
    store.running_at["late"] -= timedelta(minutes=2)  # its writer's clock behind, or a slow commit
    assert _read(book, svc) == ["late"]
    assert store.full_reads == 2


def test_every_task_the_book_holds_is_read_again_within_the_recheck_rounds() -> None:
    svc, store = _services()
    for name in ("t1", "t2", "t3", "t4", "t5"):
        running(svc, name)
    book = RunningBook(recheck_rounds=2)
    _read(book, svc)
    for _ in range(4):
        svc.clock.advance(1)
        _read(book, svc)
    assert store.rechecks == [(), ("t1", "t2", "t3"), ("t4", "t5"), ("t1", "t2", "t3"), ("t4", "t5")]
    assert store.full_reads == 1


def test_a_column_upstream_rewrote_is_taken_when_its_task_is_read_again() -> None:
    svc, store, book = _two_running_read_once(recheck_rounds=1)
    svc.clock.advance(2 * OVERLAP.total_seconds())  # neither reads as new any more
    store.rows["t2"] = replace(store.rows["t2"], timeout_seconds=60)
    assert {task.id: task.timeout_seconds for task in _running(book, svc)}["t2"] == 60
    assert store.full_reads == 1


def test_a_task_moved_in_as_another_moved_out_is_found_when_the_one_that_left_is_read_again() -> None:
    """The count alone cannot see it: one out and one in leave it as the book holds."""
    svc, store, book = _two_running_read_once()
    svc.clock.advance(2 * OVERLAP.total_seconds())
    assert record_outcome(svc, "t1", succeeded(svc.say), [Phase.RUNNING])
    running(svc, "late")
    store.running_at["late"] -= timedelta(minutes=2)  # not read as new
    assert _read(book, svc) == ["late", "t2"]  # t1 read again and gone: the count then disagrees
    assert store.full_reads == 2


def test_a_task_held_in_the_book_that_another_step_ended_is_reported_left_not_ended() -> None:
    svc = one_cluster()
    running(svc, "t1")
    held = svc.store.running_tasks()
    assert record_outcome(svc, "t1", succeeded(svc.say), [Phase.RUNNING])  # say, a second dispatcher
    k8s_of(svc).job(k8s_job_name_for("t1")).script.complete = True
    followed = reconcile.follow_running(svc, clusters_of(svc), running=held)
    assert (followed.ended, followed.left) == ([], ["t1"])


def test_a_task_whose_end_is_written_beside_the_round_is_not_followed_again_meanwhile() -> None:
    """Handed over, t1 still reads as running until its write lands: the book neither follows it
    nor takes the count's extra task for a drift; once written, the count agrees again."""
    svc, store, book = _two_running_read_once()
    book.leaving(["t1"])
    svc.clock.advance(1)
    assert _read(book, svc) == ["t2"]  # t1's write not landed yet
    assert record_outcome(svc, "t1", succeeded(svc.say), [Phase.RUNNING])
    book.settled(["t1"])
    svc.clock.advance(1)
    assert _read(book, svc) == ["t2"]
    assert store.full_reads == 1


def test_a_task_whose_write_beside_failed_is_read_again_and_followed() -> None:
    svc, store, book = _two_running_read_once()
    svc.clock.advance(2 * OVERLAP.total_seconds())
    _read(book, svc)  # t1 no longer reads as new: only the count can bring it back
    book.leaving(["t1"])
    book.settled(["t1"])  # over, and t1 still running: its write failed
    assert _read(book, svc) == ["t1", "t2"]
    assert store.full_reads == 2
