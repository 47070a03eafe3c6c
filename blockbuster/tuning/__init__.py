"""Automatic block sizes: the cost model proposes, a short measurement disposes.

``tune(tunable, backend, mode)`` chooses the blocks of a :class:`Tunable`'s free
dimensions for a backend (:mod:`.tuner`); modes and their defaults are in
:mod:`.mode`, the candidates in :mod:`.candidates`, the price in :mod:`.model`, the
measurement in :mod:`.measure`, the on-disk cache in :mod:`.cache`, and what the
entry points tune in :mod:`.targets`.
"""

from .mode import (
           DEFAULT_BUDGET_S,
           ENV_MODE,
           ENV_SECONDS,
           MODES,
           budget_seconds,
           resolve_mode,
)
from .tuner import Tunable, Tuned, tune

__all__ = [
           "DEFAULT_BUDGET_S",
           "ENV_MODE",
           "ENV_SECONDS",
           "MODES",
           "Tunable",
           "Tuned",
           "budget_seconds",
           "resolve_mode",
           "tune",
]
