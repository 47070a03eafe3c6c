"""from PyTorch: operators and layouts lowered to block programs match eager PyTorch
(float64 oracle), on ragged sizes and large magnitudes."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import blockbuster as bb
from blockbuster.frontend.pytorch import ImportError_, lower_module

from helpers_torch import float64_reference, fused_error_vs_float64, max_rel_error, run_imported


class NormMLP(torch.nn.Module):
    def __init__(self, e=48, f=70, act="gelu_tanh"):
        super().__init__()
        self.ln = torch.nn.LayerNorm(e)
        self.up = torch.nn.Linear(e, f)
        self.down = torch.nn.Linear(f, e)
        self.act = act

    def forward(self, x):
        h = self.up(self.ln(x))
        h = {"gelu_tanh": lambda t: F.gelu(t, approximate="tanh"), "gelu": F.gelu,
             "relu": F.relu, "silu": F.silu, "sigmoid": torch.sigmoid,
             "tanh": torch.tanh}[self.act](h)
        return torch.softmax(self.down(h), dim=-1)


class UserRMSNorm(torch.nn.Module):
    """RMSNorm as people write it, then a projection."""

    def __init__(self, e=40, n=29):
        super().__init__()
        self.g = torch.nn.Parameter(torch.rand(e) + 0.5)
        self.proj = torch.nn.Linear(e, n, bias=False)

    def forward(self, x):
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.g
        return self.proj(x)


@pytest.mark.parametrize("act", ["gelu_tanh", "gelu", "relu", "silu", "sigmoid", "tanh"])
def test_layernorm_mlp_softmax_matches_eager(act):
    model = NormMLP(act=act).eval()
    x = torch.randn(1, 37, 48)
    got, _, low = run_imported(model, x, blocks={"N48": 32, "N37": 16})
    want = float64_reference(model, x).numpy()
    assert max_rel_error(got[0], want) < 1e-5
    assert len(low.program.kernels) >= 10          # unfused: one kernel per operation


def test_large_magnitudes_fused_and_unfused():
    model = NormMLP(act="gelu").eval()
    x = torch.randn(1, 37, 48) * 1e3 + 1e3
    want = float64_reference(model, x).numpy()
    for fuse in (False, True):
        got, _, _ = run_imported(model, x, fuse=fuse)
        assert np.isfinite(got[0]).all()
        assert max_rel_error(got[0], want) < 1e-4


def test_rms_norm_written_by_hand_and_functional():
    model = UserRMSNorm().eval()
    x = torch.randn(2, 33, 40) * 30                # a leading batch axis of 2
    got, _, low = run_imported(model, x)
    assert max_rel_error(got[0], float64_reference(model, x).numpy()) < 1e-5
    assert any(d.point and d.size == 2 for d in low.program.dims)   # batch: a point dim

    def functional(x, w):
        return F.rms_norm(x, (x.shape[-1],), w, eps=1e-5)
    w = torch.rand(40) + 0.5
    got, ref, _ = run_imported(functional, x, w)
    x64, w64 = x.double(), w.double()
    want = x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + 1e-5) * w64
    assert max_rel_error(got[0], want.numpy()) < 1e-5


def test_causal_attention_with_shared_key_value_heads():
    heads, kv_heads, t, d = 4, 2, 45, 16

    def attend(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    q = torch.randn(1, heads, t, d) * 3
    k = torch.randn(1, kv_heads, t, d) * 3
    v = torch.randn(1, kv_heads, t, d)
    got, _, low = run_imported(attend, q, k, v, blocks={"N45": 16})
    kk = k.double().repeat_interleave(heads // kv_heads, dim=1)
    vv = v.double().repeat_interleave(heads // kv_heads, dim=1)
    s = q.double() @ kk.transpose(-1, -2) / np.sqrt(d)
    s = s.masked_fill(torch.triu(torch.ones(t, t, dtype=torch.bool), 1), float("-inf"))
    want = torch.softmax(s, -1) @ vv
    assert max_rel_error(got[0], want.numpy()) < 1e-5
    # causal: the reductions over keys stop at the diagonal block
    text = str(low.program)
    assert "[ : " in text and "keep_ge" in text


def test_heads_split_and_merged_around_a_projection():
    class MHA(torch.nn.Module):
        def __init__(self, e=64, h=4):
            super().__init__()
            self.h = h
            self.qkv = torch.nn.Linear(e, 3 * e)
            self.out = torch.nn.Linear(e, e)

        def forward(self, x):
            b, t, e = x.shape
            q, k, v = self.qkv(x).split(e, dim=2)
            q, k, v = (z.view(b, t, self.h, e // self.h).transpose(1, 2) for z in (q, k, v))
            o = F.scaled_dot_product_attention(q, k, v)
            return self.out(o.transpose(1, 2).reshape(b, t, e))
    model = MHA().eval()
    x = torch.randn(1, 29, 64)
    got, _, low = run_imported(model, x)
    assert max_rel_error(got[0], float64_reference(model, x).numpy()) < 1e-5
    # heads are views of the projection's column blocks: no copy kernels
    assert not any(k.name.startswith(("copy", "clone")) for k in low.program.kernels)


def test_unsupported_operator_names_the_op_and_the_model_line():
    def model(x):
        return torch.cumprod(x, dim=-1)                # the line the error must name
    with pytest.raises(ImportError_) as err:
        lower_module(model, torch.randn(3, 5))
    msg = str(err.value)
    assert "aten.cumprod" in msg and "test_import_ops.py:" in msg
    assert "\n" not in msg


def test_embedding_lookup_then_layer_norm():
    class Embed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.table = torch.nn.Embedding(300, 48)
            self.ln = torch.nn.LayerNorm(48)

        def forward(self, ids):
            return self.ln(self.table(ids) * 100)
    model = Embed().eval()
    ids = torch.randint(0, 300, (2, 37))            # a batch of 2, ragged length
    for fuse in (False, True):
        got, _, _ = run_imported(model, ids, fuse=fuse)
        m64 = Embed().double()
        m64.load_state_dict({k: v.double() for k, v in model.state_dict().items()})
        with torch.no_grad():
            want = m64.eval()(ids).numpy()
        assert max_rel_error(got[0], want) < 1e-5


def test_attention_with_logits_of_1e4_stays_finite_fused():
    def attend(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    t, d = 41, 16
    q = torch.randn(1, 2, t, d) * 400                 # logits up to about ±1e4
    k = torch.randn(1, 2, t, d) * 400
    v = torch.randn(1, 2, t, d)
    s = q.double() @ k.double().transpose(-1, -2) / np.sqrt(d)
    assert float(s.abs().max()) > 1e4
    s = s.masked_fill(torch.triu(torch.ones(t, t, dtype=torch.bool), 1), float("-inf"))
    want = (torch.softmax(s, -1) @ v.double()).numpy()
    for backend in ("reference", "numba"):
        got, _, _ = run_imported(attend, q, k, v, fuse=True, backend=backend)
        assert np.isfinite(got[0]).all()
        assert max_rel_error(got[0], want) < 1e-4


def test_importing_shows_the_user_none_of_torchs_deprecation_warnings():
    """torch.export's own FutureWarnings (its pytree internals) are not the user's to
    act on: capture and decomposition stay quiet."""
    import warnings

    import blockbuster as bb
    model = torch.nn.Sequential(torch.nn.LayerNorm(32), torch.nn.Linear(32, 16))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        bb.from_torch(model.eval(), torch.randn(1, 20, 32))
    assert not [w for w in caught if issubclass(w.category, (FutureWarning, DeprecationWarning))]


class BoolMaskAttention(torch.nn.Module):
    """A boolean mask says which keys a query attends (True): not a number to add."""

    def __init__(self, t=19):
        super().__init__()
        keep = torch.rand(t, t) > 0.4
        keep[:, 0] = True                        # every query keeps one key
        self.register_buffer("keep", keep)

    def forward(self, q, m):
        a = F.scaled_dot_product_attention(q, q, q, attn_mask=self.keep)
        return a + F.scaled_dot_product_attention(q, q, q, attn_mask=m > 0)


def test_boolean_attention_masks_constant_and_computed():
    model = BoolMaskAttention().eval()
    q, m = torch.randn(1, 2, 19, 16), torch.randn(19, 19)
    m[:, 3] = 1.0
    want = float64_reference(model, q, m).numpy()
    got, _, _ = run_imported(model, q, m)
    assert max_rel_error(got[0], want) < 1e-5


class GateUp(torch.nn.Module):
    """A fused gate/up projection chunked in two at 48: the slices' default block
    must divide 48 (the whole-blocks default of 64 does not)."""

    def __init__(self, e=40, f=48):
        super().__init__()
        self.gate_up = torch.nn.Linear(e, 2 * f, bias=False)
        self.down = torch.nn.Linear(f, e, bias=False)

    def forward(self, x):
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        return self.down(F.silu(gate) * up)


def test_slices_at_a_boundary_the_default_block_does_not_divide():
    model = GateUp().eval()
    x = torch.randn(1, 21, 40)
    got, _, low = run_imported(model, x)
    assert max_rel_error(got[0], float64_reference(model, x).numpy()) < 1e-5
    assert low.program.dim("N96").block == 48


def test_flattening_two_axes_of_an_image():
    """[C, H, W] -> [C, H·W] (a ViT patch embedding's flatten), then transposed:
    H merges with the tiled W, so H is iterated one index at a time (before: a
    "merging two tiled axes" error)."""
    def flatten(x):
        return x.flatten(2).transpose(1, 2) * 2.0
    x = torch.randn(1, 40, 5, 6) * 1e3
    got, _, _ = run_imported(flatten, x)
    assert max_rel_error(got[0], flatten(x.double()).numpy()) < 1e-6


@pytest.mark.parametrize("backend", ["reference", "numba"])
def test_a_scalar_tensor_input(backend):
    """A 0-d tensor argument (a temperature, Gemma's embedding normaliser under
    torch.compile) is a 0-d array: the Numba backend indexes it as ``a[()]``."""
    def scaled(x, s):
        return torch.tanh(x * s) + s
    x, s = torch.randn(1, 19, 40), torch.tensor(1.7)
    got, want, _ = run_imported(scaled, x, s, fuse=True, backend=backend)
    assert max_rel_error(got[0], want[0]) < 1e-6


class ChunkedHeads(torch.nn.Module):
    """q, k, v chunked out of each head of ``3·piece`` columns."""

    def __init__(self, piece=16):
        super().__init__()
        self.piece = piece
        self.qkv = torch.nn.Linear(64, 4 * 3 * piece, bias=False)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 4, 3 * self.piece).transpose(1, 2).chunk(3, dim=-1)
        return q * k + v


def test_heads_chunked_into_whole_blocks_import_and_match_eager():
    """A head of 48 chunked into pieces of 16: the head is cut into blocks of 16
    (three per head), so every piece is whole blocks."""
    model, x = ChunkedHeads().eval(), torch.randn(2, 13, 64)
    got, _, low = run_imported(model, x)
    assert max_rel_error(got[0], float64_reference(model, x).numpy()) < 1e-5
    assert {d.block for d in low.program.dims if d.size == 4 * 48} == {16}


def test_heads_chunked_below_a_block_go_through_selection_matrices():
    """A head of 12 chunked into pieces of 4 (narrower than a block may be): the
    pieces are products with 0/1 selection matrices, the last one too, which a
    first lowering found off the head's 12-column block (before: "slicing at 4 an
    axis tiled in blocks of 12")."""
    model, x = ChunkedHeads(piece=4).eval(), torch.randn(2, 13, 64) * 1e2
    for backend in ("reference", "numba"):
        got, _, low = run_imported(model, x, fuse=backend == "numba", backend=backend)
        assert max_rel_error(got[0], float64_reference(model, x).numpy()) < 1e-5
    assert any(w.startswith("select") for w in low.weights)


class CatAlongColumns(torch.nn.Module):
    """Two projections (32 and 16 columns) concatenated, then a third: a ``cat``
    of whole-block pieces of different sizes, then the slices of the result."""

    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(40, 32), torch.nn.Linear(40, 16)
        self.out = torch.nn.Linear(48, 24)

    def forward(self, x):
        h = torch.cat([torch.tanh(self.a(x)), self.b(x)], dim=-1)
        return self.out(h) + h[..., 16:40].sum(-1, keepdim=True)


@pytest.mark.parametrize("fuse", [False, True])
def test_cat_of_pieces_of_different_sizes_matches_eager(fuse):
    model, x = CatAlongColumns().eval(), torch.randn(2, 19, 40)
    got, _, low = run_imported(model, x, fuse=fuse, backend="numba" if fuse else "reference")
    assert max_rel_error(got[0], float64_reference(model, x).numpy()) < 1e-5
    assert any(k.name.startswith("concat") for k in low.program.kernels)


def test_sequence_and_batch_merged_into_rows_is_a_clear_error():
    """A tiled T merged with a batch after it (rows interleaving the sequences), not
    for a linear layer: a one-line error naming the line, not an invalid program."""
    w = torch.randn(24, 24)

    def interleave(x):
        t = x.transpose(0, 1) @ w                          # [T, B, E]
        h = t.reshape(7, 8, 6).transpose(0, 1)             # [B·H, T, D]
        o = F.scaled_dot_product_attention(h, h, h)
        return o.transpose(0, 1).reshape(14, 24) * 2.0     # [T·B, E]
    with pytest.raises(ImportError_, match=r"^[^\n]*test_import_ops.py:\d+: [^\n]*$"):
        lower_module(interleave, torch.randn(2, 7, 24))


def test_batch_merged_with_heads_cut_from_the_next_axis():
    """``[T, B, E]`` viewed as ``[T, B·H, D]`` (E cut into heads, which merge with the
    batch before them) and back: used to fail with 'cannot view [37, 2, 72] as
    [37, 8, 18]'."""
    def per_head_softmax(x):
        b, t, e = x.shape
        s = x.transpose(0, 1).reshape(t, b * 4, e // 4)
        return torch.softmax(s * 2.0, -1).reshape(t, b, e).transpose(0, 1) + x
    x = torch.randn(2, 37, 72)
    low = lower_module(per_head_softmax, x)
    run = bb.compile(bb.fuse(low.program).program, backend="reference")
    got = run(**{low.inputs[0].name: x.numpy()}, **low.weights)[low.outputs[0].name]
    xn = x.double().numpy()
    s = xn.transpose(1, 0, 2).reshape(37, 8, 18) * 2.0
    w = np.exp(s - s.max(-1, keepdims=True))
    want = (w / w.sum(-1, keepdims=True)).reshape(37, 2, 72).transpose(1, 0, 2) + xn
    assert np.abs(got.reshape(want.shape) - want).max() < 1e-6


def test_log1p_and_expm1_in_torch_modules_with_their_module_named():
    """``nn.LogSigmoid`` (``log1p``) and ``nn.CELU`` (``expm1``) used to be unsupported;
    an error inside torch's own module code (no line of the model's) used to be
    located at '<unknown source>': it names the module."""
    torch.manual_seed(0)
    x = torch.randn(5, 37) * 3
    w, b = torch.randn(19, 37) / 6, torch.randn(19)
    lin = torch.nn.Linear(37, 19)
    with torch.no_grad():
        lin.weight.copy_(w), lin.bias.copy_(b)
    h = x.double().numpy() @ w.double().numpy().T + b.double().numpy()
    wants = {"LogSigmoid": -np.logaddexp(0.0, -h),
             "CELU": np.where(h > 0, h, 0.5 * np.expm1(h / 0.5))}
    for mod in (torch.nn.LogSigmoid(), torch.nn.CELU(0.5)):
        model = torch.nn.Sequential(lin, mod).eval()
        got, _, _ = run_imported(model, x)
        want = wants[type(mod).__name__]
        assert np.abs(got[0] - want).max() / max(1.0, np.abs(want).max()) < 1e-6
    with pytest.raises(ImportError_, match=r"^module 1 \(RReLU\): unsupported operator"):
        lower_module(torch.nn.Sequential(lin, torch.nn.RReLU()), x)


def test_tensors_made_like_an_input_are_constants():
    """``zeros_like(x)``, ``ones_like(x)``, ``x.new_full(...)`` depend on x's shape
    only: folded at import (they were unsupported operators)."""
    def clipped(x):
        return torch.maximum(x, torch.zeros_like(x)) + 2 * torch.ones_like(x) \
            + x.new_full(x.shape, 0.5)
    x = torch.randn(3, 17, 40) * 1e3
    got, _, low = run_imported(clipped, x)
    x64 = x.double().numpy()
    assert max_rel_error(got[0], np.maximum(x64, 0) + 2.5) < 1e-6


def test_reductions_over_a_batch_or_head_axis():
    """A sum, max or softmax over a leading axis (heads, batch) combines whole
    blocks one index at a time: ``x.sum(1)`` of ``[B, H, T, E]`` failed ('blocks over
    3 axes'), and the mean over heads of attention weights (``nn.MultiheadAttention``
    with ``need_weights``) was an internal error."""
    def f(x, q, k):
        w = torch.bmm(q, k.transpose(1, 2)).softmax(-1).view(1, 4, 11, 13)
        return x.sum(1), x - x.amax(1, keepdim=True), x.softmax(0), w.mean(dim=1)
    x, q, k = torch.randn(2, 3, 19, 24) * 30, torch.randn(4, 11, 8), torch.randn(4, 13, 8)
    got, _, _ = run_imported(f, x, q, k)
    x64, q64, k64 = (t.double().numpy() for t in (x, q, k))
    s = q64 @ k64.transpose(0, 2, 1)
    w = np.exp(s - s.max(-1, keepdims=True))
    e = np.exp(x64 - x64.max(0))
    want = [x64.sum(1), x64 - x64.max(1, keepdims=True), e / e.sum(0),
            (w / w.sum(-1, keepdims=True)).mean(0)]
    for g, wnt in zip(got, want):
        assert max_rel_error(g.reshape(wnt.shape), wnt) < 1e-6


def test_running_sums_along_any_axis():
    """``torch.cumsum`` along the last axis, a tiled middle axis and a batch axis, on
    ragged sizes and large magnitudes (a product with a constant triangular matrix;
    fused too)."""
    def f(x):
        return torch.cumsum(x, -1), torch.cumsum(x, 1) * 2, torch.cumsum(x, 0)
    x = torch.randn(3, 37, 29) * 1e3 + 1e3
    x64 = x.double().numpy()
    want = [np.cumsum(x64, -1), np.cumsum(x64, 1) * 2, np.cumsum(x64, 0)]
    for fuse in (False, True):
        got, _, _ = run_imported(f, x, fuse=fuse, blocks={"N37": 16, "N29": 8})
        for g, wnt in zip(got, want):
            assert max_rel_error(g.reshape(wnt.shape), wnt) < 1e-5


def test_running_mean_over_positions_then_a_linear_layer():
    """A running mean over the positions of ``[B, T, E]`` features feeding a Linear:
    the cumsum is a matmul over T, so E stays tiled for the Linear (it was an
    import error blaming the Linear: "a matrix axis of 48 is also a batch axis")."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(48, 33)

    def f(x):
        steps = torch.arange(1, x.shape[1] + 1, dtype=x.dtype)[:, None]
        return lin(torch.cumsum(x, dim=1) / steps)
    x = torch.randn(2, 37, 48) * 1e3 + 1e3
    with torch.no_grad():
        want = (np.cumsum(x.double().numpy(), axis=1) / np.arange(1, 38)[:, None]
                ) @ lin.weight.double().numpy().T + lin.bias.double().numpy()
    for fuse in (False, True):
        got, _, _ = run_imported(f, x, fuse=fuse, blocks={"N37": 16})
        assert max_rel_error(got[0].reshape(want.shape), want) < 1e-5


def test_positions_numbered_past_padding_then_looked_up():
    """RoBERTa's position ids: a running count of the tokens that are not padding
    (``cumsum`` of a mask of integer token ids), then an embedding lookup and a
    ``gather`` of a buffer by those ids."""
    class Positions(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.pos = torch.nn.Embedding(40, 24)
            self.register_buffer("bias", torch.linspace(-3e3, 3e3, 40)[None, :])

        def forward(self, ids):
            mask = ids.ne(1).int()
            pos = (torch.cumsum(mask, dim=1).type_as(mask) * mask).long() + 1
            picked = torch.gather(self.bias.expand(ids.shape[0], -1), 1, pos)
            return self.pos(pos) * picked[..., None]
    model = Positions().eval()
    ids = torch.randint(2, 50, (2, 29))
    ids[0, 20:] = 1                                   # a padded sequence
    got, _, _ = run_imported(model, ids)
    pos = (np.cumsum(ids.numpy() != 1, axis=1) * (ids.numpy() != 1)) + 1
    table = model.pos.weight.detach().double().numpy()
    bias = model.bias.double().numpy()[0]
    want = table[pos] * bias[pos][..., None]
    assert max_rel_error(got[0], want) < 1e-6


def test_gather_along_the_last_and_a_leading_axis():
    """``torch.gather`` of inputs by index inputs, along the last axis and along a
    leading axis, the index longer than the input there (``np.take_along_axis``)."""
    def f(x, y, i, j):
        return torch.gather(x, -1, i), torch.gather(y, 0, j)
    x, y = torch.randn(3, 37, 19) * 1e3, torch.randn(7, 5) * 1e3
    i, j = torch.randint(0, 19, (3, 37, 19)), torch.randint(0, 7, (11, 5))
    got, _, _ = run_imported(f, x, y, i, j)
    x64, y64 = x.double().numpy(), y.double().numpy()
    want = [np.take_along_axis(x64, i.numpy(), -1), np.take_along_axis(y64, j.numpy(), 0)]
    for g, wnt in zip(got, want):
        assert max_rel_error(g.reshape(wnt.shape), wnt) < 1e-6


def test_indexing_with_constant_ranges_on_several_axes():
    """``x[b_idx, s_idx]`` with ``arange`` index tensors broadcast against each other
    (how Hugging Face expands a padding mask to ``[B, 1, 1, S]``), indexed axes that
    are not adjacent (the index shape goes first), and a constant single index."""
    def f(x, y):
        b = torch.arange(x.shape[0])[:, None, None, None]
        s = torch.arange(x.shape[1])[None, None, None, :]
        i = torch.arange(2, 7)[None, :]
        c = torch.arange(y.shape[2])[:, None]
        return x[b, s] * 2, y[i, :, c], y[[3]]
    x, y = torch.randn(3, 37) * 1e3, torch.randn(9, 11, 29) * 1e3
    got, _, _ = run_imported(f, x, y)
    x64, y64 = x.double().numpy(), y.double().numpy()
    want = [x64[np.arange(3)[:, None, None, None], np.arange(37)[None, None, None, :]] * 2,
            y64[np.arange(2, 7)[None, :], :, np.arange(29)[:, None]], y64[[3]]]
    for g, wnt in zip(got, want):
        assert max_rel_error(g.reshape(wnt.shape), wnt) < 1e-6


@pytest.mark.parametrize("index, says", [
    (lambda x: x[torch.tensor([2, 0, 1])], "do not count up by one"),
    (lambda x: x[torch.arange(3), torch.arange(3)], "two indices count along one axis"),
    (lambda x: x[(x[:, 0] > 0).long()], "only x[arange(B), i]")])
def test_indexing_the_import_cannot_express_is_a_clear_error(index, says):
    with pytest.raises(ImportError_) as err:
        lower_module(index, torch.randn(3, 5))
    assert says in str(err.value) and "\n" not in str(err.value)


def test_reductions_over_several_axes_and_extremes_with_their_values():
    """``sum``/``mean`` over several axes (one after another), ``amin``, ``x.max(dim)``
    and ``x.min(dim)`` values, and boolean ``any``/``all`` as 0/1."""
    def f(x):
        return (x.sum((0, 1)), x.mean((1, 0), keepdim=True), x.amin(1),
                x.max(-1).values, x - x.min(dim=2, keepdim=True)[0],
                (x > 2e3).any(-1).float(), (x > -1e3).all(1).float())
    x = torch.randn(3, 5, 19, 24) * 1e3
    got, _, _ = run_imported(f, x)
    x64 = x.double().numpy()
    want = [x64.sum((0, 1)), x64.mean((0, 1), keepdims=True), x64.min(1), x64.max(-1),
            x64 - x64.min(2, keepdims=True), (x64 > 2e3).any(-1), (x64 > -1e3).all(1)]
    for g, wnt in zip(got, want):
        assert max_rel_error(g.reshape(wnt.shape), wnt) < 1e-6


def test_an_extreme_whose_indices_are_read_is_a_clear_error():
    with pytest.raises(ImportError_) as err:
        lower_module(lambda x: x.max(-1).indices.float() + x.max(-1).values, torch.randn(3, 5))
    assert "indices" in str(err.value) and "\n" not in str(err.value)


def test_non_finite_tests_and_nan_to_num():
    def f(x):
        return (torch.isnan(x).float(), torch.isinf(x).float(), torch.isfinite(x).float(),
                torch.isposinf(x).float() - torch.isneginf(x).float(), torch.nan_to_num(x),
                torch.nan_to_num(x, nan=1.0, posinf=2.0, neginf=-3.0))
    x = torch.randn(3, 19, 24) * 1e3
    x[0, 1, :5] = float("nan")
    x[1, 2, 3:9] = float("inf")
    x[2, :4, 7] = -float("inf")
    got, _, _ = run_imported(f, x)
    a = x.double().numpy()
    big = float(np.finfo(np.float32).max)
    want = [np.isnan(a), np.isinf(a), np.isfinite(a), np.isposinf(a) * 1.0 - np.isneginf(a),
            np.nan_to_num(a, nan=0.0, posinf=big, neginf=-big),
            np.nan_to_num(a, nan=1.0, posinf=2.0, neginf=-3.0)]
    for g, wnt in zip(got, want):
        assert np.array_equal(g.reshape(wnt.shape), wnt.astype(np.float32))


def test_one_position_of_a_tiled_axis_then_a_linear_layer():
    """``h[:, 0]`` (BERT's pooler on the first token), ``h[:, -1:]`` (the last
    position's logits) and ``h[:, 5]`` of a sequence axis tiled in blocks, each then
    projected (its rows are the batch, one index at a time); infinities at the other
    positions are masked, not multiplied by 0."""
    lin = torch.nn.Linear(24, 7)

    def f(h):
        return lin(h[:, 0]), lin(h[:, -1:, :]), torch.tanh(h[:, 5])
    h = torch.randn(3, 37, 24) * 1e3
    h[:, 1:4, :] = float("inf")
    got, _, _ = run_imported(f, h, blocks={"N37": 16})
    h64 = h.double().numpy()
    w, b = lin.weight.detach().double().numpy(), lin.bias.detach().double().numpy()
    want = [h64[:, 0] @ w.T + b, h64[:, -1:] @ w.T + b, np.tanh(h64[:, 5])]
    for g, wnt in zip(got, want):
        assert max_rel_error(g.reshape(wnt.shape), wnt) < 1e-5


class PaddedProjection(torch.nn.Module):
    """F.pad as models use it: features padded on both sides with a value, a
    projection of the padded width, then the sequence padded at the end."""

    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(37, 45)
        self.down = torch.nn.Linear(53, 29)

    def forward(self, x):
        h = F.pad(torch.tanh(self.up(x)), (3, 5), value=0.5)
        return F.pad(self.down(h), (0, 0, 0, 6)) * 2.0


@pytest.mark.parametrize("backend", ["reference", "numba"])
def test_constant_padding_matches_eager(backend):
    torch.manual_seed(0)
    model = PaddedProjection().eval()
    x = torch.randn(2, 61, 37) * 1e3
    got, _, _ = run_imported(model, x, fuse=True, backend=backend)
    want = float64_reference(model, x).numpy()
    assert got[0].shape == want.shape == (2, 67, 29)
    assert max_rel_error(got[0], want) < 1e-5
    assert np.all(got[0][:, -6:] == 0.0)               # the padding itself is exact


def test_a_negative_pad_cuts_whole_blocks_off():
    x = torch.randn(3, 50, 64) * 1e3
    program = bb.from_torch(lambda t: F.pad(t, (0, -32, 2, 0)) + 1.0, x)
    out = bb.compile(bb.fuse(program).program, backend="reference")(t=x.numpy())
    want = F.pad(x.double(), (0, -32, 2, 0)).numpy() + 1.0
    got = out[program.outputs[0]].reshape(want.shape)
    assert max_rel_error(got, want) < 1e-6


def test_padding_a_batch_of_one_places_it():
    """A batch of one (not stored) padded by one: each piece placed (a ``where``)."""
    x = torch.randn(1, 30, 16) * 1e3
    got, ref, _ = run_imported(lambda x: F.pad(x, (0, 0, 0, 0, 1, 0)) * 2, x)
    assert got[0].shape == ref[0].shape == (2, 30, 16)
    assert np.array_equal(got[0][0], np.zeros((30, 16))) and max_rel_error(got[0], ref[0]) < 1e-6


class BatchNormed(torch.nn.Module):
    """An eval-mode BatchNorm over features (``[N, C]``) and over channels of a
    sequence (``[N, C, L]``), each followed by a linear layer."""

    def __init__(self, c=12, length=25):
        super().__init__()
        self.flat, self.seq = torch.nn.BatchNorm1d(length), torch.nn.BatchNorm1d(c)
        self.fc = torch.nn.Linear(length, length)
        for bn in (self.flat, self.seq):
            bn.running_mean.normal_().mul_(100.0)
            bn.running_var.uniform_(0.5, 2.0)
            bn.weight.data.normal_()
            bn.bias.data.normal_()

    def forward(self, x, y):
        return self.fc(self.seq(x)), self.fc(self.flat(y))


@pytest.mark.parametrize("backend", ["reference", "numba"])
def test_batch_norm_in_eval_mode_uses_its_running_statistics(backend):
    torch.manual_seed(0)
    model = BatchNormed().eval()
    x, y = torch.randn(3, 12, 25) * 1e2, torch.randn(33, 25) * 1e2
    low = lower_module(model, x, y)
    program = bb.fuse(low.program).program if backend == "numba" else low.program
    out = bb.compile(program, backend=backend)(x=x.numpy(), y=y.numpy(), **low.weights)
    with torch.no_grad():
        want = torch.nn.Module.double(__import__("copy").deepcopy(model))(x.double(),
                                                                         y.double())
    for b, w in zip(low.outputs, want):
        assert max_rel_error(out[b.name].reshape(w.shape), w.numpy()) < 2e-5


class Grouped(torch.nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.kind = kind
        self.norm = torch.nn.GroupNorm(4, 32)
        self.norm.weight.data.normal_()
        self.norm.bias.data.normal_()

    def forward(self, x):
        if self.kind == "instance":             # over each row of each channel
            return F.instance_norm(x)
        return self.norm(x)                     # [N, C]: groups of 8 features


@pytest.mark.parametrize("kind,shape", [("group", (37, 32)), ("instance", (3, 12, 25))])
def test_group_and_instance_norm_at_large_means(kind, shape):
    """Torch's own decompositions (``var_mean`` over the group's axes, a contiguous
    ``as_strided``) against the float64 model, inputs around 1e3."""
    torch.manual_seed(0)
    model = Grouped(kind).eval()
    x = torch.randn(*shape) * 10 + 1e3
    got, _, _ = run_imported(model, x)
    want = float64_reference(model, x).numpy()
    assert max_rel_error(got[0], want) < 2e-5


def test_var_mean_over_two_axes():
    def f(x):
        var, mean = torch.var_mean(x, dim=(1, 2), keepdim=True, correction=1)
        return (x - mean) * var

    x = torch.randn(4, 5, 3, 30).double() * 3 + 50
    got, _, _ = run_imported(f, x.float())
    want = f(x).numpy()
    assert max_rel_error(got[0], want) < 1e-4


def test_as_strided_other_than_a_reshape_is_a_clear_error():
    def f(x):
        return torch.as_strided(x, (7, 10), (1, 7)) * 2.0

    with pytest.raises(ImportError_, match="only a contiguous reshape"):
        lower_module(f, torch.randn(10, 7))


def float64_reference_all(model, *inputs):
    """Every output of the model in float64 (integer inputs, token ids, as given)."""
    import copy
    inputs = [t.double() if t.is_floating_point() else t for t in inputs]
    with torch.no_grad():
        return [o.numpy() for o in copy.deepcopy(model).double()(*inputs)]


class PooledClassifier(torch.nn.Module):
    """Token embeddings mean-pooled per sequence, then class log-probabilities: the
    pooled ``[B, E]`` has its batch iterated one index at a time, so the softmax
    reduces each vector block to one number."""

    def __init__(self, vocab=100, e=40, classes=13):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, e)
        self.head = torch.nn.Linear(e, classes)

    def forward(self, ids):
        pooled = self.emb(ids).mean(1) * 1e2
        return F.log_softmax(self.head(pooled), -1), pooled.amax(-1, keepdim=True)


@pytest.mark.parametrize("backend", ["reference", "numba"])
def test_softmax_and_max_of_a_batch_of_pooled_vectors(backend):
    torch.manual_seed(0)
    model = PooledClassifier().eval()
    ids = torch.randint(0, 100, (3, 17))
    low = lower_module(model, ids, blocks={"N40": 16, "N13": 8})
    program = bb.fuse(low.program).program if backend == "numba" else low.program
    out = bb.compile(program, backend=backend)(ids=ids.numpy().astype(np.float32),
                                               **low.weights)
    want = float64_reference_all(model, ids)
    for b, w in zip(low.outputs, want):
        assert max_rel_error(out[b.name].reshape(w.shape), w) < 2e-5




@pytest.mark.parametrize("backend", ["reference", "numba"])
def test_group_norm_over_channels_and_positions(backend):
    """GroupNorm of ``[N, C, L]``: ``var_mean`` over (channels of a group, positions),
    the group a point axis, the reduced positions a vector per channel."""
    torch.manual_seed(0)
    model = torch.nn.GroupNorm(3, 12).eval()
    model.weight.data.normal_()
    model.bias.data.normal_()
    x = torch.randn(2, 12, 25) * 10 + 1e3
    low = lower_module(model, x)
    program = bb.fuse(low.program).program if backend == "numba" else low.program
    out = bb.compile(program, backend=backend)(**{low.inputs[0].name: x.numpy()},
                                               **low.weights)
    want = float64_reference(model, x).numpy()
    assert max_rel_error(out[low.outputs[0].name].reshape(want.shape), want) < 2e-5


def test_flatten_of_channels_and_features_then_a_linear_layer():
    """``nn.Flatten`` of ``[B, C, F]``: the channels (tiled as rows at first) merge
    with the features, so they are iterated one index at a time ("merging two tiled
    axes" before)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(60, 10)).eval()
    x = torch.randn(8, 3, 20) * 1e2
    got, _, _ = run_imported(model, x)
    want = float64_reference(model, x).numpy()
    assert max_rel_error(got[0], want) < 2e-5


class SpanHead(torch.nn.Module):
    """A question-answering head as Hugging Face writes it: two logits per token,
    split into ones and squeezed; plus a slice of features off any wide block's
    boundaries (``x[..., 3:17]``) and one of the sequence."""

    def __init__(self, e=40):
        super().__init__()
        self.qa = torch.nn.Linear(e, 2)

    def forward(self, x):
        start, end = self.qa(x).split(1, dim=-1)
        return start.squeeze(-1), end.squeeze(-1), torch.tanh(x[..., 3:17]), x[:, 5:11] * 2


@pytest.mark.parametrize("backend", ["reference", "numba"])
def test_slices_that_are_not_whole_blocks(backend):
    """Pieces narrower than a block (one column of a two-column output) and cuts
    off block boundaries: the last axis through a 0/1 selection matrix, not blocks
    of one column (before: "a single element [0] of an axis tiled in blocks", and
    the features cut into 1-wide blocks)."""
    torch.manual_seed(0)
    model = SpanHead().eval()
    x = torch.randn(2, 29, 40) * 1e3
    low = lower_module(model, x)
    program = bb.fuse(low.program).program if backend == "numba" else low.program
    assert program.dim("N40").block >= 8         # the feature axis keeps real blocks
    out = bb.compile(program, backend=backend)(x=x.numpy(), **low.weights)
    want = float64_reference_all(model, x)
    assert len(low.outputs) == len(want) == 4
    for b, w in zip(low.outputs, want):
        assert max_rel_error(out[b.name].reshape(w.shape), w) < 2e-5


def test_argmax_and_argmin_with_ties_and_nan():
    """Positions as PyTorch gives them: the first of tied extremes, a NaN's where a
    row has one; over the last axis and over the sequence axis, kept or dropped."""
    def f(x):
        return (x.argmax(-1).float(), x.argmin(1, keepdim=True).float() * 1.0,
                torch.argmax(x * 3.0, dim=-2).float())

    torch.manual_seed(0)
    x = torch.randn(2, 21, 37).round() * 1e3           # rounded: many ties
    x[1, 4, 30] = float("nan")
    low = lower_module(f, x)
    for backend in ("reference", "numba"):
        out = bb.compile(low.program, backend=backend)(x=x.numpy(), **low.weights)
        for b, w in zip(low.outputs, f(x)):
            np.testing.assert_array_equal(out[b.name].reshape(w.shape), w.numpy())


def test_argmax_of_the_flattened_tensor_is_a_clear_error():
    with pytest.raises(ImportError_, match="argmax of the flattened tensor"):
        lower_module(lambda x: x.argmax().float(), torch.randn(5, 7))


@pytest.mark.parametrize("label,fn", [
    ("first 10 of 29 columns", lambda x: x[..., :10] * 2),
    ("all but the last column", lambda x: x[..., :-1] * 2),
    ("columns 8 to 16", lambda x: x[..., 8:16] + 1),
    ("split 10 + 19", lambda x: x.split([10, 19], -1)[1] * 2),
    ("all but the last row", lambda x: x[:, :-1] * 2),
    ("negative padding", lambda x: F.pad(x, (-2, 0)) * 3),
    ("one row by a constant index", lambda x: x[:, [-2]] * 2),
    ("rows 5 to 8 by a counting index", lambda x: x[:, torch.arange(5, 9)] - 1),
    ("one column by a constant index", lambda x: x[..., [7]] * 2),
    ("a 2-D tensor's one row", lambda x: x[0, [-2]] * 2),
    ("a 2-D tensor's one column", lambda x: x[0][:, 3] + 1),
])
def test_slices_at_cuts_the_blocks_cannot_take(label, fn):
    """Cuts whose common factor (10, 28, 8, 36) does not divide the axis (29 columns,
    37 rows), and single elements of an axis tiled in blocks with no second tiled axis
    to mask along: a first lowering asks the axis for blocks it cannot have; the slice
    is then taken through a selection matrix."""
    torch.manual_seed(0)
    x = torch.randn(3, 37, 29) * 1e3
    got, _, _ = run_imported(fn, x)
    want = fn(x.double()).numpy()
    assert max_rel_error(got[0].reshape(want.shape), want) < 1e-6


@pytest.mark.parametrize("block", [37, 16])
def test_given_blocks_of_an_axis_a_slice_cuts_take_the_slice_by_selection(block):
    """``x[:30]`` and ``x[30:]`` of 37 rows with blocks given for that axis (as the
    tuner gives its starting blocks when it re-imports a torch.compile region): the
    cut asks for blocks of 30, so the slice goes through a selection matrix, as
    without given blocks. Was "dimension N37 must have block 30", and Gemma-2's
    sliding-window model fell back to PyTorch whole."""
    torch.manual_seed(0)
    w = torch.randn(16, 16)
    fn = lambda x: torch.cat([x[:30] @ w, x[30:]], 0)    # noqa: E731
    x = torch.randn(37, 16) * 1e3
    got, _, low = run_imported(fn, x, blocks={"N37": block})
    assert low.program.dim("N37").block == block
    want = torch.cat([x.double()[:30] @ w.double(), x.double()[30:]], 0).numpy()
    assert max_rel_error(got[0].reshape(want.shape), want) < 1e-6


def test_casts_to_bool_and_from_floats_to_integers():
    torch.manual_seed(0)
    x = torch.randn(3, 37, 29) * 5
    x[0, 0, :3] = 0.0
    fn = lambda x: x.bool().float() + torch.where(x.bool(), x, -1.0)   # noqa: E731
    got, _, _ = run_imported(fn, x)
    want = fn(x.double()).numpy()
    assert max_rel_error(got[0].reshape(want.shape), want) < 1e-6
    with pytest.raises(ImportError_, match="truncation toward zero"):    # not a silent no-op
        bb.from_torch(lambda x: x.long().float() * 2, x)


def test_halves_of_a_projection_whose_positions_are_iterated_one_at_a_time():
    """Mamba's in-projection split in two (``split([64, 64], 1)`` of ``[B, 128, T]``)
    where the positions come from a sliced sequence-first axis, so they are iterated
    one index at a time and the blocks are vectors: the slice kept the 128-wide
    label on its 64-wide vectors (an internal IRError under torch.compile)."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(32, 128, bias=False)

    def f(x):
        a, b = torch.split(lin(x[0:37].permute(1, 0, 2)).permute(0, 2, 1), [64, 64], 1)
        return a * 2, b
    x = torch.randn(38, 2, 32) * 1e3
    y = (x.double()[0:37].permute(1, 0, 2) @ lin.weight.double().T).permute(0, 2, 1).detach()
    want = [y[:, :64].numpy() * 2, y[:, 64:].numpy()]
    for fuse in (False, True):
        got, _, _ = run_imported(f, x, fuse=fuse)
        for g, w in zip(got, want):
            assert max_rel_error(g.reshape(w.shape), w) < 1e-5


class _ExpandedMatmul(torch.nn.Module):
    def __init__(self, which):
        super().__init__()
        self.which = which

    def forward(self, a, b):
        if self.which == "k of a":
            return (a.expand(5, 13, 24) @ b) * 10
        if self.which == "k of b":
            return (a @ b.expand(24, 7)) * 10
        return (a @ b.expand(24, 7)) * 10 + torch.arange(7.0)       # columns of b


@pytest.mark.parametrize("which, sa, sb", [("k of a", (5, 13, 1), (24, 7)),
                                           ("k of b", (5, 13, 24), (1, 7)),
                                           ("columns of b", (5, 13, 24), (24, 1))])
def test_a_matmul_operand_expanded_from_size_1(which, sa, sb):
    """An operand broadcast along the contracted axis (or b's columns) by ``expand``:
    not stored, so no block of it exists; it was "shapes do not broadcast"."""
    torch.manual_seed(0)
    xs = (torch.randn(*sa) * 100, torch.randn(*sb))
    assert fused_error_vs_float64(_ExpandedMatmul(which).eval(), *xs) < 1e-5


class _NormOverTwoAxes(torch.nn.Module):
    def __init__(self, kind):
        super().__init__()
        if kind == "rms":
            self.norm = torch.nn.RMSNorm((13, 24))
        else:
            self.norm = torch.nn.LayerNorm((13, 24), elementwise_affine=kind == "layer")
        with torch.no_grad():
            for p in self.norm.parameters():
                p.normal_()

    def forward(self, x):
        return self.norm(x)


@pytest.mark.parametrize("kind", ["layer", "layer without affine", "rms"])
def test_a_norm_over_two_trailing_axes(kind):
    """``LayerNorm((H, W))``: the statistics over both axes (it was left to PyTorch:
    "only the last axis"), on rows with a large mean."""
    torch.manual_seed(0)
    x = torch.randn(5, 13, 24) * 100 + 1000
    assert fused_error_vs_float64(_NormOverTwoAxes(kind).eval(), x) < 1e-5


class _RotaryOfOneToken(torch.nn.Module):
    """Llama's rotary embedding applied to a decoding step's query, one token per
    sequence: ``q = x·Wᵀ`` split into heads ``[B, H, 1, D]``, then
    ``q·cos + rotate_half(q)·sin``."""

    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.proj = torch.nn.Linear(width, width, bias=False)

    def forward(self, x, cos, sin):
        b, t, e = x.shape
        q = self.proj(x).view(b, t, self.heads, e // self.heads).transpose(1, 2)
        half = q.shape[-1] // 2
        rotated = torch.cat((-q[..., half:], q[..., :half]), dim=-1)
        return q * cos + rotated * sin


@pytest.mark.parametrize("batch, width, heads", [(2, 64, 4), (1, 24, 3), (3, 32, 1)])
def test_rotate_half_of_one_token(batch, width, heads):
    """One row per head: no block of rows for the rotate-half operator (it was left to
    PyTorch: "rotate-half needs blocks of rows and columns")."""
    torch.manual_seed(0)
    x = torch.randn(batch, 1, width) * 1e3
    angles = torch.randn(1, width // heads)
    assert fused_error_vs_float64(_RotaryOfOneToken(width, heads).eval(), x, angles.cos(),
                                  angles.sin()) < 1e-5
