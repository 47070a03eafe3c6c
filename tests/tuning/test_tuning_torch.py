"""The torch.compile backend tunes a region's free blocks (not the head-split ones),
unless ``blocks`` are given or ``tune`` is off; the result still matches eager."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the torch extra: pip install -e '.[torch]'")

from blockbuster.frontend.pytorch.dynamo import CompileOptions, compile_graph


class Mlp(torch.nn.Module):
    def __init__(self, e=40, f=130):
        super().__init__()
        self.up = torch.nn.Linear(e, f)
        self.down = torch.nn.Linear(f, e)

    def forward(self, x):
        return self.down(torch.nn.functional.silu(self.up(x)))


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BLOCKBUSTER_CACHE", str(tmp_path / "cache"))


def _region(options):
    torch.manual_seed(0)
    model = Mlp().eval()
    x = torch.randn(150, 40)
    gm = torch.fx.symbolic_trace(model)
    region = compile_graph(gm, [x], CompileOptions.parse({"backend": "reference", **options}))
    return region, model, x


def test_free_blocks_are_tuned_and_results_match_eager():
    region, model, x = _region({"tune": "model"})
    assert region.tuning is not None and region.tuning.source == "model"
    chosen = region.tuning.blocks
    dims = {d.name: d for d in region.program.dims}
    assert chosen and all(dims[n].block == min(b, dims[n].size) for n, b in chosen.items())
    assert dims["N150"].block != 64                       # 150 rows: not the default
    with torch.no_grad():
        want = model(x)
        (got,) = region(x)
    assert float((got - want).abs().max() / want.abs().max()) < 1e-5


@pytest.mark.parametrize("options", [{"tune": "off"}, {"blocks": {"N150": 32}}])
def test_no_tuning_when_off_or_blocks_given(options):
    region, *_ = _region(options)
    assert region.tuning is None
