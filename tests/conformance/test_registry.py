"""The suite runs on every registered backend: the list is not empty of the one the
core ships, and every registered plugin loads (a broken one fails here by name)."""

from blockbuster.backends.registry import list_backends




def test_every_registered_backend_loads_and_is_tested():
    infos = list_backends()
    assert "reference" in [i.name for i in infos]
    broken = [f"{i.name}: {i.error}" for i in infos if i.status != "ok"]
    assert broken == []
