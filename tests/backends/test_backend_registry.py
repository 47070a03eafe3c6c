"""Backend discovery: the real entry point, and fake ones for every failure mode."""

import importlib.metadata
import sys
import uuid
import warnings

import pytest

from blockbuster.backends import reference, registry
from blockbuster.backends.base import Backend
from blockbuster.errors import BackendError

GROUP = registry.GROUP


def test_reference_is_discovered_through_its_installed_entry_point():
    assert "reference" in registry.backend_names()
    assert registry.get_backend("reference") is reference.backend
    info = {i.name: i for i in registry.list_backends()}["reference"]
    assert info.status == "ok" and info.error == ""
    assert info.description == reference.backend.description


# --- fake plugins --------------------------------------------------------------

@pytest.fixture
def plugins(tmp_path, monkeypatch):
    """``make(source) -> "module"``: write a uniquely named plugin module importable
    from tmp_path; ``install(*(name, value))`` makes them the only entry points."""
    monkeypatch.syspath_prepend(str(tmp_path))
    made = []

    def make(source: str) -> str:
        module = f"bbplugin_{uuid.uuid4().hex[:12]}"
        (tmp_path / f"{module}.py").write_text(source)
        made.append(module)
        return module

    def install(*pairs):
        eps = [importlib.metadata.EntryPoint(name, value, GROUP) for name, value in pairs]

        def entry_points(**selection):
            assert selection == {"group": GROUP}
            return eps

        monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)

    yield make, install
    for module in made:
        sys.modules.pop(module, None)


GOOD = """
from blockbuster.backends.base import Backend
from blockbuster.cost import DEFAULT_HARDWARE as HW
backend = Backend(name="{name}", description="{name} for tests", compile_fn=lambda p: None,
                  hardware=HW)
def factory():
    return Backend(name="{name}", description="{name} from a factory",
                   compile_fn=lambda p: None, hardware=HW)
"""


def test_listing_names_imports_no_plugin(plugins):
    make, install = plugins
    module = make(GOOD.format(name="lazy"))
    install(("lazy", f"{module}:backend"))
    assert registry.backend_names() == ["lazy"]
    assert module not in sys.modules
    registry.list_backends()
    assert module in sys.modules  # status needs the import


def test_instance_and_factory_entry_points(plugins):
    make, install = plugins
    module = make(GOOD.format(name="fake"))
    install(("direct", f"{module}:backend"), ("made", f"{module}:factory"))
    assert registry.get_backend("direct").description == "fake for tests"
    made = registry.get_backend("made")
    assert isinstance(made, Backend) and made.description == "fake from a factory"


@pytest.mark.parametrize("source, value, error", [
    ('raise ImportError("needs libfoo")', "{m}:backend", "ImportError: needs libfoo"),
    ("def broken(:\n", "{m}:backend", "SyntaxError: "),
    ("def backend():\n    raise RuntimeError('no device')\n", "{m}:backend",
     "RuntimeError: no device"),
    ("backend = 42\n", "{m}:backend", "TypeError: entry point"),
    ("x = 1\n", "{m}:backend", "AttributeError: "),
    (None, "no_such_module_for_blockbuster_tests:backend", "ModuleNotFoundError: "),
])
def test_broken_plugins_are_listed_never_raised(plugins, source, value, error):
    make, install = plugins
    good = make(GOOD.format(name="good"))
    module = make(source) if source is not None else None
    install(("bad", value.format(m=module)), ("good", f"{good}:backend"))
    infos = {i.name: i for i in registry.list_backends()}
    assert infos["good"].status == "ok"
    assert infos["bad"].status == "broken"
    assert infos["bad"].error.startswith(error) and "\n" not in infos["bad"].error
    with pytest.raises(BackendError) as raised:
        registry.get_backend("bad")
    assert str(raised.value).startswith("backend 'bad' is broken: " + error)
    assert registry.get_backend("good").description == "good for tests"


def test_unknown_name_lists_the_available_ones(plugins):
    make, install = plugins
    module = make(GOOD.format(name="a"))
    install(("alpha", f"{module}:backend"), ("beta", f"{module}:factory"))
    with pytest.raises(BackendError, match=r"unknown backend 'gamma' \(available: alpha, beta\)"):
        registry.get_backend("gamma")


def test_duplicate_names_warn_and_the_first_wins(plugins):
    make, install = plugins
    first, second = make(GOOD.format(name="first")), make(GOOD.format(name="second"))
    install(("dup", f"{first}:backend"), ("dup", f"{second}:backend"))
    with pytest.warns(RuntimeWarning, match="registered twice"):
        assert registry.get_backend("dup").description == "first for tests"
    with pytest.warns(RuntimeWarning):
        assert [i.name for i in registry.list_backends()] == ["dup"]


def test_an_identical_registration_seen_twice_is_silent(plugins):
    make, install = plugins
    module = make(GOOD.format(name="same"))
    install(("same", f"{module}:backend"), ("same", f"{module}:backend"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert registry.backend_names() == ["same"]


@pytest.mark.parametrize("numba, expected", [
    (None, "reference"),          # not installed
    ("backend", "numba"),         # installed and working
    ("missing", "reference"),     # installed but broken
])
def test_default_backend_prefers_a_working_numba(plugins, numba, expected):
    make, install = plugins
    module = make(GOOD.format(name="numba"))
    pairs = [("reference", "blockbuster.backends.reference:backend")]
    if numba is not None:
        pairs.append(("numba", f"{module}:{numba}"))
    install(*pairs)
    assert registry.default_backend_name() == expected
