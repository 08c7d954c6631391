"""How many generated examples a property or fuzz test tries: all of them in `make test`, fewer in `make test-fast`.

`make test-fast` (the developer's quick loop) sets TESTS_QUICK=1: each property and each fuzzed
operation is still tried, on a quarter of the inputs. `make test`, and so CI, always tries the
full count.
"""

from __future__ import annotations

import os

QUICK_ENV = "TESTS_QUICK"


def examples(full: int) -> int:
    """`full`, or a quarter of it (at least 3) in the quick loop."""
    return max(full // 4, 3) if os.environ.get(QUICK_ENV) == "1" else full
