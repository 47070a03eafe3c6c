"""The suite runs on every registered backend: the core's reference backend is among
them, and every registered plugin loads (a broken one fails here, by name)."""

from blockbuster.backends.registry import backend_names, list_backends


def test_every_registered_backend_loads_and_is_tested():
    infos = list_backends()
    assert "reference" in [i.name for i in infos]
    assert backend_names() == [i.name for i in infos]    # what the fixture runs over
    broken = [f"{i.name}: {i.error}" for i in infos if i.status != "ok"]
    assert broken == []
