"""The console's pages, its static files, `GET /` and the API's own docs pages (/docs, /redoc), all from the package.

The pages hold no data and need no key: the key check lets their paths through (gateway.auth.key_check) and
each page asks for a key when a /v1 call answers 401. Every page is sent with a strict Content-Security-Policy:
its own scripts and styles only, no inline ones, no frames, no forms posted by the browser.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Final

from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from starlette.routing import Mount

from libs.errors import NotFound

HERE: Final = Path(__file__).parent
CONSOLE: Final = "/console"
STATIC: Final = f"{CONSOLE}/static"
VENDOR: Final = f"{STATIC}/vendor"
SWAGGER_UI: Final = f"{VENDOR}/swagger-ui-dist-5.35.0"
REDOC: Final = f"{VENDOR}/redoc-2.5.4/redoc.standalone.js"

CONTENT_SECURITY_POLICY: Final = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
)
PAGE_HEADERS: Final = {
    "content-security-policy": CONTENT_SECURITY_POLICY,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}

PAGES: Final = {
    "overview": "Overview",
    "topics": "Topics",
    "groups": "Groups",
    "messages": "Messages",
    "dlq": "Dead letters",
    "timers": "Timers",
    "transactions": "Transactions",
    "push": "Push",
    "keys": "API keys",
}
"""page -> its title, in the navigation's order"""

router = APIRouter(include_in_schema=False)


@functools.cache
def templates() -> Jinja2Templates:
    return Jinja2Templates(directory=HERE / "templates")


def console_page(request: Request, page: str) -> HTMLResponse:
    if page not in PAGES:
        raise NotFound(f"the console has no page {page!r}: it has {', '.join(PAGES)}")
    context = {"page": page, "title": PAGES[page], "pages": PAGES, "static": STATIC}
    return templates().TemplateResponse(request, f"{page}.html", context, headers=PAGE_HEADERS)


@router.get("/")
async def root() -> RedirectResponse:
    return RedirectResponse(CONSOLE, status_code=307)


@router.get(CONSOLE)
async def overview(request: Request) -> HTMLResponse:
    return console_page(request, "overview")


@router.get(CONSOLE + "/{page}")
async def page(request: Request, page: str) -> HTMLResponse:
    return console_page(request, page)


@router.get("/docs")
async def swagger_ui() -> HTMLResponse:
    return get_swagger_ui_html(
        openapi_url="/openapi.json",
        title="Petrel gateway: API",
        swagger_js_url=f"{SWAGGER_UI}/swagger-ui-bundle.js",
        swagger_css_url=f"{SWAGGER_UI}/swagger-ui.css",
        swagger_favicon_url=f"{STATIC}/favicon.svg",
        oauth2_redirect_url="/docs/oauth2-redirect",
    )


@router.get("/docs/oauth2-redirect")
async def swagger_ui_redirect() -> HTMLResponse:
    return get_swagger_ui_oauth2_redirect_html()


@router.get("/redoc")
async def redoc() -> HTMLResponse:
    return get_redoc_html(
        openapi_url="/openapi.json",
        title="Petrel gateway: API",
        redoc_js_url=REDOC,
        redoc_favicon_url=f"{STATIC}/favicon.svg",
        with_google_fonts=False,
    )


def static_files() -> Mount:
    """The console's scripts, styles and vendored libraries (a Mount: add it after the routers)."""
    return Mount(STATIC, app=StaticFiles(directory=HERE / "static"), name="console-static")
