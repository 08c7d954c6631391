"""Petrel's Celery apps accept JSON only, and only then is Celery's warning about root silenced."""

from __future__ import annotations

import warnings

from celery.exceptions import SecurityWarning

from libs.celery_json import quiet_root_warning
from services.etl.nightly import celery_config as etl_config
from services.etl.settings import EtlSettings
from services.txcheck.celery_app import celery_config as txcheck_config
from services.txcheck.settings import TxcheckSettings


def test_both_celery_apps_accept_json_only() -> None:
    assert txcheck_config(TxcheckSettings())["accept_content"] == ["json"]
    assert etl_config(EtlSettings())["accept_content"] == ["json"]


def test_the_root_warning_is_kept_for_an_app_that_accepts_pickle() -> None:
    with warnings.catch_warnings():
        assert not quiet_root_warning(["json", "pickle"])
        assert quiet_root_warning(["json"])
        with warnings.catch_warnings(record=True) as seen:
            warnings.warn(SecurityWarning("root"), stacklevel=1)
        assert seen == []
