"""Elementwise operators of real models through the importer and torch.compile:
sin/cos of runtime positions, log1p/expm1 and the activations decomposed into them
(softplus, mish, log-sigmoid, ELU/SELU/CELU), sign, powers with a tensor exponent or
a number base, clamps by tensors. Checked against eager PyTorch in float64 on the
same float32 inputs, at ragged sizes and at ±1e4, ±100 and tiny magnitudes (where a
naive log(1 + exp(x)) overflows or loses the tail)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from blockbuster.frontend.pytorch import ImportError_, lower_module

from helpers_torch import run_imported

EDGES = [1e4, -1e4, 100.0, -100.0, 30.0, -30.0, 20.5, -20.5, 1e-6, -1e-6, 1e-20, 0.0,
         88.0, -88.0, 5.0, -5.0, 0.5, -0.5, 3.0]

ACTIVATIONS = {
    "sin": torch.sin, "cos": torch.cos,
    "log1p": lambda x: torch.log1p(x.abs()), "expm1": lambda x: torch.expm1(x.clamp(max=80)),
    "softplus": F.softplus, "softplus_beta": lambda x: F.softplus(x, beta=2.0, threshold=5.0),
    "mish": F.mish, "logsigmoid": F.logsigmoid, "elu": F.elu, "selu": F.selu,
    "celu": lambda x: F.celu(x, 0.5), "leaky_relu": lambda x: F.leaky_relu(x, 0.2),
    "hardtanh": lambda x: F.hardtanh(x, -2.0, 3.0), "relu6": F.relu6,
    "hardsigmoid": F.hardsigmoid, "hardswish": F.hardswish, "sign": torch.sign,
    "softshrink": F.softshrink,
    "pow_tensor": lambda x: torch.pow(x.abs() + 0.5, torch.tanh(x) * 3),
    "pow_base": lambda x: torch.pow(10000.0, torch.tanh(x)),
    "pow_neg_int": lambda x: (x.abs() + 1.0) ** -3,
    "pow_zero": lambda x: x ** 0,
    "clamp_tensor": lambda x: torch.clamp(x, min=-x.abs() * 0.5, max=x * x),
    "log2": lambda x: torch.log2(x.abs()), "log10": lambda x: torch.log10(x.abs()),
    "exp2": lambda x: torch.exp2(x.clamp(max=120)), "tan": torch.tan,
}


class Activation(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


def _inputs(rows=5, cols=37):
    torch.manual_seed(0)
    x = torch.randn(rows, cols) * 3
    x[0, :len(EDGES)] = torch.tensor(EDGES)
    return x


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_activation_matches_float64_eager_at_large_and_tiny_magnitudes(name):
    fn = ACTIVATIONS[name]
    x = _inputs()
    got, _, _ = run_imported(Activation(fn), x)
    with torch.no_grad():
        want = fn(x.double()).numpy()
    got = got[0].astype(np.float64)
    assert np.array_equal(np.isfinite(got), np.isfinite(want)), name
    fin = np.isfinite(want)
    # float32 rounding of the result; sin/cos: of an argument up to 1e4 (absolute);
    # tan: sin/cos's absolute error over cos; exp2: its condition number |x ln 2|
    # times float32's rounding of the argument
    tol = 2e-6 * np.abs(want[fin]) + (2e-7 if name in ("sin", "cos") else 1e-37)
    arg = x.double().numpy()[fin]
    if name == "tan":
        tol = tol + 2e-7 * (1 + np.abs(want[fin])) / np.abs(np.cos(arg))
    if name == "exp2":
        tol = tol + 1.2e-7 * np.abs(arg * np.log(2)) * np.abs(want[fin])
    err = np.abs(got[fin] - want[fin])
    assert (err <= tol).all(), (name, float(np.max(err - tol)))


def test_softplus_mish_logsigmoid_keep_their_tails():
    """Where naive formulas give 0 or overflow: softplus(-100) = e^-100 (a float32
    subnormal), log-sigmoid(100) = -e^-100, mish(-30) ≈ -30·e^-30, softplus(1e4) = 1e4."""
    x = torch.tensor([[-100.0, 100.0, -30.0, 1e4, -1e4, -20.0, 1e-6]])
    # atol: float32's subnormal spacing (1.4e-45), times |x| = 100 for mish's product
    for fn, atol in ((F.softplus, 1.5e-45), (F.logsigmoid, 1.5e-45), (F.mish, 1.5e-43)):
        got, _, _ = run_imported(Activation(fn), x)
        want = fn(x.double()).numpy()
        assert got[0][0, 0] != 0 and got[0][0, 2] != 0, fn       # not flushed to 0
        np.testing.assert_allclose(got[0], want, rtol=1e-6, atol=atol, err_msg=str(fn))


class SinusoidalProjection(torch.nn.Module):
    """Sinusoidal embeddings of runtime positions (not a constant table), mixed with a
    projection: sin/cos must be lowered, not folded at import."""

    def __init__(self, e=24):
        super().__init__()
        self.inv_freq = torch.nn.Parameter(1.0 / 10000 ** (torch.arange(0, e // 2) / (e // 2)),
                                           requires_grad=False)
        self.proj = torch.nn.Linear(e, e)

    def forward(self, x, pos):
        angles = pos * self.inv_freq                        # [T, 1] · [E/2] -> [T, E/2]
        emb = torch.cat([angles.sin(), angles.cos()], dim=-1)
        return self.proj(x) * torch.sigmoid(emb) + torch.log1p(x.abs())


def _sinusoidal_inputs(t=19, e=24):
    torch.manual_seed(1)
    pos = torch.arange(t, dtype=torch.float32)[:, None] * 523.0   # up to ~1e4 radians
    return torch.randn(t, e), pos


def test_sinusoidal_embedding_of_runtime_positions_imports_and_matches_eager():
    model = SinusoidalProjection().eval()
    x, pos = _sinusoidal_inputs()
    got, _, low = run_imported(model, x, pos, fuse=True, backend="numba")
    with torch.no_grad():
        want = model.double()(x.double(), pos.double()).numpy()
    assert any("sin" in str(k) for k in low.program.kernels) or "sin(" in str(low.program)
    assert np.abs(got[0] - want).max() / np.abs(want).max() < 1e-5


def test_torch_compile_region_with_sin_cos_and_a_matmul_is_not_split(tmp_path, monkeypatch):
    from blockbuster.frontend.pytorch import dynamo
    monkeypatch.setenv("BLOCKBUSTER_CACHE", str(tmp_path))
    torch._dynamo.reset()
    model = SinusoidalProjection().eval()
    x, pos = _sinusoidal_inputs()
    compiled = torch.compile(model, backend="blockbuster",
                             options={"backend": "reference", "tune": "off"})
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", dynamo.FallbackWarning)
            with torch.no_grad():
                got = compiled(x, pos)
                want = model.double()(x.double(), pos.double())
    finally:
        torch._dynamo.reset()
    assert float((got.double() - want).abs().max() / want.abs().max()) < 1e-5


def test_an_operator_still_unsupported_is_named_in_one_line():
    with pytest.raises(ImportError_) as err:
        lower_module(Activation(torch.floor), torch.randn(3, 5))
    msg = str(err.value)
    assert "unsupported operator aten.floor.default" in msg and "\n" not in msg


def test_a_negative_number_base_is_a_one_line_error():
    with pytest.raises(ImportError_, match=r"-2.0 \*\* tensor \(only a positive base\)") as err:
        lower_module(Activation(lambda x: torch.pow(-2.0, x)), torch.randn(3, 5))
    assert "\n" not in str(err.value)
