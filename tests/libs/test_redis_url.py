"""PETREL_REDIS_URL's password is never shown, and Celery verifies a rediss:// server's certificate."""

from __future__ import annotations

import ssl

import pytest

from libs.redis_url import celery_tls, masked


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:pw@127.0.0.1:6379/0", "redis://:***@127.0.0.1:6379/0"),
        (
            "rediss://petrel:p%40ss:w@redis.internal:6380/2?ssl_ca_certs=/etc/ca.pem",
            "rediss://petrel:***@redis.internal:6380/2?ssl_ca_certs=/etc/ca.pem",
        ),
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ("redis://petrel@127.0.0.1:6379/0", "redis://petrel@127.0.0.1:6379/0"),
    ],
)
def test_a_urls_password_is_masked_and_the_rest_kept(url: str, shown: str) -> None:
    assert masked(url) == shown


def test_celery_verifies_a_rediss_certificate_unless_the_url_says_how() -> None:
    assert celery_tls("rediss://:pw@redis.internal:6380/0") == {"broker_use_ssl": {"ssl_cert_reqs": ssl.CERT_REQUIRED}}
    assert celery_tls("rediss://redis.internal:6380/0?ssl_ca_certs=/etc/ca.pem") == {}
    assert celery_tls("redis://:pw@127.0.0.1:6379/0") == {}
