"""Convolutions whose windows tile the input (patch embeddings), and concatenations
the block-aligned ``cat`` cannot do (a class token before the patches), against
the float64 model: sizes off the blocks, large magnitudes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from blockbuster.frontend.pytorch import ImportError_

from helpers_torch import float64_reference, max_rel_error, run_imported


class PatchEmbedding(torch.nn.Module):
    """ViT's patch embedding, then its class token and position embeddings."""

    def __init__(self, channels, width, patch, tokens=None):
        super().__init__()
        self.conv = torch.nn.Conv2d(channels, width, patch, stride=patch)
        self.cls = torch.nn.Parameter(torch.randn(1, 1, width)) if tokens else None
        self.pos = torch.nn.Parameter(torch.randn(1, tokens, width)) if tokens else None

    def forward(self, x):
        t = self.conv(x).flatten(2).transpose(1, 2)
        if self.cls is None:
            return t
        t = torch.cat([self.cls.expand(x.shape[0], -1, -1), t], dim=1)
        return t + self.pos


def _close(model, x, bound=2e-5):
    torch.manual_seed(0)
    got, _, _ = run_imported(model.eval(), x)
    want = float64_reference(model, x).numpy()
    assert got[0].size == want.size
    assert max_rel_error(got[0].reshape(want.shape), want) < bound


@pytest.mark.parametrize("channels,size", [(3, (32, 48)), (16, (12, 20)), (1, (24, 16))])
def test_patch_embedding(channels, size):
    torch.manual_seed(0)
    model = PatchEmbedding(channels, 40, 4 if channels == 16 else 8)
    _close(model, torch.randn(2, channels, *size) * 1e3)


def test_patch_embedding_of_an_image_off_the_patches():
    """35 x 50 in 8 x 8 patches: the convolution drops the ragged edge."""
    torch.manual_seed(0)
    _close(PatchEmbedding(3, 24, 8), torch.randn(2, 3, 35, 50) * 50)


@pytest.mark.parametrize("channels", [5, 12])
def test_1d_convolution_in_non_overlapping_windows(channels):
    torch.manual_seed(0)
    _close(torch.nn.Conv1d(channels, 24, 4, stride=4), torch.randn(3, channels, 42) * 1e2)


def test_class_token_before_the_patches_then_positions():
    """``cat([cls.expand(B, 1, E), patches], 1)``: a broadcast piece of one token
    (the block-aligned ``cat`` would need blocks of one row): placed instead."""
    torch.manual_seed(0)
    _close(PatchEmbedding(3, 32, 8, tokens=1 + 4 * 6), torch.randn(2, 3, 32, 48) * 1e2)


def test_a_placed_token_keeps_an_infinity_in_its_place():
    """The one-token piece is placed by a ``where``, not a product with a 0/1 mask:
    an infinite element of it does not turn the other tokens' values into NaN."""
    class Prepend(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.first = torch.nn.Parameter(torch.randn(1, 1, 16))

        def forward(self, x):
            return torch.cat([self.first.expand(x.shape[0], 1, 16), x], dim=1)

    torch.manual_seed(0)
    model = Prepend().eval()
    with torch.no_grad():
        model.first[0, 0, 3] = float("inf")
    x = torch.randn(2, 21, 16) * 1e3
    got, _, _ = run_imported(model, x)
    out = got[0].reshape(2, 22, 16)
    want = model(x).detach().numpy()
    assert np.isposinf(out[:, 0, 3]).all()
    finite = np.isfinite(want)
    assert finite.sum() == want.size - 2 and np.isfinite(out[finite]).all()
    assert max_rel_error(out[finite], want[finite]) < 1e-6


def test_padding_by_one_element_on_the_last_axis():
    torch.manual_seed(0)
    model = torch.nn.ConstantPad1d((1, 2), 0.5)
    _close(model, torch.randn(3, 5, 19) * 1e3)


@pytest.mark.parametrize("tokens", [1, 37])
def test_padding_the_features_of_one_token(tokens):
    """``F.pad`` of the features of a one-token sequence (a decoding step): the pad's
    constant broadcasts over the token axis the input stores, and the concatenation
    refused the mix ("a broadcast axis in one piece only")."""
    torch.manual_seed(0)

    class Shift(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(37, 37), torch.nn.Linear(37, 37)

        def forward(self, x):
            return self.b(torch.nn.functional.pad(self.a(x), (3, 0))[..., :37])
    _close(Shift().eval(), torch.randn(2, tokens, 37) * 1e3)


@pytest.mark.parametrize("conv,why", [
    (torch.nn.Conv1d(8, 8, 3, padding=1), "only windows that tile the input"),
    (torch.nn.Conv2d(4, 8, 3, stride=2), "only windows that tile the input"),
    (torch.nn.Conv1d(8, 8, 4, stride=4, groups=8), "only groups=1"),
])
def test_other_convolutions_are_one_line_import_errors(conv, why):
    x = torch.randn(2, conv.in_channels, *([16] * (conv.weight.dim() - 2)))
    with pytest.raises(ImportError_) as err:
        run_imported(conv.eval(), x)
    message = str(err.value)
    assert why in message and "\n" not in message and "convolution" in message


def test_a_key_value_cache_grown_by_one_token_then_attention():
    """``cat([past, new], 2)`` of ``[B, H, S, D]`` and one new token ``[B, H, 1, D]``
    (a decoding step): the new token is placed, the attention reads all S + 1."""
    def step(past, new, q):
        k = torch.cat([past, new], 2)
        return torch.nn.functional.scaled_dot_product_attention(q, k, k * 0.5)

    torch.manual_seed(0)
    past, new, q = torch.randn(2, 2, 9, 16) * 3, torch.randn(2, 2, 1, 16) * 3, torch.randn(2, 2, 1, 16)
    got, _, _ = run_imported(step, past, new, q)
    want = step(past.double(), new.double(), q.double()).numpy()
    assert max_rel_error(got[0].reshape(want.shape), want) < 2e-5


class _Pointwise(torch.nn.Module):
    """A 1x1 convolution, ReLU, global average pooling, a classifier (the head of a
    small CNN)."""

    def __init__(self, conv, pool_axes):
        super().__init__()
        self.conv, self.pool_axes = conv, pool_axes
        self.fc = torch.nn.Linear(conv.out_channels, 10)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).mean(self.pool_axes))


@pytest.mark.parametrize("conv,shape,pool", [
    (torch.nn.Conv2d(16, 24, 1), (2, 16, 5, 5), (2, 3)),
    (torch.nn.Conv2d(16, 24, 1, bias=False), (1, 16, 7, 3), (2, 3)),
    (torch.nn.Conv1d(16, 24, 1), (3, 16, 11), -1),
])
def test_a_pointwise_convolution(conv, shape, pool):
    """1x1, stride 1: a matmul per image in channels-first layout (it was refused,
    "a matrix axis of 16 is also a batch axis")."""
    torch.manual_seed(0)
    _close(_Pointwise(conv, pool), torch.randn(*shape) * 100)
