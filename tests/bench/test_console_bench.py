"""`petrel bench console` at a tiny size: a real cluster with auth on, its data made through /v1, every console page
loaded in headless Chromium; each page's figure and the slowest page's are there and positive (no timing is judged)."""

from __future__ import annotations

import pytest

from bench.scenarios.console import AIM_MS, PAGES, Sizes, measure

pytestmark = pytest.mark.e2e

TINY = Sizes(topics=20, groups=5, loads=1, warmups=0)


@pytest.mark.timeout(240)
def test_the_console_bench_times_every_page_against_the_aim() -> None:
    figures = {f.name: f for f in measure(TINY)}

    pages = [f"console load: {page.name}" for page in PAGES]
    assert sorted(figures) == sorted([*pages, "console load: slowest page"])
    for figure in figures.values():
        assert figure.ours > 0, figure
        assert (figure.unit, figure.reference, figure.target_ratio) == ("ms", AIM_MS, 1.0)
        assert not figure.higher_is_better
        assert figure.reference_name.startswith("none: ")
    assert figures["console load: slowest page"].ours == max(figures[name].ours for name in pages)
