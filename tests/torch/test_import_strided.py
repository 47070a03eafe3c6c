"""Every other column (strided slices, interleaving: GPT-J's and Cohere's rotary
embedding) and ``nn.MultiheadAttention`` returning its weights for a batch: each
imported and run unfused against an independent float64 computation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from helpers_torch import max_rel_error, run_imported


def _np(t):
    return t.double().numpy()


def test_strided_slices_of_the_last_axis_and_of_a_batch_axis():
    """``x[..., 1::3]`` of the tiled last axis (a selection matmul) and
    ``x[::2]`` of a batch axis (a view)."""
    def f(x):
        return x[..., 1::3] * 2.0, x[::2] + 1.0
    x = torch.randn(3, 17, 23) * 100
    got, _, _ = run_imported(f, x)
    x64 = _np(x)
    want = [x64[..., 1::3] * 2.0, x64[::2] + 1.0]
    for g, w in zip(got, want):
        assert max_rel_error(g.reshape(w.shape), w) < 1e-6


def test_strided_slices_of_a_sequence_axis():
    """Even rows plus odd rows of ``[B, H, W, C]`` (the rows one index at a time)."""
    def f(x):
        return x[:, 0::2] + x[:, 1::2]
    x = torch.randn(2, 8, 6, 16)
    got, _, _ = run_imported(f, x)
    x64 = _np(x)
    want = x64[:, 0::2] + x64[:, 1::2]
    assert max_rel_error(got[0].reshape(want.shape), want) < 1e-6


def test_interleaved_rotary_embedding_as_gpt_j_writes_it():
    """``stack([-x[..., 1::2], x[..., ::2]], -1).flatten(-2)`` on each head's first
    8 columns (the rest pass through), with tables repeated per pair."""
    B, T, H, D, R = 2, 13, 3, 16, 8

    def rotate_every_two(x):
        return torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)

    angles = torch.arange(T)[:, None] * 0.1 ** torch.arange(R // 2)[None, :]
    cos = torch.repeat_interleave(angles.cos(), 2, -1)[None, :, None, :]
    sin = torch.repeat_interleave(angles.sin(), 2, -1)[None, :, None, :]

    def f(x):
        q = x.view(B, T, H, D)
        rot, rest = q[..., :R], q[..., R:]
        out = torch.cat([rot * cos + rotate_every_two(rot) * sin, rest], dim=-1)
        return out.permute(0, 2, 1, 3)
    x = torch.randn(B, T, H * D)
    got, _, _ = run_imported(f, x)
    q = _np(x).reshape(B, T, H, D)
    rot = q[..., :R]
    swapped = np.empty_like(rot)
    swapped[..., 0::2], swapped[..., 1::2] = -rot[..., 1::2], rot[..., 0::2]
    want = np.concatenate([rot * _np(cos) + swapped * _np(sin), q[..., R:]], -1)
    want = want.transpose(0, 2, 1, 3)
    assert max_rel_error(got[0].reshape(want.shape), want) < 1e-6


@pytest.mark.parametrize("batch_first", [True, False])
def test_multihead_attention_weights_for_a_batch_of_two(batch_first):
    """``need_weights=True`` computes attention with ``bmm`` over batch × heads and
    views the output ``[T, B·H, D]`` as ``[T·B, E]`` for its projection: the output
    and the head-averaged weights match a float64 computation from the module's
    own parameters."""
    torch.manual_seed(0)
    B, T, E, H = 2, 11, 24, 3
    mha = torch.nn.MultiheadAttention(E, H, batch_first=batch_first).eval()

    def f(x):
        return mha(x, x, x, need_weights=True)
    x = torch.randn(B, T, E) if batch_first else torch.randn(T, B, E)
    got, _, _ = run_imported(f, x)
    xb = _np(x) if batch_first else _np(x).transpose(1, 0, 2)         # [B, T, E]
    w_in, b_in = _np(mha.in_proj_weight.detach()), _np(mha.in_proj_bias.detach())
    q, k, v = np.split(xb @ w_in.T + b_in, 3, axis=-1)
    heads = lambda t: t.reshape(B, T, H, E // H).transpose(0, 2, 1, 3)   # noqa: E731
    s = heads(q) @ heads(k).transpose(0, 1, 3, 2) / np.sqrt(E // H)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    o = (p @ heads(v)).transpose(0, 2, 1, 3).reshape(B, T, E)
    o = o @ _np(mha.out_proj.weight.detach()).T + _np(mha.out_proj.bias.detach())
    want_o = o if batch_first else o.transpose(1, 0, 2)
    assert max_rel_error(got[0].reshape(want_o.shape), want_o) < 1e-5
    assert max_rel_error(got[1].reshape(B, T, T), p.mean(1)) < 1e-5


@pytest.mark.parametrize("norm_first,activation", [(False, "relu"), (True, "gelu")])
def test_transformer_encoder_layer_imported_under_no_grad(norm_first, activation):
    """Under ``no_grad`` the layer's inference fast path is one fused ATen operator
    (an import error): the import traces with autograd on, so its operators are
    lowered; checked against the layer in float64 (its slow path)."""
    from helpers_torch import float64_reference
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(24, 3, 40, dropout=0.0, batch_first=True,
                                             norm_first=norm_first,
                                             activation=activation).eval()
    x = torch.randn(2, 11, 24)
    with torch.no_grad():
        got, _, _ = run_imported(layer, x)
    want = float64_reference(layer, x).numpy()
    assert max_rel_error(got[0].reshape(want.shape), want) < 1e-5
