"""Attention variants of users' own models: partial rotary embeddings on narrow
heads, causal attention over a rectangle of scores. Each checked against float64."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from helpers_torch import fused_error_vs_float64, max_rel_error, run_imported


class _PartialRotary(torch.nn.Module):
    """Rotary embeddings on the first half of each 16-wide head (8 columns, rotated
    in halves of 4), q, k and v from one projection, heads merged back whole."""

    def __init__(self, chunked: bool, e=64, h=4):
        super().__init__()
        self.h, self.d, self.chunked = h, e // h, chunked
        self.qkv, self.o = torch.nn.Linear(e, 3 * e), torch.nn.Linear(e, e)

    def rotate(self, x):
        a, b = x.chunk(2, -1) if self.chunked else (x[..., :4], x[..., 4:])
        return torch.cat((-b, a), -1)

    def forward(self, x):
        b, t, e = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.h, self.d).permute(2, 0, 3, 1, 4)
        f = torch.outer(torch.arange(t, dtype=x.dtype), 1e-2 * torch.arange(1, 5, dtype=x.dtype))
        cos, sin = torch.cat((f, f), -1).cos(), torch.cat((f, f), -1).sin()

        def rope(z):
            r, rest = z[..., :8], z[..., 8:]
            return torch.cat((r * cos + self.rotate(r) * sin, rest), -1)
        a = F.scaled_dot_product_attention(rope(q), rope(k), v, is_causal=True)
        return self.o(a.transpose(1, 2).reshape(b, t, e))


@pytest.mark.parametrize("chunked", [False, True])
def test_rotary_embeddings_on_part_of_a_narrow_head(chunked):
    """Persimmon's partial rotary at a tiny head: the rotated columns cut the head
    below any block its merge back into the embedding allows (a first lowering asks
    its axis for blocks of 8 and of 16), and their halves are cut at 4; both slices
    and the concatenation are then taken through selection matrices."""
    torch.manual_seed(0)
    model = _PartialRotary(chunked).eval()
    x = torch.randn(2, 19, 64) * 1e2
    assert fused_error_vs_float64(model, x) < 1e-5


@pytest.mark.parametrize("tq,tk", [(9, 29), (29, 11)])
def test_causal_attention_with_fewer_or_more_queries_than_keys(tq, tk):
    """PyTorch's ``is_causal`` for a rectangle of scores is aligned to the top left
    (query i sees keys 0..i); it was an import error."""
    def attend(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, t, 16) * s for t, s in ((tq, 3), (tk, 3), (tk, 1e3)))
    got, _, _ = run_imported(attend, q, k, v, fuse=True)
    q64, k64, v64 = (t.double().numpy() for t in (q, k, v))
    scores = q64 @ k64.transpose(0, 1, 3, 2) / 4.0
    scores[..., ~np.tril(np.ones((tq, tk), dtype=bool))] = -np.inf
    p = np.exp(scores - scores.max(-1, keepdims=True))
    want = (p / p.sum(-1, keepdims=True)) @ v64
    assert max_rel_error(got[0].reshape(want.shape), want) < 1e-5


class _HeadBiasFromLinear(torch.nn.Module):
    """A Linear with one output column per head, transposed into a per-head key bias
    ``[B, H, 1, T]`` of the attention (Doge's dynamic mask)."""

    def __init__(self, e=64, h=2, d=16):
        super().__init__()
        self.h, self.d = h, d
        self.qkv, self.dt = torch.nn.Linear(e, 3 * h * d), torch.nn.Linear(e, h)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.h, self.d).permute(2, 0, 3, 1, 4)
        bias = self.dt(x).transpose(1, 2)[:, :, None, :]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)


def test_a_per_head_bias_computed_by_a_linear_layer():
    """The Linear's columns are the attention's heads, iterated one index at a time,
    so its product cannot be a block matmul ("a matrix axis of 2 is also a batch
    axis"); per head it is the rows times that head's column, summed."""
    torch.manual_seed(0)
    model = _HeadBiasFromLinear().eval()
    x = torch.randn(2, 37, 64) * 3
    assert fused_error_vs_float64(model, x) < 1e-5
