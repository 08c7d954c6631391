"""Keys: written, read, read by prefix, deleted; every key under the cluster's prefix and only there."""

from __future__ import annotations

import pytest

from libs.etcd import EtcdClient, EtcdLeaseNotFound, EtcdSettings, EtcdUnavailable
from tests.support.etcd import EtcdCluster
from tests.support.serving import free_port


async def test_a_put_key_reads_back_with_its_revisions(client: EtcdClient) -> None:
    written = await client.put("brokers/a", b"10.0.0.1:10911")
    kv = await client.get("brokers/a")
    assert kv is not None
    assert (kv.key, kv.value, kv.version) == (b"brokers/a", b"10.0.0.1:10911", 1)
    assert kv.create_revision == kv.mod_revision == written.revision

    rewritten = await client.put("brokers/a", "10.0.0.2:10911", prev_kv=True)
    assert rewritten.prev_kv is not None
    assert rewritten.prev_kv.value == b"10.0.0.1:10911"
    kv = await client.get("brokers/a")
    assert kv is not None
    assert (kv.value, kv.version, kv.mod_revision) == (b"10.0.0.2:10911", 2, rewritten.revision)
    assert kv.create_revision == written.revision
    assert await client.get("brokers/nobody") is None


async def test_a_prefix_reads_its_keys_in_order_and_no_others(client: EtcdClient) -> None:
    for key in ("names/b", "names/a", "names/c", "namesake", "other"):
        await client.put(key, key.upper())
    assert [kv.key for kv in await client.get_prefix("names/")] == [b"names/a", b"names/b", b"names/c"]
    assert (await client.range("names/", prefix=True, limit=2)).count == 3


async def test_deletes_say_what_they_deleted(client: EtcdClient) -> None:
    for key in ("in-sync/a/0", "in-sync/a/1", "in-sync/b/0"):
        await client.put(key, b"1")
    deleted = await client.delete("in-sync/a/", prefix=True, prev_kv=True)
    assert deleted.deleted == 2
    assert sorted(kv.key for kv in deleted.prev_kvs) == [b"in-sync/a/0", b"in-sync/a/1"]
    assert (await client.delete("in-sync/b/0")).deleted == 1
    assert (await client.delete("in-sync/b/0")).deleted == 0
    assert await client.get_prefix("in-sync/") == []


async def test_clusters_with_different_prefixes_share_an_etcd_without_seeing_each_other(etcd: EtcdCluster) -> None:
    async with (
        EtcdClient(etcd.settings("/cluster-one/")) as one,
        EtcdClient(etcd.settings("/cluster-two/")) as two,
    ):
        await one.put("controller/leader", b"ns-1")
        await two.put("controller/leader", b"ns-2")
        assert (await one.get("controller/leader")).value == b"ns-1"  # type: ignore[union-attr]
        assert [kv.value for kv in await two.get_prefix("")] == [b"ns-2"]
        await one.delete("", prefix=True)
        assert (await two.get("controller/leader")) is not None


async def test_a_put_on_a_lease_that_is_gone_is_refused(client: EtcdClient) -> None:
    with pytest.raises(EtcdLeaseNotFound):
        await client.put("masters/broker-a", b"0", lease=0x1234)
    assert await client.get("masters/broker-a") is None


async def test_no_member_answering_is_unavailable_naming_each_member() -> None:
    endpoints = [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]
    async with EtcdClient(EtcdSettings(endpoints=endpoints, retry_seconds=0.5)) as client:
        with pytest.raises(EtcdUnavailable) as raised:
            await client.get("anything")
    assert len(raised.value.tried) == 2
    assert all(f"http://{endpoint}" in str(raised.value) for endpoint in endpoints)


def test_settings_read_the_members_prefix_and_credentials_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PETREL_ETCD_ENDPOINTS", "10.0.0.5:2379, https://10.0.0.6:2379/")
    monkeypatch.setenv("PETREL_ETCD_PREFIX", "/petrel-eu/")
    monkeypatch.setenv("PETREL_ETCD_USER", "petrel")
    monkeypatch.setenv("PETREL_ETCD_PASSWORD", "pw")
    settings = EtcdSettings()
    assert settings.endpoints == ["http://10.0.0.5:2379", "https://10.0.0.6:2379"]
    assert (settings.prefix, settings.user) == ("/petrel-eu/", "petrel")
    assert "pw" not in repr(settings)


@pytest.mark.parametrize(
    ("fields", "complaint"),
    [
        ({"endpoints": ["ftp://10.0.0.5:2379"]}, "not an etcd client URL"),
        ({"endpoints": ["http://10.0.0.5:2379/v3"]}, "not an etcd client URL"),
        ({"cert_file": "client.crt"}, "go together"),
        ({"user": "petrel"}, "needs PETREL_ETCD_PASSWORD"),
    ],
)
def test_settings_refuse_what_cannot_work(fields: dict[str, object], complaint: str) -> None:
    with pytest.raises(ValueError, match=complaint):
        EtcdSettings(**fields)  # type: ignore[arg-type]
