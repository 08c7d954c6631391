"""One etcd member for a test module (started once: under a second), and a client per test under a prefix of its own."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from libs.etcd import EtcdClient
from tests.support.etcd import EtcdCluster, etcd_cluster


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdCluster]:
    with etcd_cluster(Path(tmp_path_factory.mktemp("etcd"))) as cluster:
        yield cluster


@pytest.fixture
async def client(etcd: EtcdCluster, request: pytest.FixtureRequest) -> AsyncIterator[EtcdClient]:
    """A client whose keys are under /test/<the test's name>/: tests of one module share the etcd, not their keys."""
    async with EtcdClient(etcd.settings(f"/test/{request.node.name}/")) as client:
        yield client
