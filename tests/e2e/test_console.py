"""The console in a real browser: headless Debian chromium driven by Playwright, on one `petrel up` cluster.

The cluster runs with API keys required, short retry levels and lag sampled every second. Each test opens tabs of
its own (their own sessionStorage) in the module's one browser and reads the page as a person would: the tables,
the chart, the messages shown. With PETREL_CONSOLE_SCREENSHOTS=<dir> the tests save the screenshots
docs/console.md shows (`PETREL_CONSOLE_SCREENSHOTS=docs/images make test PYTEST_ARGS=tests/e2e/test_console.py`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect

from gateway.console.routes import PAGES
from tests.support.api_keys import bearer, issue_key
from tests.support.browser import chromium, console_tab
from tests.support.petrel_up import UpCluster, petrel_env, petrel_up
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e

LAG_SAMPLE_SECONDS = "1"
SHOTS = os.environ.get("PETREL_CONSOLE_SCREENSHOTS")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpCluster]:
    env = petrel_env(PETREL_AUTH="required", PETREL_BROKER_LAG_SAMPLE_SECONDS=LAG_SAMPLE_SECONDS)
    levels = "100ms 100ms 200ms 200ms 300ms 300ms"
    with petrel_up(tmp_path_factory.mktemp("console"), "--no-etl", "--delay-levels", levels, env=env) as up:
        yield up


@pytest.fixture(scope="module")
def admin_key(cluster: UpCluster) -> str:
    return issue_key(cluster.data_dir, "admin", "pub", "sub", name="console-admin")


@pytest.fixture(scope="module")
def api(cluster: UpCluster, admin_key: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=cluster.gateway, headers=bearer(admin_key), timeout=15) as client:
        wait_until(lambda: client.get("/v1/topics").status_code == 200, "the gateway knows the admin key", 10)
        yield client


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as started:
        yield started


def shot(page: Page, name: str) -> None:
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SHOTS) / f"console-{name}.png"), full_page=True)


def send(api: httpx.Client, topic: str, *bodies: str, key: str | None = None) -> list[str]:
    ids = []
    for body in bodies:
        answer = api.post(f"/v1/topics/{topic}/messages", json={"body": body, "keys": [key] if key else []})
        assert answer.status_code == 201, answer.text
        ids.append(answer.json()["message_id"])
    return ids


def receive(api: httpx.Client, group: str, topic: str, count: int, **extra: Any) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = []

    def more() -> bool:
        body = {"max_messages": min(32, count - len(got)), "wait_seconds": 1} | extra
        answer = api.post(f"/v1/groups/{group}/topics/{topic}/receive", json=body)
        assert answer.status_code == 200, answer.text
        got.extend(answer.json()["messages"])
        return len(got) >= count

    wait_until(more, f"{count} messages of {topic} for {group}", 20)
    return got


def settle(api: httpx.Client, verb: str, group: str, messages: list[dict[str, Any]]) -> None:
    answer = api.post(f"/v1/groups/{group}/{verb}", json={"receipt_handles": [m["receipt_handle"] for m in messages]})
    assert answer.status_code == 200, answer.text


def loaded(page: Page) -> None:
    """Wait until the page's loader has finished, well or not (console.js marks the body)."""
    page.wait_for_selector("body[data-loaded]", state="attached")


def page_url(cluster: UpCluster, page: str, query: str = "") -> str:
    return f"{cluster.gateway}/console{'' if page == 'overview' else '/' + page}{query}"


def test_every_page_loads_without_a_console_error(
    cluster: UpCluster, api: httpx.Client, browser: Browser, admin_key: str
) -> None:
    assert api.put("/v1/groups/billing", json={}).status_code in (200, 201)
    send(api, "invoices", "first invoice", "second invoice", key="inv-1")
    settle(api, "ack", "billing", receive(api, "billing", "invoices", 1))
    queries = {"topics": "?topic=invoices", "groups": "?group=billing", "messages": "?peek=invoices"}
    queries |= {"dlq": "?group=billing"}
    failed: dict[str, str] = {}
    with console_tab(browser, admin_key) as (page, errors):
        for name in PAGES:
            page.goto(page_url(cluster, name, queries.get(name, "")))
            loaded(page)
            shown = page.locator("#problems").inner_text().strip()
            if errors.seen or shown or "loading…" in page.locator("main").inner_text():
                failed[name] = f"console errors {errors.seen}, problems shown {shown!r}"
            errors.seen.clear()
            shot(page, name)
    assert failed == {}, f"pages that did not load cleanly: {failed}"


def test_the_lag_chart_shows_a_group_falling_behind_and_catching_up(
    cluster: UpCluster, api: httpx.Client, browser: Browser, admin_key: str
) -> None:
    group, topic = "ledger", "payments"
    assert api.put(f"/v1/groups/{group}", json={}).status_code in (200, 201)
    send(api, topic, "opening balance")
    settle(api, "ack", group, receive(api, group, topic, 1))
    send(api, topic, *[f"payment {n}" for n in range(40)])

    def lags() -> list[int]:
        history = api.get(f"/v1/groups/{group}/lag/history", params={"topic": topic}).json()
        return [s["lag"] for series in history["series"] for s in series["samples"]]

    wait_until(lambda: 40 in lags(), "a lag sample of 40", 15)
    settle(api, "ack", group, receive(api, group, topic, 40))
    wait_until(lambda: lags()[-1:] == [0], "a lag sample of 0 after the acks", 15)

    with console_tab(browser, admin_key) as (page, errors):
        page.goto(page_url(cluster, "groups", f"?group={group}"))
        chart = page.locator("#lag-chart")
        expect(chart.locator("canvas")).to_be_visible()
        expect(page.locator("#total-lag")).to_have_text("0")
        assert int(chart.get_attribute("data-peak") or 0) >= 40, "the chart shows the group 40 behind"
        last = json.loads(
            chart.get_attribute("data-last") or "null"
        )  # each series' last sample (its retry topic's too)
        assert last, "the chart has no series"
        assert set(last) == {0}, "and caught up at its end"
        assert errors.seen == []
        shot(page, "lag")


def test_a_dlq_redrive_from_the_page_lands_the_message_back(
    cluster: UpCluster, api: httpx.Client, browser: Browser, admin_key: str
) -> None:
    group, topic = "refunds", "returns"
    assert api.put(f"/v1/groups/{group}", json={"max_retries": 0}).status_code in (200, 201)
    (message_id,) = send(api, topic, "cannot parse this")
    settle(api, "nack", group, receive(api, group, topic, 1))
    wait_until(lambda: api.get(f"/v1/groups/{group}/dlq").json()["messages"] != [], "the message dead-lettered", 15)

    with console_tab(browser, admin_key) as (page, errors):
        page.goto(page_url(cluster, "dlq", f"?group={group}"))
        row = page.locator("tr", has_text=message_id)
        expect(row).to_be_visible()
        shot(page, "dlq")
        row.get_by_role("button", name="Redrive").click()
        expect(page.locator("#problems .notice")).to_contain_text("redriven 1")
        expect(page.locator("#dlq")).to_contain_text("no dead letter")
        assert errors.seen == []
    (back,) = receive(api, group, topic, 1)
    assert back["message_id"] == message_id
    settle(api, "ack", group, [back])


def test_a_trace_shows_a_nacked_then_acked_messages_steps(
    cluster: UpCluster, api: httpx.Client, browser: Browser, admin_key: str
) -> None:
    group, topic = "shipping", "parcels"
    assert api.put(f"/v1/groups/{group}", json={}).status_code in (200, 201)
    (message_id,) = send(api, topic, "parcel 7", key="parcel-7")
    settle(api, "nack", group, receive(api, group, topic, 1))
    (again,) = receive(api, group, topic, 1)
    settle(api, "ack", group, [again])

    with console_tab(browser, admin_key) as (page, errors):
        page.goto(page_url(cluster, "messages"))
        page.get_by_label("Message id").fill(message_id)
        page.get_by_role("button", name="Trace").click()
        group_row = page.locator("#trace tr", has_text=group).last
        expect(group_row).to_contain_text("acked")
        expect(group_row.locator("td").nth(2)).to_have_text("2")  # two deliveries: the nacked one, the acked one
        steps = page.locator("#trace").inner_text().lower()
        for step in ("stored", "nack", "ack"):
            assert step in steps, f"the trace names {step}: {steps}"
        assert errors.seen == []
        shot(page, "trace")


def test_with_auth_on_the_page_asks_for_a_key_and_shows_a_403_as_a_message(
    cluster: UpCluster, api: httpx.Client, browser: Browser
) -> None:
    reader = issue_key(cluster.data_dir, "sub", name="console-reader")
    with httpx.Client(base_url=cluster.gateway, headers=bearer(reader)) as as_reader:
        wait_until(lambda: as_reader.get("/v1/topics").status_code == 200, "the gateway knows the reader's key", 10)
    with console_tab(browser) as (page, _):
        page.goto(page_url(cluster, "topics"))
        key_form = page.locator("#key-form")
        expect(key_form).to_be_visible()
        expect(page.locator("#problems")).to_contain_text("401")
        shot(page, "key")
        page.get_by_label("API key").fill(reader)
        page.get_by_role("button", name="Use key").click()
        expect(key_form).to_be_hidden()
        expect(page.locator("#topics")).to_contain_text("topic")
        assert page.context.cookies() == [], "no cookie carries the key"
        assert page.evaluate("sessionStorage.getItem('petrel.console.key')") == reader

        page.get_by_label("Topic").fill("not-mine")
        page.get_by_role("button", name="Create or change").click()
        problem = page.locator("#problems .problem")
        expect(problem).to_contain_text("403")
        expect(problem).to_contain_text("forbidden")
        assert api.get("/v1/topics/not-mine").status_code == 404, "the read-only key changed nothing"


def test_the_api_docs_render_from_the_gateway_alone(cluster: UpCluster, browser: Browser) -> None:
    with console_tab(browser) as (page, _):
        elsewhere: list[str] = []
        local = (cluster.gateway, f"blob:{cluster.gateway}", "data:")  # blob: ReDoc's worker, made in the page
        page.on("request", lambda r: None if r.url.startswith(local) else elsewhere.append(r.url))
        page.goto(f"{cluster.gateway}/docs")
        expect(page.locator(".opblock-summary-path").first).to_be_visible()
        page.goto(f"{cluster.gateway}/redoc")
        # ReDoc renders in the page with a worker of its own: more than expect's 5 s on a loaded machine
        expect(page.get_by_role("heading", name="Petrel gateway").first).to_be_visible(timeout=30_000)
        # ReDoc 2.5.4's bundle links its "API docs by Redocly" logo from its CDN: the one image missing offline.
        assert [url for url in elsewhere if url != "https://cdn.redoc.ly/redoc/logo-mini.svg"] == []
