"""Where the etcd of a replicated cluster is and how to reach it: `PETREL_ETCD_*`, one value for the cluster.

Every process that talks to etcd (the nameservers' controllers, the masters keeping their
leases) reads the same variables, so these are not per service: `PETREL_ETCD_ENDPOINTS`
names the members (`http://10.0.0.5:2379,http://10.0.0.6:2379`; a bare host:port means
http), `PETREL_ETCD_PREFIX` the keys of this Petrel cluster (two clusters sharing one etcd
give different prefixes). TLS: `PETREL_ETCD_CA_FILE` checks the members' certificates,
`PETREL_ETCD_CERT_FILE` and `PETREL_ETCD_KEY_FILE` are the client certificate for a cluster
started with `--client-cert-auth`. Credentials: `PETREL_ETCD_USER` and `PETREL_ETCD_PASSWORD`
for a cluster with auth enabled (the client trades them for a token at /v3/auth/authenticate).
No endpoints: no etcd (a cluster without replicas needs none).
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from libs.settings import AddressList, split_entries


class EtcdSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="PETREL_ETCD_", extra="ignore")

    endpoints: AddressList = Field(
        default=[],
        json_schema_extra={"env_type": "URLs, comma-separated"},
        description="the etcd members' client URLs, e.g. 'https://10.0.0.5:2379,https://10.0.0.6:2379' "
        "(host:port means http); a call goes to the member that answered last and moves to the next when one "
        "cannot be reached; empty: no etcd",
    )
    prefix: str = Field(
        default="/petrel/",
        min_length=1,
        description="every key this Petrel cluster keeps in etcd starts with it; clusters sharing an etcd give "
        "different ones",
    )
    ca_file: Path | None = Field(default=None, description="PEM CAs the members' certificates are checked against")
    cert_file: Path | None = Field(default=None, description="PEM client certificate (etcd's --client-cert-auth)")
    key_file: Path | None = Field(default=None, description="the client certificate's PEM private key")
    user: str | None = Field(default=None, description="etcd user, for a cluster with auth enabled")
    password: SecretStr | None = Field(default=None, description="the etcd user's password")
    timeout_seconds: float = Field(
        default=2.0,
        gt=0,
        description="how long one call may take on one member before the next member is tried (a member cut off "
        "from its cluster's majority holds calls until then)",
    )
    connect_timeout_seconds: float = Field(default=1.0, gt=0, description="how long connecting to a member may take")
    retry_seconds: float = Field(
        default=3.0,
        ge=0,
        description="how long a call goes on trying the members, round after round with a short pause, while none "
        "can serve it (etcd electing a leader takes one to two election timeouts, 1-2 s by default); 0: one round",
    )

    @field_validator("endpoints", mode="before")
    @classmethod
    def _split_endpoints(cls, value: Any) -> Any:
        return split_entries(value)

    @field_validator("endpoints")
    @classmethod
    def _urls(cls, value: list[str]) -> list[str]:
        urls = []
        for entry in value:
            url = entry if "://" in entry else f"http://{entry}"
            parts = urlsplit(url)
            if parts.scheme not in {"http", "https"} or not parts.hostname or parts.path not in {"", "/"}:
                raise ValueError(f"{entry!r} is not an etcd client URL (http(s)://host:port)")
            urls.append(url.rstrip("/"))
        return urls

    @model_validator(mode="after")
    def _pairs(self) -> EtcdSettings:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("PETREL_ETCD_CERT_FILE and PETREL_ETCD_KEY_FILE go together")
        if self.user and self.password is None:
            raise ValueError("PETREL_ETCD_USER needs PETREL_ETCD_PASSWORD")
        return self

    @property
    def key_prefix(self) -> bytes:
        return self.prefix.encode()

    def tls_context(self) -> ssl.SSLContext | bool:
        """How https members are checked: the CA file's CAs (else the system's), with the client certificate when
        one is given; True (the system's CAs, no client certificate) when neither is."""
        if self.ca_file is None and self.cert_file is None:
            return True
        context = ssl.create_default_context(cafile=str(self.ca_file) if self.ca_file else None)
        if self.cert_file is not None and self.key_file is not None:
            context.load_cert_chain(self.cert_file, self.key_file)
        return context
