"""Every backend that loads here (the reference one always; numba where installed)."""

from blockbuster.backends.registry import list_backends

BACKENDS = [b.name for b in list_backends() if b.status == "ok"]
