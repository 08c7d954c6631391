"""An etcd with auth on: the client trades its user and password for a token, and trades again when it lapses."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from libs.etcd import EtcdAuthFailed, EtcdClient
from libs.etcd.wire import b64, prefix_end
from tests.support.etcd import EtcdCluster, enable_auth, etcd_cluster, root_token

PASSWORD = "petrel-pw-for-tests"


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdCluster]:
    """etcd with auth on; user `petrel` may read and write under /petrel/ only."""
    with etcd_cluster(Path(tmp_path_factory.mktemp("etcd"))) as cluster:
        enable_auth(cluster)
        token = root_token(cluster)
        cluster.post("/v3/auth/role/add", {"name": "petrel"}, token)
        permission = {"permType": "READWRITE", "key": b64(b"/petrel/"), "range_end": b64(prefix_end(b"/petrel/"))}
        cluster.post("/v3/auth/role/grant", {"name": "petrel", "perm": permission}, token)
        cluster.post("/v3/auth/user/add", {"name": "petrel", "password": PASSWORD}, token)
        cluster.post("/v3/auth/user/grant", {"user": "petrel", "role": "petrel"}, token)
        yield cluster


async def test_a_user_with_its_password_reads_and_writes_its_keys(guarded: EtcdCluster) -> None:
    async with EtcdClient(guarded.settings("/petrel/", user="petrel", password=PASSWORD)) as client:
        await client.put("controller/leader", b"ns-1")
        assert (await client.get("controller/leader")).value == b"ns-1"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "credentials",
    [{"user": "petrel", "password": "not-the-password"}, {}],
    ids=["wrong password", "none"],
)
async def test_wrong_or_missing_credentials_are_refused(guarded: EtcdCluster, credentials: dict[str, str]) -> None:
    async with EtcdClient(guarded.settings("/petrel/", **credentials)) as client:
        with pytest.raises(EtcdAuthFailed):
            await client.get("controller/leader")


async def test_keys_outside_the_users_permission_are_refused(guarded: EtcdCluster) -> None:
    async with EtcdClient(guarded.settings("/another-cluster/", user="petrel", password=PASSWORD)) as client:
        with pytest.raises(EtcdAuthFailed, match="permission denied"):
            await client.put("controller/leader", b"ns-1")


async def test_a_token_that_etcd_dropped_is_replaced_without_the_caller_noticing(guarded: EtcdCluster) -> None:
    async with EtcdClient(guarded.settings("/petrel/", user="petrel", password=PASSWORD)) as client:
        await client.put("epochs/broker-a", b"1")
        # changing a user's password (here to the same one) ends every token etcd gave that user
        guarded.post("/v3/auth/user/changepw", {"name": "petrel", "password": PASSWORD}, root_token(guarded))
        await client.put("epochs/broker-a", b"2")
        assert (await client.get("epochs/broker-a")).value == b"2"  # type: ignore[union-attr]
