"""The registry store's client (sandstack.runtime.snapstore.RegistryStore) against Debian's reference registry, run
as a process on a loopback port (testbed.registry; skipped where `docker-registry` is not installed)."""

from __future__ import annotations

import pytest

from sandstack.plan.runtime import SnapshotStore
from sandstack.runtime.snapstore import RegistryStore, StoreDown, StoreForged
from sandstack.runtime.store import SnapshotRow
from testbed import registry

pytestmark = pytest.mark.skipif(not registry.available(), reason="docker-registry is not installed "
                                "(apt-get install docker-registry; scripts/test installs it)")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    with registry.running(tmp_path_factory.mktemp("registry")) as running:
        yield running


def client(served, password=None) -> RegistryStore:
    config = SnapshotStore(served.url, "sandstack/t", served.username)
    return RegistryStore(config, served.password if password is None else password)


def snapshot(tmp_path, snapshot_id: str, paths: str = "/workspace\n/tmp") -> tuple[SnapshotRow, dict[str, bytes]]:
    tars = {"0.tar": b"first tar " * 1000, "1.tar": b"second"}
    if "\n/\n" in f"\n{paths}\n":
        tars["root.tar"] = b"root changes"
    for name, data in tars.items():
        (tmp_path / name).write_bytes(data)
    size = sum(len(d) for d in tars.values())
    return SnapshotRow(snapshot_id, "py", "sandstack-t-py-0", "host/chat-1", 1796500000.5, size, paths), tars


def test_a_pushed_snapshot_is_found_and_pulled_as_it_was_then_deleted(served, tmp_path):
    store = client(served)
    row, tars = snapshot(tmp_path, "snap-" + "1" * 32, "/workspace\n/tmp\n/")
    store.push(row, "a", tmp_path)
    found = store.find("py", row.id)
    assert (found.row, found.host, [p.name for p in found.parts]) == (row, "a", ["0.tar", "1.tar", "root.tar"])
    pulled = tmp_path / "pulled"
    pulled.mkdir()
    store.pull(found, pulled)
    assert {p.name: p.read_bytes() for p in pulled.iterdir()} == tars
    assert store.find("py", "snap-" + "2" * 32) is None  # not in the store
    assert store.find("web", row.id) is None  # a repository that does not exist
    store.delete("py", row.id)
    assert store.find("py", row.id) is None
    store.delete("py", row.id)  # gone already: nothing to do


def test_a_tar_changed_in_the_registrys_storage_is_refused(served, tmp_path):
    store = client(served)
    row, tars = snapshot(tmp_path, "snap-" + "3" * 32)
    store.push(row, "a", tmp_path)
    found = store.find("py", row.id)
    blob = next(served.root.rglob(f"blobs/sha256/*/{found.parts[1].digest.split(':')[1]}/data"))
    blob.write_bytes(b"SECOND")  # the same size, other bytes: what the registry's disk holds was changed
    pulled = tmp_path / "pulled"
    pulled.mkdir()
    with pytest.raises(StoreForged) as refused:
        store.pull(found, pulled)
    assert str(refused.value) == (f"snapshot {row.id!r} in the store is not one a runtime kept: its 1.tar is not the "
                                  f"6 bytes of digest {found.parts[1].digest}")


def test_a_wrong_password_is_store_down_naming_the_address_not_the_password(served, tmp_path):
    store = client(served, password="not-the-password-0123")
    with pytest.raises(StoreDown) as refused:
        store.find("py", "snap-" + "4" * 32)
    assert str(refused.value) == (f"snapshot store {served.url} refused the runtime's credentials (401) to GET "
                                  f"/v2/sandstack/t/py/manifests/snap-{'4' * 32}")
    assert served.password not in str(refused.value) and "not-the-password" not in str(refused.value)


def test_a_registry_that_does_not_answer_is_store_down(tmp_path):
    with registry.running(tmp_path / "gone") as gone:
        url = gone.url
    store = RegistryStore(SnapshotStore(url, "sandstack/t", "snapshots"), "pw")
    with pytest.raises(StoreDown) as down:
        store.find("py", "snap-" + "5" * 32)
    assert str(down.value) == (f"snapshot store {url} did not answer (ConnectionRefusedError: [Errno 111] "
                               "Connection refused)")
