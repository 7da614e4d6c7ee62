"""How torch's idle CPU threads wait, set before torch loads: attncli's choice where the user
made none.

Why it matters: torch's CPU kernels run in an OpenMP team (GNU libgomp in the PyPI wheels).
Between two parallel regions a thread of the team spins before it sleeps: libgomp spins
GOMP_SPINCOUNT times (300,000 unless set; OMP_WAIT_POLICY=active spins without end, passive
not at all). Alone on a machine the spinning is what keeps a step's many small operations
fast. Beside another process it takes the cores that the other's threads need, and two
spinning teams on the same cores slow each other far more than their share. The spin count
chosen here (`SPIN_COUNT`) and the measurements behind it: benchmarks/MEASUREMENTS.md, "Two
attncli processes on one machine"; docs/serving.md#sharing-a-machine says what to set.

The user's own setting always wins: any of `USER_SETTINGS` in the environment leaves all of
them as they are, and ATTNCLI_THREAD_WAITS=0 keeps libgomp's own defaults (what attncli did
before 0.7, which the benchmarks compare against). Kept free of torch, like malloc.py: it must
run before torch is imported.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

SPIN_COUNT = "30000"
USER_SETTINGS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")
OPT_OUT = "ATTNCLI_THREAD_WAITS"


def set_thread_waits(environ: MutableMapping[str, str] = os.environ) -> dict[str, str]:
    """Set attncli's spin count in `environ` unless the user chose how threads wait, or opted
    out; returns what was set ({} when nothing was)."""
    if environ.get(OPT_OUT) == "0" or any(name in environ for name in USER_SETTINGS):
        return {}
    environ["GOMP_SPINCOUNT"] = SPIN_COUNT
    return {"GOMP_SPINCOUNT": SPIN_COUNT}
