"""The suite runs on every registered backend: the core's reference backend is among
them, and every registered plugin loads (a broken one fails here, by name)."""

from blockbuster.backends.registry import backend_names, list_backends


def test_every_registered_backend_loads_and_is_tested():
    infos = list_backends()
    assert "reference" in [i.name for i in infos]
    assert backend_names() == [i.name for i in infos]    # what the fixture runs over
    broken = [f"{i.name}: {i.error}" for i in infos if i.status != "ok"]
    assert broken == []


def test_a_dtype_numpy_cannot_read_is_a_backend_error(backend):
    # dtype=3 raised NumPy's TypeError on every backend.
    import pytest

    import blockbuster as bb
    program = bb.workload("paper_figure", M=8, N=8)
    for bad in (3, "f32", object()):
        with pytest.raises(bb.BackendError, match=f"{backend.name}: dtype must be"):
            bb.compile(program, backend=backend, dtype=bad)
