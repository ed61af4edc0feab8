"""The store's checkpoints (sandstack.runtime.store): a request's commit never copies the WAL into the database file
(SQLite's default every 1,000 pages, under the store's one lock); the monitor's pass does, on a connection of its
own, while requests go on."""

from __future__ import annotations

import threading

from sandstack.runtime.store import Store

COMMITS = 1500  # each a frame at least: past SQLite's default auto-checkpoint of 1,000 pages


def _commits(store: Store, count: int) -> None:
    store.sync_declared({"py": ("sbx-0",)})
    for n in range(count):
        store.update("sbx-0", detail=f"change {n}")


def test_no_commit_checkpoints_the_wal_the_store_s_checkpoint_copies_all_of_it(tmp_path):
    store = Store(tmp_path / "state.db")
    _commits(store, COMMITS)
    logged, copied = store.checkpoint()
    # With SQLite's auto-checkpoint a commit would have copied the WAL and it would have started over (< 1,000).
    assert logged > COMMITS and copied == logged
    assert store.sandbox("sbx-0").detail == f"change {COMMITS - 1}"
    _commits(store, 3)  # the WAL starts over once copied: the next commits are all there is to copy
    assert store.checkpoint()[0] < 10


def test_a_checkpoint_goes_on_while_a_request_holds_the_store(tmp_path):
    store = Store(tmp_path / "state.db")
    _commits(store, 20)
    holding, done = threading.Event(), threading.Event()
    result: list[tuple[int, int]] = []

    def checkpoint() -> None:
        holding.wait()
        result.append(store.checkpoint())
        done.set()

    thread = threading.Thread(target=checkpoint)
    thread.start()
    with store.transaction() as db:  # a request's write under the store's lock, not yet committed
        db.execute("UPDATE sandboxes SET detail = 'in flight' WHERE name = 'sbx-0'")
        holding.set()
        # Generous bound for a busy machine: the checkpoint waits on no lock of the store's, so it ends while held.
        assert done.wait(30), "the checkpoint waited for the request's transaction"
    thread.join()
    logged, copied = result[0]
    assert logged >= 20 and copied == logged  # what was committed before; the open transaction is not in it
    assert store.sandbox("sbx-0").detail == "in flight"


def test_the_monitor_pass_checkpoints(env, monkeypatch):
    calls: list[tuple[int, int]] = []
    checkpoint = env.runtime.store.checkpoint
    monkeypatch.setattr(env.runtime.store, "checkpoint", lambda: calls.append(checkpoint()) or calls[-1])
    env.claim("chat-1")
    env.runtime.monitor_once()
    assert len(calls) == 1 and calls[0][0] > 0 and calls[0][1] == calls[0][0]
