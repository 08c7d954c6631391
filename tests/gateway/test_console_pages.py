"""The console's page shells, its static files, `GET /` and the API docs, served in-process from the package.

What a browser does with them is tests/e2e/test_console.py's; here, what the gateway sends: a strict CSP on every
page, no key asked for a page (its /v1 calls ask), vendored files and no CDN.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.console.routes import CONTENT_SECURITY_POLICY, PAGES

pytestmark = pytest.mark.asyncio


@pytest.fixture
def gateway_overrides(tmp_path: Path) -> dict[str, Any]:
    return {"auth": "required", "data_dir": tmp_path}


async def test_root_leads_to_the_console(gateway: httpx.AsyncClient) -> None:
    answer = await gateway.get("/")
    assert answer.status_code == 307
    assert answer.headers["location"] == "/console"


@pytest.mark.parametrize("page", list(PAGES))
async def test_every_page_needs_no_key_and_sends_a_strict_csp(gateway: httpx.AsyncClient, page: str) -> None:
    answer = await gateway.get("/console" if page == "overview" else f"/console/{page}")
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert "<script>" not in answer.text, "an inline script: the CSP refuses it"
    assert "style=" not in answer.text, "an inline style: the CSP refuses it"
    assert f'src="/console/static/pages/{page}.js"' in answer.text


async def test_an_unknown_page_is_a_problem(gateway: httpx.AsyncClient) -> None:
    answer = await gateway.get("/console/nope")
    assert answer.status_code == 404
    assert answer.headers["content-type"] == "application/problem+json"
    assert "the console has no page 'nope'" in answer.json()["detail"]


async def test_the_pages_data_still_needs_a_key(gateway: httpx.AsyncClient) -> None:
    assert (await gateway.get("/v1/topics")).status_code == 401


@pytest.mark.parametrize(("path", "asset"), [("/docs", "swagger-ui-bundle.js"), ("/redoc", "redoc.standalone.js")])
async def test_api_docs_load_from_the_package(gateway: httpx.AsyncClient, path: str, asset: str) -> None:
    page = await gateway.get(path)
    assert page.status_code == 200
    assert "cdn" not in page.text.lower()
    assert "fonts.googleapis" not in page.text
    src = next(part.split('"')[1] for part in page.text.split("src=")[1:] if asset in part)
    script = await gateway.get(src)
    assert script.status_code == 200
    assert len(script.content) > 100_000


async def test_vendored_libraries_carry_version_and_licence() -> None:
    vendor = Path(__file__).parents[2] / "gateway" / "console" / "static" / "vendor"
    for library in vendor.iterdir():
        assert (library / "LICENSE").is_file(), library
        assert library.name.endswith((library / "package.json").read_text().split('"version": "')[1].split('"')[0])
