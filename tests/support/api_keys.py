"""API keys for tests: made straight in a metadata database, as `petrel keys create` does."""

from __future__ import annotations

from pathlib import Path

import httpx

from libs.auth.keys import KeyStore, open_key_engine


def key_store(data_dir: Path) -> KeyStore:
    """The key store of the cluster whose data dir (and so metadata.db) is `data_dir`."""
    return KeyStore(open_key_engine(f"sqlite:///{data_dir / 'metadata.db'}"))


def issue_key(
    data_dir: Path, *allow: str, deny: tuple[str, ...] = (), rate: float | None = None, name: str = "test"
) -> str:
    """A new key's text (ptk_...) with these grants, e.g. issue_key(d, "pub:orders*", "sub")."""
    store = key_store(data_dir)
    try:
        return store.create(name, list(allow), list(deny), rate_per_second=rate)[1]
    finally:
        store.engine.dispose()


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


async def make_key(
    gateway: httpx.AsyncClient, admin_key: str, *allow: str, deny: tuple[str, ...] = (), rate: float | None = None
) -> dict[str, str]:
    """The headers of a new key made through the gateway (known to it at once)."""
    spec = {"name": "test", "allow": list(allow), "deny": list(deny), "rate_per_second": rate}
    made = await gateway.post("/v1/keys", json=spec, headers=bearer(admin_key))
    assert made.status_code == 201, made.text
    return bearer(made.json()["key"])
