import pytest

torch = pytest.importorskip("torch", reason="the torch extra: pip install -e '.[torch]'")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
