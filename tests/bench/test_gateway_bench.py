"""`petrel bench gateway`'s cost of auth at a tiny size: two real clusters, one needing keys, the other not."""

from __future__ import annotations

import pytest

from bench.scenarios.gateway import Timing, auth_cost

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]  # two clusters start and stop


def test_auth_on_is_measured_with_a_key_the_gateway_lets_in_beside_auth_off() -> None:
    figure = auth_cost(Timing(0.2, 0.5), rounds=1)  # raises if any keyed send was refused

    assert figure.name == "gateway: send 1 message, auth on, 32 conns"
    assert figure.reference_name == "same, PETREL_AUTH=off"
    assert figure.ours > 0
    assert figure.reference > 0
    assert figure.target_ratio == 0.95
