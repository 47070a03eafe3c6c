"""Convolutions (``nn.Conv1d``, ``nn.Conv2d``), lowered into the views, slices and
matrix products the importer already has: no block operator of their own.

* A 1x1 convolution of stride 1: a matmul of the weight with each image's
  channels-by-pixels matrix.
* Windows that tile the input (stride = kernel size, no padding: the patch embedding
  of ViT, CLIP's vision tower, SigLIP, DINOv2): the input viewed as patches, each
  channel's patches copied into blocks (:func:`.aten_joins.retiled`) and contracted
  with its kernel, summed over the channels. A 1-D convolution is an image of one
  row.

Overlapping windows (Whisper's ``Conv1d(k=3, padding=1)``, a 3x3 stem), transposed,
grouped (a depthwise ``Conv1d`` of a Mamba or ConvNeXt block) and 3-D convolutions
are import errors (one line; under ``torch.compile`` they stay in PyTorch).
"""

from __future__ import annotations

from ..tensors import reshapes as R
from ..tensors import values as V
from .aten_registry import HANDLERS, handles
from .dims import ImportError_
from .aten_indexing import unaligned_slice
from .aten_joins import retiled


def _call(low, node, target: str, *args):
    """The handler of another operator, on this node (for those that read nothing
    of the node but its name: slices, selections, padding)."""
    return HANDLERS[f"aten.{target}"](low, node, *args)


def _view(low, node, x, shape):
    return R.reshape(low.planner, x, [int(s) for s in shape], node.name)


@handles("convolution.default")
def _convolution(low, node, x, w, bias, stride, padding, dilation, transposed,
                 output_padding, groups):
    spatial = x.rank - 2
    kernel = tuple(int(k) for k in w.shape[2:])
    stride, padding, dilation = (tuple(int(v) for v in t) for t in (stride, padding, dilation))
    what = f"convolution (kernel {list(kernel)}, stride {list(stride)})"
    if transposed:
        raise ImportError_(f"transposed {what}: not supported")
    if groups != 1:
        raise ImportError_(f"{what} with groups={groups}: only groups=1 is supported")
    if spatial not in (1, 2):
        raise ImportError_(f"{what} over {spatial} spatial axes: 1 or 2 are supported")
    if set(kernel) == {1} and set(stride) == {1} and not any(padding):
        return _pointwise(low, node, x, w, bias)
    if stride != kernel or any(padding) or set(dilation) != {1}:
        raise ImportError_(f"{what}, padding {list(padding)}, dilation {list(dilation)}: "
                           f"only windows that tile the input are supported (stride = "
                           f"kernel size, no padding: a patch embedding)")
    if spatial == 1:        # [B, C, L] as an image of one row
        x, w = V.insert_axis(x, 2), V.insert_axis(w, 2)
        out = _patches(low, node, x, w, (1,) + kernel)
        out = V.drop_axis(out, 1, low.planner)
    else:
        out = _patches(low, node, x, w, kernel)
    if bias is not None:                            # out: [B, *spatial, E]
        out = low.k.elementwise("add", [out, bias], node.name)
    return V.permute(out, [0, spatial + 1, *range(1, spatial + 1)])


def _pointwise(low, node, x, w, bias):
    """A 1x1 convolution of stride 1 (a pointwise one: MobileNet, ResNet's bottleneck,
    a channel mixer): per image ``W [E, C] · x [C, H·W]``, in the input's own
    channels-first layout (no patches, no copy)."""
    batch, channels = x.shape[:2]
    spatial = list(x.shape[2:])
    e = w.shape[0]
    pixels = 1
    for n in spatial:
        pixels *= n
    flat = _view(low, node, x, [batch, channels, pixels])
    out = low.k.matmul(_view(low, node, w, [e, channels]), flat, node.name)
    if bias is not None:                            # out: [B, E, H·W]
        out = low.k.elementwise("add", [out, _view(low, node, bias, [e, 1])], node.name)
    return _view(low, node, out, [batch, e, *spatial])


def _contract(low, node, x, w):
    """``x [..., K] · w [E, K]ᵀ``: ``[..., E]``."""
    return low.k.matmul(x, V.permute(w, [1, 0]), node.name)


def _sum(low, node, terms):
    out = terms[0]
    for t in terms[1:]:
        out = low.k.elementwise("add", [out, t], node.name)
    return out


def _patches(low, node, x, w, kernel):
    """Non-overlapping windows: ``[B, C, H, W]`` viewed as ``[B, C, h, kH, w, kW]``
    (a ragged edge, which the convolution drops, sliced off first), each channel's
    patches ``[B, h, w, kH·kW]`` contracted with its kernel: one term per channel
    (an image's 3). Split off the image's columns, the patches of a row are iterated
    one at a time; copied into an axis of their own first, they are the rows of
    blocks of a matmul (and the tokens, flattened, rows of blocks for what follows).
    Patches of one row (a 1-D convolution) are one product over the channels and
    the window together."""
    batch, channels = x.shape[:2]
    counts = [n // k for n, k in zip(x.shape[2:], kernel)]
    for axis, (n, k) in enumerate(zip(counts, kernel), start=2):
        if n == 0:
            raise ImportError_(f"convolution: input axis of {x.shape[axis]} shorter than "
                               f"its kernel {k}")
        if n * k != x.shape[axis] and axis == x.rank - 1:    # off the blocks
            x = unaligned_slice(low, node, x, axis, 0, n * k)
        elif n * k != x.shape[axis]:
            x = _call(low, node, "slice.Tensor", x, axis, 0, n * k)
    shape = [batch, channels]
    for n, k in zip(counts, kernel):
        shape += [n, k]
    x = _view(low, node, x, shape)
    # x: [B, C, n0, k0] or [B, C, n0, k0, n1, k1]; w: [E, C, k0] or [E, C, k0, k1]
    e, width = w.shape[0], kernel[-1]
    rows = kernel[0]
    if rows == 1:                   # one term: [B, n0, n1, C·k1] · [E, C·k1]ᵀ
        xr = V.permute(_call(low, node, "select.int", x, 3, 0), [0, 2, 3, 1, 4])
        xr = _view(low, node, xr, [batch, *counts, channels * width])
        wr = _view(low, node, _call(low, node, "select.int", w, 2, 0), [e, channels * width])
        return _contract(low, node, retiled(low, node, xr, 2), wr)
    terms = []
    for c in range(channels):       # [B, n0, n1, k0·k1] · [E, k0·k1]ᵀ
        xc = V.permute(_call(low, node, "select.int", x, 1, c), [0, 1, 3, 2, 4])
        xc = _view(low, node, xc, [batch, *counts, rows * width])
        wc = _view(low, node, _call(low, node, "select.int", w, 1, c), [e, rows * width])
        terms.append(_contract(low, node, retiled(low, node, xc, 2), wc))
    return _sum(low, node, terms)
