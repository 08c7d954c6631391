"""An etcd that speaks only TLS and asks for client certificates: the client checks the members and shows its own."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from libs.etcd import EtcdClient, EtcdUnavailable
from tests.support.etcd import EtcdCluster, etcd_cluster
from tests.support.redis_servers import make_tls_files


@pytest.fixture(scope="module")
def tls_etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdCluster]:
    folder = Path(tmp_path_factory.mktemp("etcd"))
    with etcd_cluster(folder, tls=make_tls_files(folder / "tls")) as cluster:
        yield cluster


async def test_with_the_ca_and_a_client_certificate_calls_go_over_tls(tls_etcd: EtcdCluster) -> None:
    settings = tls_etcd.settings("/petrel/")
    assert all(url.startswith("https://") for url in settings.endpoints)
    async with EtcdClient(settings) as client:
        await client.put("controller/leader", b"ns-1")
        assert (await client.get("controller/leader")).value == b"ns-1"  # type: ignore[union-attr]


async def test_without_a_client_certificate_the_member_refuses(tls_etcd: EtcdCluster) -> None:
    settings = tls_etcd.settings("/petrel/", cert_file=None, key_file=None, retry_seconds=0)
    async with EtcdClient(settings) as client:
        with pytest.raises(EtcdUnavailable) as raised:
            await client.get("controller/leader")
    assert tls_etcd.endpoints[0] in str(raised.value)


async def test_a_member_whose_certificate_the_ca_did_not_sign_is_not_trusted(tls_etcd: EtcdCluster) -> None:
    other_ca = make_tls_files(Path(tls_etcd.members[0].log).parent / "other-tls").ca
    async with EtcdClient(tls_etcd.settings("/petrel/", ca_file=other_ca, retry_seconds=0)) as client:
        with pytest.raises(EtcdUnavailable, match=r"CERTIFICATE_VERIFY_FAILED|certificate verify failed"):
            await client.get("controller/leader")
