"""docs/settings.md is generated from the settings classes; it must match them."""

from __future__ import annotations

from pathlib import Path

from deploy import settings_reference

ROOT = Path(__file__).resolve().parents[2]


def test_the_committed_settings_reference_is_up_to_date() -> None:
    committed = (ROOT / settings_reference.DEFAULT_PATH).read_text()
    assert committed == settings_reference.render(), (
        "docs/settings.md is stale (a settings class changed): run `.venv/bin/petrel settings-reference` "
        "and commit docs/settings.md"
    )


def test_every_setting_of_every_service_is_on_the_page() -> None:
    page = settings_reference.render()
    for service, cls in settings_reference.services().items():
        prefix = str(cls.model_config["env_prefix"])
        omitted: frozenset[str] = getattr(cls, "reference_omits", frozenset())
        for name in cls.model_fields:
            variable = f"PETREL_{name.upper()}" if name in cls.shared_fields() else f"{prefix}{name.upper()}"
            if name in omitted:  # a field the service inherits but does not use (the ETL job's host and port)
                assert f"`{variable}`" not in page, f"{service} does not use {name}, yet {variable} is on the page"
            else:
                assert f"`{variable}`" in page, f"{service}'s setting {name} ({variable}) is missing"


def test_a_setting_with_a_few_allowed_values_shows_them_not_pythons_spelling() -> None:
    page = settings_reference.render()
    assert "typing." not in page
    assert "| `PETREL_AUTH` | required or off (optional) |" in page
