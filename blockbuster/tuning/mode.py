"""Which tuning runs: ``measure``, ``model`` or ``off``, and its time budget.

An explicit choice (``--tune``, ``compile(tune=...)``, the torch option ``tune``)
wins; else ``$BLOCKBUSTER_TUNE``; else the entry point's own default: the command
line's ``run`` measures (a user running a workload wants its best blocks and sees
the time it takes), the library doors (``blockbuster.compile``, ``torch.compile``)
only model, so a library call never runs the user's program on random data
unasked. The test suite sets ``BLOCKBUSTER_TUNE=model`` (``tests/conftest.py``):
no measurement there unless a test asks for it by name.
"""

from __future__ import annotations

import os

from ..errors import UsageError

MODES = ("measure", "model", "off")
ENV_MODE = "BLOCKBUSTER_TUNE"
ENV_SECONDS = "BLOCKBUSTER_TUNE_SECONDS"
#: Measurement stops starting new candidates once this much tuning time is spent.
#: A Llama layer at T=2048 costs ~20 s per candidate (a cold compile of 10 kernels and
#: two 1.7 s calls): 30 s measured only the first two, and the wide blocks that run it
#: 1.4x faster were third.
DEFAULT_BUDGET_S = 60.0


def resolve_mode(explicit: str | None, default: str) -> str:
    """``explicit`` if given, else ``$BLOCKBUSTER_TUNE``, else ``default``."""
    for value, where in ((explicit, "tune"), (os.environ.get(ENV_MODE), ENV_MODE)):
        if value is None or value == "":
            continue
        if value not in MODES:
            raise UsageError(f"{where}: expected one of {', '.join(MODES)}, got {value!r}")
        return value
    return default


def budget_seconds(explicit: float | None = None) -> float:
    """The measurement budget: ``explicit``, else ``$BLOCKBUSTER_TUNE_SECONDS``,
    else :data:`DEFAULT_BUDGET_S`."""
    if explicit is not None:
        return float(explicit)
    text = os.environ.get(ENV_SECONDS)
    if not text:
        return DEFAULT_BUDGET_S
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"{ENV_SECONDS}: expected seconds, got {text!r}") from None
    if not value >= 0:
        raise UsageError(f"{ENV_SECONDS}: expected non-negative seconds, got {text!r}")
    return value
