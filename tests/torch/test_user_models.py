"""Plain PyTorch modules as users write them, at the sizes users have: one row, one
input feature, one output (a value head), 1-D inputs, integer targets, float64
inputs. Each matches PyTorch eager in float64."""

from __future__ import annotations

import copy
import os
import warnings

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import blockbuster as bb
from blockbuster.frontend.pytorch import lower_module

from helpers_torch import float64_reference, max_rel_error, run_imported


class Classifier(nn.Module):
    def __init__(self, e=37, f=45, c=10):
        super().__init__()
        self.norm, self.up, self.down = nn.LayerNorm(e), nn.Linear(e, f), nn.Linear(f, c)

    def forward(self, x):
        return torch.softmax(self.down(F.gelu(self.up(self.norm(x)))), dim=-1)


@pytest.mark.parametrize("shape", [(1, 37), (1, 1, 37), (3, 1, 37)])
def test_one_row_is_still_a_matrix(shape):
    """A single sample ``[1, E]`` (no sequence axis, or a sequence of one): the
    norm and the softmax reduce its one row; unfused and fused."""
    model = Classifier().eval()
    x = torch.randn(*shape) * 100 + 1e3
    want = float64_reference(model, x).numpy()
    for fuse in (False, True):
        got, _, _ = run_imported(model, x, fuse=fuse)
        assert got[0].shape == want.shape
        assert max_rel_error(got[0], want) < 1e-5


def test_one_input_feature_and_one_output():
    """Regression nets: ``Linear(1, H)`` (an outer product: nothing to contract) and
    ``Linear(H, 1)`` (one output column); a value head on one row."""
    model = nn.Sequential(nn.Linear(1, 24), nn.Tanh(), nn.Linear(24, 1)).eval()
    x = torch.randn(100, 1) * 3
    want = float64_reference(model, x).numpy()
    for fuse in (False, True):
        got, _, _ = run_imported(model, x, fuse=fuse)
        assert max_rel_error(got[0], want) < 1e-5
    head = nn.Linear(37, 1).eval()                   # a value head on one row
    x = torch.randn(1, 37)
    got, _, _ = run_imported(head, x)
    assert max_rel_error(got[0], float64_reference(head, x).numpy()) < 1e-5


def test_one_dimensional_input_through_an_mlp():
    """``torch.matmul`` of a vector and a matrix (``Linear`` on a ``[E]`` input)."""
    model = nn.Sequential(nn.Linear(37, 29), nn.SiLU(), nn.Linear(29, 7)).eval()
    x = torch.randn(37) * 10
    got, _, _ = run_imported(model, x, fuse=True)
    assert got[0].shape == (7,)
    assert max_rel_error(got[0], float64_reference(model, x).numpy()) < 1e-5

    def vecmat(v, m):
        return (m @ v) * 2.0, v @ m.T               # matrix·vector and vector·matrix
    v, m = torch.randn(37), torch.randn(29, 37)
    got, _, _ = run_imported(vecmat, v, m)
    v64, m64 = v.double().numpy(), m.double().numpy()
    assert max_rel_error(got[0], (m64 @ v64) * 2.0) < 1e-5
    assert max_rel_error(got[1], v64 @ m64.T) < 1e-5


def test_a_scalar_result_is_a_clear_error():
    from blockbuster.frontend.pytorch import ImportError_
    with pytest.raises(ImportError_, match="0-d|blocks over 1 axis"):
        bb.from_torch(lambda a, b: a @ b, torch.randn(37), torch.randn(37))


def test_inputs_grouped_in_one_tuple_get_a_hint():
    from blockbuster.frontend.pytorch import ImportError_
    model = nn.Linear(37, 5)
    with pytest.raises(ImportError_, match=r"example input 0 is a tuple: give each input as "
                                           r"its own argument"):
        bb.from_torch(model, (torch.randn(3, 37),))
    assert bb.from_torch(model, torch.randn(3, 37)).inputs      # as its own argument: fine


@pytest.fixture
def _dynamo(tmp_path, monkeypatch):
    monkeypatch.setenv("BLOCKBUSTER_CACHE", str(tmp_path))
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_compiled_cross_entropy_with_integer_targets(_dynamo):
    """Index arithmetic (``squeeze`` of an int64 target) stays in PyTorch: a region
    computes in float32 and must not hand a float tensor to ``gather``."""
    x, target = torch.randn(37, 29) * 30, torch.randint(0, 29, (37, 1))

    def loss(x, t):
        return F.cross_entropy(torch.log_softmax(x, -1), t.squeeze(-1), reduction="none")
    fast = torch.compile(loss, backend="blockbuster", options={"backend": "reference"})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = fast(x, target)
    want = loss(x.double(), target)
    assert got.shape == want.shape
    assert float((got.double() - want).abs().max()) < 1e-4


def test_compiled_float64_model_returns_float64(_dynamo):
    model = nn.Sequential(nn.Linear(13, 7), nn.GELU()).double().eval()
    x = torch.randn(5, 13, dtype=torch.float64)
    fast = torch.compile(model, backend="blockbuster", options={"backend": "reference"})
    with torch.no_grad():
        got, want = fast(x), model(x)
    assert got.dtype == torch.float64
    assert float((got - want).abs().max()) < 1e-5
    assert np.isfinite(got.numpy()).all()


def test_expanded_output_and_selected_rows():
    """``x[i]`` of a batch (a point axis) or of one row is a view; one element of a
    tiled axis is picked by a kernel; an output expanded by broadcasting (its array
    would hold fewer elements than the tensor) is a clear error."""
    from blockbuster.frontend.pytorch import ImportError_

    def f(x, r):
        return torch.softmax(x[1], -1), r[0] * 2
    x, r = torch.randn(3, 7, 37) * 1e3, torch.randn(1, 37)
    got, _, _ = run_imported(f, x, r)
    x64 = x.double()
    assert max_rel_error(got[0], torch.softmax(x64[1], -1).numpy()) < 1e-6
    assert max_rel_error(got[1], r.double()[0].numpy() * 2) < 1e-6
    got, _, _ = run_imported(lambda x: x[:, 0] * 2, x)
    assert max_rel_error(got[0], x64[:, 0].numpy() * 2) < 1e-6
    with pytest.raises(ImportError_, match="expanded by broadcasting"):
        bb.from_torch(lambda x: x.amax(-1, keepdim=True).expand_as(x), x)


def test_compiled_normalize_and_a_scalar_statistic(_dynamo):
    """``F.normalize`` (its norm, the clamp and the expanded divisor: one region;
    the norm was left to PyTorch) and a per-vector statistic of a 1-D input (a 0-d
    result, stored along a unit axis; it was left to PyTorch) match eager."""
    from blockbuster.frontend.pytorch.dynamo import FallbackWarning
    x = torch.randn(7, 100) * 1e3
    fast = torch.compile(lambda x: F.normalize(x, dim=-1), backend="blockbuster",
                         options={"backend": "reference"})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = fast(x)
    want = F.normalize(x.double(), dim=-1)
    assert float((got.double() - want).abs().max()) < 1e-6
    assert not [w for w in caught if issubclass(w.category, FallbackWarning)]
    torch._dynamo.reset()

    def rms(v):
        return v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + 1e-6)
    v = torch.randn(129) * 30
    fast = torch.compile(rms, backend="blockbuster", options={"backend": "reference"})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = fast(v)
    assert float((got.double() - rms(v.double())).abs().max()) < 1e-5
    assert not [w for w in caught if issubclass(w.category, FallbackWarning)]


@pytest.mark.parametrize("case", ["sum", "mean_1d", "pooled_layer_norm_of_one"])
def test_reductions_to_a_single_number_or_a_single_row(case):
    """``x.sum()``, ``v.mean()`` (0-d results) and the LayerNorm of one pooled row
    (a batch of one: its statistics have no axis of their own) are stored along a
    unit axis; they were import errors ("no axis to store", "over all axes")."""
    torch.manual_seed(0)
    norm = nn.LayerNorm(29)
    x = torch.randn(37, 29) * 1e3 + 1e3
    x64 = x.double().numpy()
    if case == "sum":
        f, want = (lambda x: (x * x).sum() * 2), np.sum(x64 * x64) * 2
    elif case == "mean_1d":
        f, want = (lambda x: x[0] - x[0].mean()), x64[0] - x64[0].mean()
    else:
        def f(x):
            return norm(x.mean(0, keepdim=True))
        pooled = x64.mean(0, keepdims=True)
        want = (pooled - pooled.mean()) / np.sqrt(pooled.var() + 1e-5)
    for fuse in (False, True):
        got, _, _ = run_imported(f, x, fuse=fuse)
        assert max_rel_error(got[0].reshape(np.shape(want)), want) < 1e-5


@pytest.mark.parametrize("pool", ["mean", "sum", "amax"])
def test_a_pooled_sequence_then_a_linear_head(pool):
    """``head(x.mean(1))`` on an input ``[B, T, C]`` (a classifier over pooled
    features): the head tiled the batch as its rows, so the input had blocks over
    three axes ("reducing a tensor with blocks over 3 axes"); the input's batch is
    iterated one index at a time now, as a kernel output's would be."""
    torch.manual_seed(0)
    head = nn.Linear(48, 5)

    def f(x):
        return head(getattr(x, pool)(1))
    x = torch.randn(2, 37, 48) * 1e3 + 1e3
    x64 = x.double().numpy()
    pooled = {"mean": x64.mean(1), "sum": x64.sum(1), "amax": x64.max(1)}[pool]
    with torch.no_grad():
        want = pooled @ head.weight.double().numpy().T + head.bias.double().numpy()
    for fuse in (False, True):
        got, _, _ = run_imported(f, x, fuse=fuse)
        assert max_rel_error(got[0].reshape(want.shape), want) < 1e-5


class HandLayerNorm(nn.Module):
    """LayerNorm as people write it with ``var`` (and ``std`` for a z-score)."""

    def __init__(self, e=37):
        super().__init__()
        self.g, self.b = nn.Parameter(torch.rand(e) + 0.5), nn.Parameter(torch.randn(e))

    def forward(self, x):
        m, v = x.mean(-1, keepdim=True), x.var(-1, keepdim=True, unbiased=False)
        z = (x - m) / (x.std(-1, keepdim=True) + 1e-3)
        return (x - m) / torch.sqrt(v + 1e-5) * self.g + self.b, z, x.var(-2)


def test_var_and_std_at_large_means():
    model = HandLayerNorm().eval()
    x = torch.randn(3, 7, 37) * 10 + 1e4
    with torch.no_grad():
        want = [w.numpy() for w in _float64(model, x)]
    for fuse in (False, True):
        got, _, _ = run_imported(model, x, fuse=fuse)
        for g, w in zip(got, want):
            assert max_rel_error(g, w) < 1e-4, fuse


def _float64(model, x):
    import copy
    return copy.deepcopy(model).double()(x.double())


@pytest.mark.parametrize("scale", [1.0, 30.0])
def test_more_activations(scale):
    def acts(x):
        return (F.leaky_relu(x, 0.1), F.elu(x), F.softplus(x), F.softplus(x, 2.0, 5.0),
                F.hardtanh(x), F.relu6(x), x.abs().pow(0.3), x ** 2.5)
    x = torch.randn(37, 29) * scale
    got, _, _ = run_imported(acts, x, fuse=True)
    with torch.no_grad():
        want = [w.numpy() for w in acts(x.double())]
    for g, w in zip(got, want):
        assert np.array_equal(np.isnan(g), np.isnan(w))          # x ** 2.5 of x < 0
        assert max_rel_error(np.nan_to_num(g), np.nan_to_num(w)) < 1e-5


def test_cli_factory_with_a_python_number_argument_and_one_row(tmp_path, monkeypatch,
                                                              capsys):
    """``run model.py:factory``: a non-tensor example argument (specialised by the
    export) is passed to the eager oracle as given, not dropped (the oracle used
    the default and validation failed); a one-row model validates too; example
    inputs given by name (a dict) call the model with keywords."""
    import json
    import textwrap

    from blockbuster import cli
    monkeypatch.setenv("BLOCKBUSTER_CACHE", str(tmp_path / "cache"))
    (tmp_path / "mine.py").write_text(textwrap.dedent("""
        import torch

        class Scaled(torch.nn.Module):
            def forward(self, x, scale: float = 2.0, y=None):
                return x * scale + y

        def scaled():
            return Scaled(), (torch.randn(7, 37), 3.0, torch.randn(7, 37))

        def one_row():
            torch.manual_seed(0)
            return (torch.nn.Sequential(torch.nn.LayerNorm(37), torch.nn.Linear(37, 1)),
                    (torch.randn(1, 37) * 1e3,))

        def running(x):
            return torch.cumprod(x, -1)

        def unsupported():
            return running, (torch.randn(4, 8),)

        def by_name():
            return Scaled(), {"y": torch.randn(7, 37), "x": torch.randn(7, 37) * 1e3}

        def bad_name():
            return Scaled(), {"x y": torch.randn(7, 37)}
    """))
    for factory in ("scaled", "one_row"):
        status = cli.main(["run", f"{tmp_path / 'mine.py'}:{factory}", "--backend",
                           "reference", "--json"])
        out = capsys.readouterr()
        assert status == 0, out.err
        assert json.loads(out.out)["validation"]["passed"]
    # a plain function's unsupported operator names the factory file's line
    status = cli.main(["run", f"{tmp_path / 'mine.py'}:unsupported"])
    err = capsys.readouterr().err
    assert status == 2
    assert "mine.py:17: unsupported operator aten.cumprod" in err, err
    # inputs by name, as a tokenizer returns them: the model called with keywords,
    # the program's inputs named after them
    status = cli.main(["run", f"{tmp_path / 'mine.py'}:by_name", "--backend", "reference",
                       "--json"])
    out = capsys.readouterr()
    assert status == 0, out.err
    report = json.loads(out.out)
    assert report["validation"]["passed"]
    assert "input y[" in report["fused_program"] and "input x[" in report["fused_program"]
    status = cli.main(["run", f"{tmp_path / 'mine.py'}:bad_name"])
    err = capsys.readouterr().err
    assert status == 2 and "must be Python identifiers" in err, err


class _TwoLayers(nn.Module):
    """A LayerNorm, a GELU MLP and a residual: what a region fuses, with parameters
    that require grad."""

    def __init__(self, e=23, f=37):
        super().__init__()
        self.norm = nn.LayerNorm(e)
        self.up = nn.Linear(e, f)
        self.down = nn.Linear(f, e)

    def forward(self, x):
        return x + self.down(F.gelu(self.up(self.norm(x))))


def _grads(model, run, x):
    x = x.detach().clone().requires_grad_(True)
    out = run(x)
    (out * torch.linspace(-1.0, 2.0, out.shape[-1])).sum().backward()
    return out.detach(), x.grad, {n: p.grad.clone() for n, p in model.named_parameters()}


def test_backward_through_a_compiled_module_gives_eager_gradients(_dynamo):
    """With autograd on, a compiled module's outputs carry a gradient function:
    ``backward()`` reaches its parameters and its input with eager PyTorch's
    gradients (the backward pass differentiates the original graph, run again). It
    gave no gradient to the parameters at all before, silently."""
    torch.manual_seed(0)
    eager = _TwoLayers()
    model = copy.deepcopy(eager)
    fast = torch.compile(model, backend="blockbuster", options={"backend": "reference"})
    x = torch.randn(3, 9, 23) * 50.0
    want_out, want_dx, want = _grads(eager, eager, x)
    got_out, got_dx, got = _grads(model, fast, x)
    assert max_rel_error(got_out.numpy(), want_out.numpy()) < 1e-5
    assert max_rel_error(got_dx.numpy(), want_dx.numpy()) < 1e-5
    assert set(got) == set(want)
    for name in want:
        assert max_rel_error(got[name].numpy(), want[name].numpy()) < 1e-5, name
    # Under no_grad the compiled graph runs alone, and its output needs no grad.
    with torch.no_grad():
        assert not fast(x).requires_grad


def test_training_steps_through_a_compiled_module_follow_eager_training(_dynamo):
    """SGD steps on a compiled module and on an eager copy: the parameters move
    alike (each step changes them in place, so the region is rebuilt)."""
    torch.manual_seed(1)
    eager = _TwoLayers()
    model = copy.deepcopy(eager)
    fast = torch.compile(model, backend="blockbuster", options={"backend": "reference"})
    steps = [(torch.randn(4, 7, 23), torch.randn(4, 7, 23)) for _ in range(3)]
    for net, run in ((eager, eager), (model, fast)):
        opt = torch.optim.SGD(net.parameters(), lr=0.05)
        for x, target in steps:
            opt.zero_grad()
            F.mse_loss(run(x), target).backward()
            opt.step()
    for (name, p), q in zip(eager.named_parameters(), model.parameters()):
        assert max_rel_error(q.detach().numpy(), p.detach().numpy()) < 1e-5, name


def test_dropout_in_training_with_gradients_runs_as_eager_pytorch(_dynamo):
    """A graph that draws random numbers cannot be recomputed for its backward pass
    (other numbers would be drawn): with gradients needed it runs in eager PyTorch,
    forward and backward, and says so once; the same seed gives the same output."""
    from blockbuster.frontend.pytorch.dynamo import FallbackWarning
    torch.manual_seed(2)
    eager = nn.Sequential(nn.Linear(19, 31), nn.Dropout(0.3), nn.Linear(31, 5)).train()
    model = copy.deepcopy(eager)
    fast = torch.compile(model, backend="blockbuster", options={"backend": "reference"})
    x = torch.randn(6, 19)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", FallbackWarning)
        torch.manual_seed(5)
        got = fast(x)
        fast(x)
    torch.manual_seed(5)
    want = eager(x)
    assert torch.equal(got, want) and got.requires_grad
    said = [w for w in caught if "random numbers" in str(w.message)]
    assert len(said) == 1
    # In eval mode the same dropout draws nothing (F.dropout(x, 0.3, False)): the
    # compiled graph runs, and the gradients are still eager's.
    torch._dynamo.reset()
    eager.eval()
    model.eval()
    fast = torch.compile(model, backend="blockbuster", options={"backend": "reference"})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", FallbackWarning)
        ran = fast(x.clone().requires_grad_(True))
        got_out, got_dx, got = _grads(model, fast, x)
    assert not [w for w in caught if "random numbers" in str(w.message)]
    assert type(ran.grad_fn).__name__ == "RecomputedBackward"     # the compiled graph
    want_out, want_dx, want = _grads(eager, eager, x)
    assert max_rel_error(got_dx.numpy(), want_dx.numpy()) < 1e-5
    for name in want:
        assert max_rel_error(got[name].numpy(), want[name].numpy()) < 1e-5, name


def test_a_learnable_scalar_survives_the_text_form():
    """A parameter of shape [1] (a temperature) is a weight with no dimensions:
    ``import`` writes it as ``t[]``, and the text reads back and runs."""
    class Tempered(nn.Module):
        def __init__(self):
            super().__init__()
            self.t = nn.Parameter(torch.full((1,), 0.5))
            self.proj = nn.Linear(37, 29)

        def forward(self, x):
            return torch.softmax(self.proj(x) * self.t, -1)
    model, x = Tempered().eval(), torch.randn(7, 37) * 10
    program = bb.from_torch(model, x)
    again = bb.parse_program(bb.format_program(program))
    out = bb.compile(bb.fuse(again).program, backend="reference")(
        x=x.numpy(), **program.params)
    want = float64_reference(model, x).numpy()
    assert max_rel_error(out[program.outputs[0]], want) < 1e-5


def test_reductions_over_a_size_one_or_expanded_axis():
    """softmax over an axis of one element is 1 (log-softmax 0); a sum over an
    expanded axis is n times the value; max and mean over one element are it."""
    def f(x, y):
        return (torch.softmax(x, 0), F.log_softmax(x, 0) + x, x.amax(0) + x.mean(0),
                y.unsqueeze(0).expand(5, 7, 37).sum(0))
    x, y = torch.randn(1, 7, 129) * 1e3, torch.randn(7, 37)
    got, _, _ = run_imported(f, x, y)
    with torch.no_grad():
        want = [w.numpy() for w in f(x.double(), y.double())]
    for g, w in zip(got, want):
        assert max_rel_error(g, w) < 1e-6


def test_padding_mask_of_batch_and_keys_and_boolean_mask_algebra():
    """A boolean padding mask ``[B, T]`` broadcast as ``~m[:, None, None, :]`` into
    scores ``[B, H, T, T]``: its batch axis is iterated, its keys tiled (the input
    would otherwise be tiled over both); ``~``, ``&`` and ``|`` of masks."""
    import math

    def attention(q, k, v, m):
        a = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        a = a.masked_fill(~m[:, None, None, :], float("-inf"))
        return torch.softmax(a, -1) @ v

    q, k, v = (torch.randn(3, 2, 37, 8) * 3 for _ in range(3))
    m = torch.ones(3, 37, dtype=torch.bool)
    m[1, 30:], m[2, 5:] = False, False
    for fuse in (False, True):
        got, _, _ = run_imported(attention, q, k, v, m, fuse=fuse)
        want = attention(q.double(), k.double(), v.double(), m).numpy()
        assert max_rel_error(got[0], want) < 1e-5

    def masks(x, m1, m2):
        return x.masked_fill(m1 & m2, 2.0) * (m1 | m2) + torch.logical_not(m2) * x
    x, m1, m2 = torch.randn(7, 37), torch.rand(7, 37) > 0.5, torch.rand(7, 37) > 0.3
    got, _, _ = run_imported(masks, x, m1, m2)
    assert max_rel_error(got[0], masks(x.double(), m1, m2).numpy()) < 1e-6
    from blockbuster.frontend.pytorch import ImportError_
    with pytest.raises(ImportError_, match="only boolean masks"):
        bb.from_torch(lambda x, i: x * ~i, x, torch.randint(0, 5, (7, 37)))


def test_unequal_chunks_are_taken_through_a_selection():
    """37 columns in chunks of 13, 13, 11: no block size fits the cuts (this was an
    import error); each chunk is a selection of columns."""
    x = torch.randn(7, 37) * 1e3
    program = bb.from_torch(lambda a: a.chunk(3, -1)[1] * 2, x)
    out = bb.compile(program)(**{program.inputs[0]: x.numpy()})[program.outputs[0]]
    np.testing.assert_allclose(out.reshape(7, 13), x[:, 13:26].numpy() * 2, rtol=1e-6)


class HeadsOfOneToken(nn.Module):
    """Split into heads, scaled per head, merged back: with one token (B = T = 1)
    the input's only row is a vector once its unit axes drop out."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(24, 24)

    def forward(self, x):
        b, t, e = x.shape
        h = self.proj(x).view(b, t, 4, 6).transpose(1, 2)
        h = h * torch.arange(1.0, 5.0).view(1, 4, 1, 1)
        return h.transpose(1, 2).reshape(b, t, e) + x


@pytest.mark.parametrize("backend", ["reference", "numba"])
def test_one_token_split_into_heads(backend):
    """Used to raise an internal IRError (relabel of a vector) from from_torch, and
    under torch.compile a region 'left to PyTorch after an internal error'."""
    torch.manual_seed(0)
    model, x = HeadsOfOneToken().eval(), torch.randn(1, 1, 24)
    got, _, _ = run_imported(model, x, fuse=True, backend=backend)
    assert max_rel_error(got[0], float64_reference(model, x).numpy()) < 1e-6


class FlattenedBatch(nn.Module):
    """``x.view(-1, E)`` before a matmul and a view back, as GPT-2's Conv1D and
    OPT's decoder layer write it: batch × rows merged into one axis of rows."""

    def __init__(self):
        super().__init__()
        self.up, self.down = nn.Linear(24, 40), nn.Linear(40, 24)

    def forward(self, x):
        shape = x.shape
        h = torch.addmm(self.up.bias, x.view(-1, shape[-1]), self.up.weight.t())
        h = F.gelu(h).view(*shape[:-1], 40)
        return self.down(h) + x


@pytest.mark.parametrize("shape", [(2, 37, 24), (3, 5, 24)])
def test_batch_and_rows_merged_by_a_view(shape):
    """Used to fail with 'view: only heads in the last axis of a block merge' for
    any batch > 1 (so GPT-2's block imported only one sample at a time)."""
    torch.manual_seed(0)
    model, x = FlattenedBatch().eval(), torch.randn(*shape)
    got, _, _ = run_imported(model, x, fuse=True, backend="numba")
    assert max_rel_error(got[0], float64_reference(model, x).numpy()) < 1e-6


class HandWrittenAttention(nn.Module):
    def __init__(self, causal=False):
        super().__init__()
        self.qkv, self.out, self.causal = nn.Linear(24, 72), nn.Linear(24, 24), causal

    def forward(self, x):
        b, t, e = x.shape
        q, k, v = (h.view(b, t, 4, 6).transpose(1, 2) for h in self.qkv(x).split(24, -1))
        scores = q @ k.transpose(-1, -2) / 6 ** 0.5
        if self.causal:
            scores = scores.masked_fill(torch.triu(torch.ones(t, t, dtype=torch.bool), 1),
                                        float("-inf"))
        o = scores.softmax(-1) @ v
        return self.out(o.transpose(1, 2).reshape(b, t, e))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("batch", [1, 3])
def test_attention_over_a_single_token(batch, causal):
    """One token per sequence ([B, 1, E], a decode step without a cache): the
    input's stored row stays a row through the head views (it used to become a
    vector there, and `q @ k^T` of two vectors failed to import)."""
    torch.manual_seed(0)
    model, x = HandWrittenAttention(causal).eval(), torch.randn(batch, 1, 24)
    got, _, _ = run_imported(model, x, fuse=True, backend="numba")
    assert max_rel_error(got[0], float64_reference(model, x).numpy()) < 1e-6


class QkvByHeads(nn.Module):
    """One projection viewed as (q/k/v, heads, head size) in a single ``view``: the
    projection's columns are split twice (a third level of heads)."""

    def __init__(self, e=72, h=4):
        super().__init__()
        self.h, self.qkv, self.out = h, nn.Linear(e, 3 * e), nn.Linear(e, e)

    def forward(self, x):
        b, t, e = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.h, e // self.h).permute(2, 0, 3, 1, 4)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(o.transpose(1, 2).reshape(b, t, e))


def _qkv_by_heads_numpy(model, x):
    """The model's math in float64 NumPy."""
    p = {n: t.detach().double().numpy() for n, t in model.named_parameters()}
    x = x.double().numpy()
    b, t, e = x.shape
    h, d = model.h, e // model.h
    qkv = (x @ p["qkv.weight"].T + p["qkv.bias"]).reshape(b, t, 3, h, d)
    q, k, v = (qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3))
    s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(d)
    s = np.where(np.tril(np.ones((t, t), bool)), s, -np.inf)
    w = np.exp(s - s.max(-1, keepdims=True))
    o = (w / w.sum(-1, keepdims=True)) @ v
    return o.transpose(0, 2, 1, 3).reshape(b, t, e) @ p["out.weight"].T + p["out.bias"]


def test_fused_projection_split_into_three_levels_of_heads():
    """Used to fail: 'splitting an axis of 216 into [3, 4, 18] is not supported'
    (and, split in two views, 'an axis of 72 is split into blocks of 72 and of 18');
    Falcon's new decoder architecture views its projection this way."""
    torch.manual_seed(0)
    model, x = QkvByHeads().eval(), torch.randn(2, 37, 72)
    got, _, _ = run_imported(model, x, fuse=True, backend="numba")
    assert max_rel_error(got[0], _qkv_by_heads_numpy(model, x)) < 1e-6


@pytest.mark.parametrize("causal,batch", [(False, 1), (True, 1), (False, 2)])
def test_multihead_attention_module(causal, batch):
    """``nn.MultiheadAttention`` works sequence-first inside (``[T, B, E]``). For one
    sample its projections used to treat T as a batch axis (a product over the
    size-1 rows) and the attention then failed ('a matrix axis of 37 is also a
    batch axis iterated one index at a time'); for two, its batch merged with the
    heads ('cannot view [37, 2, 72] as [37, 8, 18]') and T with the batch (rows
    interleaving two sequences) around the output projection; before that, its
    (q/k/v, heads) views failed ('an axis of 72 is split into blocks of 72 and of
    18')."""
    torch.manual_seed(0)
    e, h, t = 72, 4, 37
    mha = nn.MultiheadAttention(e, h, batch_first=True).eval()
    mask = torch.triu(torch.full((t, t), float("-inf")), 1) if causal else None

    def attend(x):
        return mha(x, x, x, need_weights=False, attn_mask=mask)[0]
    x = torch.randn(batch, t, e)
    got, _, low = run_imported(attend, x, fuse=True, backend="numba")
    # the causal mask, recognised from its values, is no weight of the program
    assert set(low.weights) == set(low.program.weights)
    assert all(tuple(low.program.shape(w)) != (t, t) for w in low.program.weights)
    p = {n: q.detach().double().numpy() for n, q in mha.named_parameters()}
    d, want = e // h, []
    for xn in x.double().numpy():
        q, k, v = np.split(xn @ p["in_proj_weight"].T + p["in_proj_bias"], 3, axis=-1)
        heads = []
        for i in range(h):
            cols = slice(i * d, (i + 1) * d)
            s = q[:, cols] @ k[:, cols].T / np.sqrt(d)
            if causal:
                s = np.where(np.tril(np.ones((t, t), bool)), s, -np.inf)
            w = np.exp(s - s.max(-1, keepdims=True))
            heads.append((w / w.sum(-1, keepdims=True)) @ v[:, cols])
        want.append(np.concatenate(heads, -1) @ p["out_proj.weight"].T + p["out_proj.bias"])
    want = np.stack(want)
    assert max_rel_error(got[0].reshape(want.shape), want) < 1e-6


@pytest.mark.parametrize("causal", [False, True])
def test_key_padding_mask_of_multihead_attention_and_the_encoder(causal):
    """A padding mask ``[B, S]`` (True: padded) that ``nn.MultiheadAttention``
    expands over its heads and views as ``[B·H, 1, S]`` (then back, or added to a
    causal mask first): the mask's batch merged with an expanded axis is iterated
    one index at a time (it was taken for the rows of the input's blocks: "cannot
    arrange axes (1, 3) as (3,)"). The encoder runs sequence-first and pre-norm in
    the causal case; ragged sizes, inputs x1e2, against float64 eager."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(40, 4, 72, dropout=0.0, batch_first=not causal,
                                       norm_first=causal)
    encoder = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False).eval()

    def encode(x, pad):
        t = x.shape[0] if causal else x.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(t) if causal else None
        return encoder(x, mask=mask, src_key_padding_mask=pad, is_causal=causal)
    t, batch = 19, 2
    x = torch.randn(t, batch, 40) if causal else torch.randn(batch, t, 40)
    x = x * 1e2
    pad = torch.zeros(batch, t, dtype=torch.bool)
    pad[1, 13:] = True
    low = lower_module(encode, x, pad)
    out = bb.compile(low.program, backend="reference")(
        x=x.numpy(), pad=pad.numpy().astype(np.float32), **low.weights)
    got = out[low.outputs[0].name].reshape(x.shape)
    with torch.no_grad():
        enc64 = copy.deepcopy(encoder).double()
        mask = nn.Transformer.generate_square_subsequent_mask(
            t, dtype=torch.float64) if causal else None
        want = enc64(x.double(), mask=mask, src_key_padding_mask=pad,
                     is_causal=causal).numpy()
    assert max_rel_error(got, want) < 1e-5


def test_a_plain_functions_inputs_are_named_after_its_arguments():
    # As for a module's forward: the program's inputs are the function's parameter
    # names (a parameter with a default that no example fills keeps its default).
    def masked_softmax(scores, mask, scale=0.5):
        return torch.softmax(scores * scale + mask, dim=-1)

    rng = np.random.default_rng(4)
    scores = torch.tensor(rng.standard_normal((37, 21)) * 30, dtype=torch.float32)
    mask = torch.tensor(np.where(rng.random((37, 21)) < 0.3, -1e4, 0.0), dtype=torch.float32)
    program = bb.from_torch(masked_softmax, scores, mask)
    assert list(program.inputs) == ["scores", "mask"]
    got = next(iter(bb.compile(program, backend="numba")(scores=scores.numpy(),
                                                         mask=mask.numpy()).values()))
    logits = scores.numpy().astype(np.float64) * 0.5 + mask.numpy()
    want = np.exp(logits - logits.max(axis=1, keepdims=True))
    want /= want.sum(axis=1, keepdims=True)
    assert np.abs(got - want).max() < 1e-6
    # A function of *args has no names to give: the positions name them.
    assert list(bb.from_torch(lambda *a: a[0] * 2, scores).inputs) == ["args_0"]


def test_models_that_break_in_float64_are_validated_all_the_same(tmp_path, monkeypatch,
                                                                 capsys):
    """The oracle runs the model in float64: a tensor the model makes without a dtype
    is float64 too (XGLM's ``torch.full((), finfo(dtype).min)`` overflowed float32:
    an internal error), and a model whose float64 run gives NaN where float32 is
    finite (MPT's padded sequence), or that cannot run in float64 at all (a function
    over float32 modules), is held to float32 eager, as the report says."""
    import json
    import textwrap

    from blockbuster import cli
    monkeypatch.setenv("BLOCKBUSTER_CACHE", str(tmp_path / "cache"))
    (tmp_path / "f64.py").write_text(textwrap.dedent("""
        import torch

        class Floor(torch.nn.Module):
            def forward(self, x):
                floor = torch.full((), torch.finfo(x.dtype).min)
                return torch.maximum(torch.softmax(x, -1), floor) * 3

        class NanIn64(torch.nn.Module):
            def forward(self, x):
                y = torch.softmax(x * 1e3, -1)
                if x.dtype == torch.float64:           # a model that breaks in float64
                    y = y * torch.where(x[:, :1] > 0, float("nan"), 1.0)
                return y + 1

        def floor():
            return Floor(), (torch.randn(5, 37),)

        def nan_in_64():
            torch.manual_seed(0)
            return NanIn64(), (torch.randn(5, 37),)

        def closure():          # a function using a module it cannot convert
            torch.manual_seed(0)
            lin = torch.nn.Linear(16, 9)
            return (lambda x: torch.relu(lin(x)) * 1e3), (torch.randn(10, 16),)
    """))
    status = cli.main(["run", f"{tmp_path / 'f64.py'}:floor", "--backend", "reference",
                       "--json"])
    out = capsys.readouterr()
    assert status == 0, out.err
    assert json.loads(out.out)["validation"]["reference"] == "float64"
    status = cli.main(["run", f"{tmp_path / 'f64.py'}:nan_in_64", "--backend", "reference",
                       "--json"])
    out = capsys.readouterr()
    assert status == 0, out.err
    validation = json.loads(out.out)["validation"]
    assert validation["passed"] and validation["reference"].startswith("float32 eager")
    assert validation["max_rel_error"] < 1e-5
    # a function over float32 modules fails in float64 (an internal error, exit 3)
    status = cli.main(["run", f"{tmp_path / 'f64.py'}:closure", "--backend", "reference",
                       "--json"])
    out = capsys.readouterr()
    assert status == 0, out.err
    validation = json.loads(out.out)["validation"]
    assert validation["passed"] and "float64 eager fails" in validation["reference"]
    assert validation["max_rel_error"] < 1e-5


def test_a_block_for_a_dimension_the_model_does_not_have_is_refused(tmp_path, monkeypatch,
                                                                     capsys):
    """``--block Nope=8`` on a model ran at the default blocks and reported the block
    as given; a workload refuses it, and so does a model now (naming its dimensions)."""
    import textwrap

    from blockbuster import cli
    monkeypatch.setenv("BLOCKBUSTER_CACHE", str(tmp_path / "cache"))
    (tmp_path / "lin.py").write_text(textwrap.dedent("""
        import torch

        def model():
            return torch.nn.Linear(40, 24), (torch.randn(7, 40),)
    """))
    status = cli.main(["run", f"{tmp_path / 'lin.py'}:model", "--backend", "reference",
                       "--block", "Nope=8"])
    err = capsys.readouterr().err
    assert status == 2 and "no dimension Nope (dimensions: " in err and "N40" in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize("extra,says", [
    (lambda x: None, "output 1 is None"),
    (lambda x: x[:, :0], "output 1 is empty (shape [2, 0, 37])"),
    (lambda x: 3, "output 1 is the number 3"),
])
def test_an_output_that_is_no_array_says_what_it_is(extra, says):
    """A model returning ``(y, None)`` or an empty slice was refused with "output 1
    is not a tensor computed from the inputs", which did not say which it was."""
    from blockbuster.frontend.pytorch import ImportError_
    lin = nn.Linear(37, 37)
    with pytest.raises(ImportError_) as err:
        lower_module(lambda x: (lin(x), extra(x)), torch.randn(2, 37, 37))
    assert says in str(err.value) and "\n" not in str(err.value)


def test_a_number_computed_from_parameters_alone_can_be_an_output():
    """DiffLlama's lambda (``exp(l1) - exp(l2) + 0.8`` of parameters) returned beside
    the activations: folded at import to a number, it was refused as an output ("not a
    tensor computed from the inputs"), and under torch.compile a 101-node region of
    DiffLlama went back to PyTorch for it. It is an output array of that value now."""
    class Lambda(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(37, 37)
            self.l1, self.l2 = nn.Parameter(torch.tensor(0.3)), nn.Parameter(torch.tensor(0.1))

        def forward(self, x):
            lam = torch.exp(self.l1) - torch.exp(self.l2) + 0.8
            return self.fc(x) * lam, lam
    torch.manual_seed(0)
    model, x = Lambda(), torch.randn(2, 37, 37) * 1e3
    got, _, _ = run_imported(model, x)
    want = np.exp(0.3) - np.exp(0.1) + 0.8
    assert abs(float(got[1]) - want) < 1e-6
    fc64 = (model.fc.weight.double().detach().numpy(), model.fc.bias.double().detach().numpy())
    y = (x.double().numpy() @ fc64[0].T + fc64[1]) * want
    assert max_rel_error(got[0].reshape(y.shape), y) < 1e-5


def test_a_baseline_far_off_the_oracle_makes_the_report_say_the_check_is_weak(
        tmp_path, monkeypatch, capsys):
    """The tolerance follows the unfused float32 run's own error; where that error is
    large (float32 cancellation in the model: ``(x + 1e7) - 1e7``), a pass checks
    little, and the report says so."""
    import textwrap

    from blockbuster import cli
    monkeypatch.setenv("BLOCKBUSTER_CACHE", str(tmp_path / "cache"))
    (tmp_path / "cancel.py").write_text(textwrap.dedent("""
        import torch

        def model():
            torch.manual_seed(0)
            return (lambda x: (x + 1e7) - 1e7), (torch.randn(5, 37),)

        def fine():
            torch.manual_seed(0)
            return (lambda x: x * 2 + 1), (torch.randn(5, 37),)
    """))
    assert cli.main(["run", f"{tmp_path / 'cancel.py'}:model", "--backend", "reference"]) == 0
    out = capsys.readouterr().out
    assert "  weak          the unfused float32 run is itself" in out
    assert cli.main(["run", f"{tmp_path / 'cancel.py'}:fine", "--backend", "reference"]) == 0
    assert "weak" not in capsys.readouterr().out


def test_writes_that_move_no_version_counter_are_seen_by_the_next_call(_dynamo):
    """A fused Adam step and a write through ``p.data`` change the parameters in
    place without moving their version counters (nor their storage): the compiled
    module kept computing with the old weights. Each call compares a sample of every
    parameter's values too, so the next call recompiles with the new ones."""
    torch.manual_seed(3)
    model = _TwoLayers()
    fast = torch.compile(model, backend="blockbuster", options={"backend": "reference"})
    x = torch.randn(2, 5, 23) * 30.0
    with torch.no_grad():
        fast(x)
    opt = torch.optim.Adam(model.parameters(), lr=0.1, fused=True)
    F.mse_loss(model(torch.randn(2, 5, 23)), torch.zeros(2, 5, 23)).backward()
    opt.step()                       # (PyTorch 2.13: no parameter's _version moves)
    with torch.no_grad():
        assert max_rel_error(fast(x).numpy(), model(x).numpy()) < 1e-5
        model.up.weight.data.mul_(-2.0)
        assert max_rel_error(fast(x).numpy(), model(x).numpy()) < 1e-5


def test_a_compiled_module_called_from_several_threads_at_once(_dynamo):
    """Once compiled for its input sizes, a module runs from several threads at
    once, each call with its own numbers. The compiles happen in one thread first:
    torch.export patches module calls process-wide while it traces. After a second
    size TorchDynamo hands over a graph of symbolic sizes, which compiles each size
    on its first call: the first size is called once more."""
    import threading
    torch.manual_seed(4)
    model = _TwoLayers().eval()
    fast = torch.compile(model, backend="blockbuster", options={"tune": "off"})
    with torch.no_grad():
        for t in (5, 11, 5):
            fast(torch.randn(2, t, 23))
    errors, failures = [], []

    def worker(seed):
        g = torch.Generator().manual_seed(seed)
        for t in (5, 11, 5):
            x = torch.randn(2, t, 23, generator=g) * 20.0
            try:
                with torch.no_grad():
                    errors.append(max_rel_error(fast(x).numpy(), model(x).numpy()))
            except Exception as exc:            # reported below, not lost in a thread
                failures.append(repr(exc))
    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not failures, failures
    assert len(errors) == 12 and max(errors) < 1e-5


def test_an_optimizer_step_on_a_few_embedding_rows_is_seen(_dynamo):
    """A fused Adam step whose gradient reaches only the looked-up rows of an
    embedding table changes those rows alone, likely none of the sampled values and
    no version counter: every optimizer step is counted on the tensors it holds, so
    the next call recompiles."""
    class Lookup(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(256, 32)
            self.fc = nn.Linear(32, 19)

        def forward(self, ids):
            return self.fc(self.emb(ids))
    torch.manual_seed(5)
    model = Lookup()
    fast = torch.compile(model, backend="blockbuster", options={"backend": "reference"})
    ids = torch.tensor([[3, 7, 11, 200]])
    with torch.no_grad():
        fast(ids)
    opt = torch.optim.Adam(model.emb.parameters(), lr=0.5, fused=True)
    model.emb(ids).sum().backward()
    opt.step()
    with torch.no_grad():
        assert max_rel_error(fast(ids).numpy(), model(ids).numpy()) < 1e-5


def test_second_order_gradients_through_a_compiled_module(_dynamo):
    """``create_graph=True`` (a gradient penalty): the first-order gradient of a
    compiled module is itself differentiable, and the second-order gradient is
    eager PyTorch's."""
    torch.manual_seed(6)
    eager = _TwoLayers()
    model = copy.deepcopy(eager)
    fast = torch.compile(model, backend="blockbuster", options={"backend": "reference"})
    x0 = torch.randn(2, 6, 23) * 3.0

    def penalty_grads(net, run):
        x = x0.clone().requires_grad_(True)
        (gx,) = torch.autograd.grad(run(x).pow(2).sum(), x, create_graph=True)
        gx.pow(2).sum().backward()
        return x.grad, net.up.weight.grad

    want_x, want_w = penalty_grads(eager, eager)
    got_x, got_w = penalty_grads(model, fast)
    assert max_rel_error(got_x.numpy(), want_x.numpy()) < 1e-5
    assert max_rel_error(got_w.numpy(), want_w.numpy()) < 1e-5


def test_an_empty_input_is_a_one_line_error_or_left_to_pytorch(_dynamo, tmp_path, capsys):
    """A tensor with a size of 0 cannot be a block program's input: ``run`` says so
    naming the input (it said 'dimension _plan0: size must be positive'), and
    torch.compile leaves the graph to PyTorch, whose result is returned."""
    from blockbuster import cli
    (tmp_path / "empty.py").write_text(
        "import torch\n"
        "def factory():\n"
        "    return torch.nn.Linear(8, 3), (torch.randn(0, 8),)\n")
    status = cli.main(["run", f"{tmp_path / 'empty.py'}:factory", "--backend", "reference"])
    err = capsys.readouterr().err
    assert status == 2, err
    assert "is empty (shape (0, 8))" in err, err
    assert "_plan" not in err and "Traceback" not in err
    model = nn.Linear(8, 3)
    fast = torch.compile(model, backend="blockbuster", options={"backend": "reference"})
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        out = fast(torch.randn(0, 8))
    assert out.shape == (0, 3)
    assert any("is empty" in str(w.message) for w in caught)


def test_outputs_are_named_after_where_the_model_returns_them(tmp_path, capsys):
    """A model returning a dict of a tensor and a pair: the program's outputs are
    ``h``, ``pair_0`` and ``pair_1`` (they were the graph's node names, ``add``,
    ``relu``, ``sum_1``), and ``run --save-outputs`` writes them under those names,
    each equal to the model's own output."""
    from blockbuster import cli
    (tmp_path / "named.py").write_text(
        "import torch\n"
        "class M(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.fc = torch.nn.Linear(9, 13)\n"
        "    def forward(self, x):\n"
        "        h = self.fc(x) * 40.0\n"
        "        return {'h': h, 'pair': (torch.relu(h), h.sum(-1))}\n"
        "def factory():\n"
        "    torch.manual_seed(0)\n"
        "    return M().eval(), (torch.randn(6, 9),)\n")
    saved = tmp_path / "out.npz"
    status = cli.main(["run", f"{tmp_path / 'named.py'}:factory", "--backend", "reference",
                       "--save-outputs", str(saved)])
    assert status == 0, capsys.readouterr().err
    import importlib.util
    spec = importlib.util.spec_from_file_location("named", tmp_path / "named.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    model, (x,) = mod.factory()
    with torch.no_grad():
        want = model(x)
    got = np.load(saved)
    assert sorted(got.files) == ["h", "pair_0", "pair_1"]
    for name, ref in (("h", want["h"]), ("pair_0", want["pair"][0]),
                      ("pair_1", want["pair"][1])):
        assert max_rel_error(got[name].reshape(ref.shape), ref.double().numpy()) < 1e-5, name


def test_only_calls_that_draw_random_numbers_count_as_random():
    """The graph runs eagerly with gradients only where it draws random numbers:
    ``F.normalize`` (which has ``normal`` in its name) does not, ``rand_like`` and a
    training-mode dropout do, an eval-mode one does not."""
    from blockbuster.frontend.pytorch.autograd import _draws_random_numbers
    seen = []

    def backend(gm, example_inputs):
        seen.append(_draws_random_numbers(gm))
        return gm
    x = torch.randn(3, 4)
    for fn in (lambda t: F.normalize(t, dim=-1) * 2, lambda t: t + torch.rand_like(t),
               lambda t: F.dropout(t, 0.2, True), lambda t: F.dropout(t, 0.2, False) + 1):
        torch._dynamo.reset()
        torch.compile(fn, backend=backend)(x)
    assert seen == [False, True, True, False]


def test_a_model_that_fails_to_trace_is_one_line_of_error_not_torch_logs(tmp_path):
    """torch logs its own traceback when tracing fails (an input of the wrong shape
    for the model: ~40 lines); the CLI prints only its one-line error."""
    import subprocess
    import sys
    (tmp_path / "bad.py").write_text(
        "import torch\n"
        "def factory():\n"
        "    return torch.nn.Linear(4, 4), (torch.randn(3, 5),)\n")
    env = {k: v for k, v in os.environ.items() if k != "TORCH_LOGS"}
    done = subprocess.run([sys.executable, "-m", "blockbuster", "run",
                           f"{tmp_path / 'bad.py'}:factory", "--tune", "off"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: torch.export could not capture the model")
    assert "[3, 5]" in lines[0]


@pytest.mark.parametrize("cell", [nn.LSTM, nn.GRU])
def test_recurrent_layers_import_as_their_unrolled_steps(cell):
    """An LSTM or GRU over 5 steps (batch 3, ragged sizes): every output (the
    sequence, and the last hidden and cell states) matches the layer in float64,
    fused and unfused, on the Numba backend."""
    torch.manual_seed(0)
    model = cell(7, 9, batch_first=True).eval()
    x = torch.randn(3, 5, 7) * 4
    m64 = copy.deepcopy(model).double()
    with torch.no_grad():
        out64 = m64(x.double())
    flat = [out64[0]] + (list(out64[1]) if isinstance(out64[1], tuple) else [out64[1]])
    want = [t.numpy() for t in flat]
    low = lower_module(model, x)
    assert len(low.outputs) == len(want)
    for fuse in (False, True):
        program = bb.fuse(low.program).program if fuse else low.program
        out = bb.compile(program, backend="numba", tune="off")(
            **{low.inputs[0].name: x.numpy().astype(np.float32)}, **low.weights)
        for b, w in zip(low.outputs, want):
            assert max_rel_error(out[b.name].reshape(w.shape), w) < 1e-5


def test_import_writes_the_example_token_ids_beside_the_weights(tmp_path, monkeypatch, capsys):
    """`import --weights` then `run model.bbp --inputs`: the archive holds the example
    inputs too, so the run validates on the model's own token ids (random normal
    floats select no embedding row: every output was the same, and it passed)."""
    from blockbuster import cli
    monkeypatch.chdir(tmp_path)
    (tmp_path / "lm.py").write_text(
        "import torch\n"
        "class LM(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.emb = torch.nn.Embedding(50, 24)\n"
        "        self.out = torch.nn.Linear(24, 50)\n"
        "    def forward(self, ids):\n"
        "        return self.out(torch.relu(self.emb(ids)))\n"
        "def factory():\n"
        "    torch.manual_seed(0)\n"
        "    return LM().eval(), (torch.randint(0, 50, (2, 9)),)\n")
    assert cli.main(["import", "lm.py:factory", "-o", "lm.bbp", "--weights", "lm.npz"]) == 0
    assert "weights and example inputs in lm.npz" in capsys.readouterr().out
    import importlib.util
    spec = importlib.util.spec_from_file_location("lm_factory", tmp_path / "lm.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model, (ids,) = module.factory()
    saved = np.load(tmp_path / "lm.npz")
    assert sorted(saved["ids"].ravel().tolist()) == sorted(ids.numpy().ravel().tolist())
    assert cli.main(["run", "lm.bbp", "--inputs", "lm.npz", "--backend", "reference",
                     "--save-outputs", "y.npz"]) == 0
    got = next(iter(np.load(tmp_path / "y.npz").values()))
    with torch.no_grad():
        want = copy.deepcopy(model).double()(ids).numpy()
    assert max_rel_error(got.reshape(want.shape), want) < 1e-5
