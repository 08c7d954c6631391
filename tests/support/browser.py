"""Headless Debian chromium driven by Playwright, for the console's browser tests.

Playwright's own browser download cannot run here (and `playwright install` never runs): the tests launch
Debian's `chromium` by its path, as root with --no-sandbox, with the background-networking flags off (this
machine's closed network refuses their connections). When it cannot start, the tests fail naming the package.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Error, Page, sync_playwright

from bench.pageload import CHROMIUM, CHROMIUM_ARGS, KEY_ITEM  # one launch, the bench's and the tests'


@contextmanager
def chromium() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        try:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, timeout=30_000)
        except Error as exc:
            pytest.fail(
                f"Debian's chromium could not start from {CHROMIUM} ({exc.message.splitlines()[0]}): "
                "`apt-get install chromium` (make test installs it when it runs as root)",
                pytrace=False,
            )
        try:
            yield browser
        finally:
            browser.close()


@dataclass
class ConsoleErrors:
    """What a page wrote to the browser's console as errors, and the exceptions it did not catch."""

    seen: list[str] = field(default_factory=list)

    def watch(self, page: Page) -> None:
        page.on("console", self._console)
        page.on("pageerror", lambda error: self.seen.append(f"uncaught: {error}"))

    def _console(self, message: ConsoleMessage) -> None:
        if message.type == "error":
            self.seen.append(f"{message.text} ({message.location.get('url', '')})")


@contextmanager
def console_tab(browser: Browser, key: str | None = None) -> Iterator[tuple[Page, ConsoleErrors]]:
    """A new tab of its own (its own sessionStorage), holding `key` as if typed into the page's key form."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    if key is not None:
        context.add_init_script(f"sessionStorage.setItem({KEY_ITEM!r}, {key!r})")
    page = context.new_page()
    page.set_default_timeout(15_000)
    errors = ConsoleErrors()
    errors.watch(page)
    try:
        yield page, errors
    finally:
        context.close()
