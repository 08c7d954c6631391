"""Console page load times in headless Chromium, as a person's browser would load them.

Debian's chromium, driven by Playwright, launched as tests/e2e/test_console.py launches it (by its path, as root with
--no-sandbox, the background networking off: `playwright install` never runs). One tab holds the API key in its
sessionStorage, as if typed into the page's key form, and loads each page in turn; a load is timed from the
navigation's start (the page's `performance.timeOrigin`) until the page's loader marks `body[data-loaded]` (console.js
sets it when the page's data is drawn, or its problem shown). The mark's time is taken in the page by a
MutationObserver, so Playwright's own round trips are not counted. A page that shows a problem fails the run: its
time would be of an error page.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from playwright.sync_api import Page, sync_playwright

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
KEY_ITEM = "petrel.console.key"
"""Where the console keeps the tab's key (gateway/console/static/console.js)."""
LOADED_AT = """
window.__petrelLoadedAt = null;
new MutationObserver(() => {
  if (window.__petrelLoadedAt === null && document.body && document.body.hasAttribute("data-loaded")) {
    window.__petrelLoadedAt = performance.now();
  }
}).observe(document, { subtree: true, childList: true, attributes: true, attributeFilter: ["data-loaded"] });
"""
"""Records when body[data-loaded] first appears, in ms since the navigation started."""
TIMEOUT_MS = 30_000


@dataclass(frozen=True, slots=True)
class ConsolePage:
    name: str
    """The page (gateway.console.routes.PAGES), e.g. `topics`."""
    query: str = ""
    """What the page is asked to show, e.g. `?topic=orders`."""

    @property
    def label(self) -> str:
        return self.name + self.query


@contextmanager
def console_tab(key: str | None) -> Iterator[Page]:
    """A tab of headless Chromium holding `key` in its sessionStorage."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, timeout=TIMEOUT_MS)
        try:
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            if key is not None:
                context.add_init_script(f"sessionStorage.setItem({KEY_ITEM!r}, {key!r})")
            context.add_init_script(LOADED_AT)
            page = context.new_page()
            page.set_default_timeout(TIMEOUT_MS)
            yield page
        finally:
            browser.close()


def page_url(gateway: str, page: ConsolePage) -> str:
    return f"{gateway}/console{'' if page.name == 'overview' else '/' + page.name}{page.query}"


def load_ms(tab: Page, gateway: str, page: ConsolePage) -> float:
    """One load of `page`: ms from the navigation's start until its data is drawn."""
    tab.goto(page_url(gateway, page), wait_until="commit")
    tab.wait_for_selector("body[data-loaded]", state="attached")
    shown = tab.locator("#problems").inner_text().strip()
    if shown:
        raise RuntimeError(f"the console's {page.label} page showed a problem: {shown}")
    loaded = tab.evaluate("window.__petrelLoadedAt")
    if not isinstance(loaded, int | float):
        raise RuntimeError(f"the console's {page.label} page was marked loaded before the timer saw it")
    return float(loaded)


def load_times(
    gateway: str, key: str | None, pages: Sequence[ConsolePage], loads: int, warmups: int
) -> dict[str, list[float]]:
    """Each page's `loads` load times (ms), after `warmups` loads of it not counted; the pages in turn, one tab."""
    times: dict[str, list[float]] = {page.label: [] for page in pages}
    with console_tab(key) as tab:
        for page in pages:
            for _ in range(warmups):
                load_ms(tab, gateway, page)
            times[page.label] = [load_ms(tab, gateway, page) for _ in range(loads)]
    return times
