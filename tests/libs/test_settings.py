"""ServiceSettings: a service's own PETREL_<SERVICE>_ names, plus the cluster-wide bare PETREL_ ones."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import SecretStr, ValidationError
from pydantic_settings import SettingsConfigDict, SettingsError

from gateway.settings import GatewaySettings
from libs.delay import DEFAULT_DELAY_LEVELS, parse_delay_levels
from libs.settings import ServiceSettings, SharedDatabaseSettings
from services.broker.settings import BrokerSettings
from services.timer.settings import TimerSettings


class TestServiceSettings(ServiceSettings):
    __test__ = False  # not a pytest test class
    model_config = SettingsConfigDict(env_prefix="PETREL_TESTSVC_")

    queue_depth: int = 16


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("PETREL_"):
            monkeypatch.delenv(name)


def test_defaults_apply_when_nothing_is_set() -> None:
    settings = TestServiceSettings()
    assert (settings.host, settings.port, settings.data_dir) == ("127.0.0.1", 0, Path("data"))
    assert settings.nameservers == ["127.0.0.1:9876"]
    assert settings.internal_token is None
    assert settings.base_url == "http://127.0.0.1:0"


@pytest.mark.parametrize(
    ("variable", "value", "field", "expected"),
    [
        ("PETREL_DATA_DIR", "/srv/petrel", "data_dir", Path("/srv/petrel")),
        ("PETREL_REDIS_URL", "redis://cache:6379/2", "redis_url", "redis://cache:6379/2"),
        ("PETREL_NAMESERVERS", "ns1:9876", "nameservers", ["ns1:9876"]),
    ],
)
def test_shared_field_is_read_from_the_bare_petrel_name(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, field: str, expected: object
) -> None:
    monkeypatch.setenv(variable, value)
    assert getattr(TestServiceSettings(), field) == expected


def test_internal_token_is_read_from_the_bare_petrel_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PETREL_INTERNAL_TOKEN", "cluster-secret-of-thirty-two-bytes")
    token = TestServiceSettings().internal_token
    assert token is not None
    assert token.get_secret_value() == "cluster-secret-of-thirty-two-bytes"


@pytest.mark.parametrize(
    ("field", "shared", "specific", "expected"),
    [
        ("data_dir", "/srv/shared", "/srv/testsvc", Path("/srv/testsvc")),
        ("redis_url", "redis://shared", "redis://testsvc", "redis://testsvc"),
        ("nameservers", "shared:1", "testsvc:1", ["testsvc:1"]),
        ("internal_token", "shared" * 6, "testsvc" * 5, SecretStr("testsvc" * 5)),
    ],
)
def test_service_specific_name_wins_over_the_shared_one(
    monkeypatch: pytest.MonkeyPatch, field: str, shared: str, specific: str, expected: object
) -> None:
    monkeypatch.setenv(f"PETREL_{field.upper()}", shared)
    monkeypatch.setenv(f"PETREL_TESTSVC_{field.upper()}", specific)
    assert getattr(TestServiceSettings(), field) == expected


def test_port_and_host_are_not_taken_from_the_bare_petrel_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PETREL_PORT", "8080")
    monkeypatch.setenv("PETREL_HOST", "0.0.0.0")
    settings = TestServiceSettings()
    assert (settings.host, settings.port) == ("127.0.0.1", 0)


def test_port_is_taken_from_the_service_specific_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PETREL_PORT", "8080")
    monkeypatch.setenv("PETREL_TESTSVC_PORT", "9100")
    assert TestServiceSettings().port == 9100


def test_service_only_field_is_not_taken_from_the_bare_petrel_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PETREL_QUEUE_DEPTH", "99")
    assert TestServiceSettings().queue_depth == 16
    monkeypatch.setenv("PETREL_TESTSVC_QUEUE_DEPTH", "32")
    assert TestServiceSettings().queue_depth == 32


@pytest.mark.parametrize("raw", ["a:1,b:2", "a:1;b:2", " a:1 ; b:2 ,", "a:1,;b:2"])
def test_nameservers_parse_from_a_comma_or_semicolon_separated_list(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv("PETREL_TESTSVC_NAMESERVERS", raw)
    assert TestServiceSettings().nameservers == ["a:1", "b:2"]


def test_shared_nameservers_parse_the_same_way(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PETREL_NAMESERVERS", "a:1;b:2")
    assert TestServiceSettings().nameservers == ["a:1", "b:2"]


def test_keyword_arguments_win_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PETREL_TESTSVC_PORT", "9100")
    assert TestServiceSettings(port=9200).port == 9200


def test_internal_token_is_hidden_from_repr_and_str(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PETREL_INTERNAL_TOKEN", "hunter2-cluster-of-thirty-two-bytes")
    settings = TestServiceSettings()
    assert isinstance(settings.internal_token, SecretStr)
    assert "hunter2-cluster-of-thirty-two-bytes" not in repr(settings)
    assert "hunter2-cluster-of-thirty-two-bytes" not in str(settings)


class TestSharedDatabaseSettings(SharedDatabaseSettings):
    __test__ = False
    model_config = SettingsConfigDict(env_prefix="PETREL_TESTSVC_")


def test_the_shared_metadata_database_defaults_to_sqlite_in_the_data_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PETREL_DATA_DIR", "/srv/petrel")
    settings = TestSharedDatabaseSettings()
    assert settings.database_url is None
    assert settings.metadata_url == "sqlite:////srv/petrel/metadata.db"


def test_the_shared_metadata_database_is_read_from_petrel_database_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PETREL_DATABASE_URL", "postgresql+psycopg://petrel@db/petrel")
    assert TestSharedDatabaseSettings().metadata_url == "postgresql+psycopg://petrel@db/petrel"
    monkeypatch.setenv("PETREL_TESTSVC_DATABASE_URL", "sqlite:///mine.db")
    assert TestSharedDatabaseSettings().metadata_url == "sqlite:///mine.db"


def test_a_broker_keeps_its_own_database_when_petrel_database_url_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """Brokers sharing one topics and offsets table would mix up each other's rows."""
    monkeypatch.setenv("PETREL_DATABASE_URL", "postgresql+psycopg://petrel@db/petrel")
    monkeypatch.setenv("PETREL_DATA_DIR", "/srv/petrel")
    settings = BrokerSettings()
    assert settings.database_url is None
    assert settings.metadata_url == "sqlite:////srv/petrel/brokers/broker-a/metadata.db"
    assert "database_url" not in TestServiceSettings.shared_fields()


def test_the_delay_levels_are_one_cluster_wide_value_every_service_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PETREL_DELAY_LEVELS", "1s 2m 1h")
    readers = (BrokerSettings(), TimerSettings(), GatewaySettings())
    assert [settings.delay_levels for settings in readers] == [(1_000, 120_000, 3_600_000)] * 3


def test_the_delay_levels_default_to_rocketmqs_eighteen() -> None:
    assert BrokerSettings().delay_levels == parse_delay_levels(DEFAULT_DELAY_LEVELS)
    assert len(TimerSettings().delay_levels) == 18


def test_a_service_specific_delay_level_table_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A gateway and a broker that disagree on the table would schedule one level at two times."""
    monkeypatch.setenv("PETREL_BROKER_DELAY_LEVELS", "1s 5s")
    with pytest.raises(
        SettingsError,
        match=r"^PETREL_BROKER_DELAY_LEVELS is not read: the setting is cluster-wide, set PETREL_DELAY_LEVELS instead$",
    ):
        BrokerSettings()


def test_a_malformed_delay_level_table_is_refused_when_the_settings_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PETREL_DELAY_LEVELS", "1s 5 minutes")
    with pytest.raises(ValidationError, match="delay level '5' is not a number with ms, s, m, h or d"):
        GatewaySettings()


def test_the_gateway_refuses_more_long_polls_than_connections(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PETREL_MAX_CONNECTIONS", "1000")
    with pytest.raises(ValidationError, match=r"max_long_polls \(4096\) must be below max_connections \(1000\)"):
        GatewaySettings()
