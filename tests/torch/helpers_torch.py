"""Running imported models against PyTorch eager."""

from __future__ import annotations

import numpy as np
import torch

import blockbuster as bb
from blockbuster.frontend.pytorch import lower_module


def run_imported(model, *inputs, fuse=False, backend="reference", blocks=None):
    """(blockbuster outputs reshaped to torch's, eager outputs, the Lowered)."""
    low = lower_module(model, *inputs, blocks=blocks)
    program = bb.fuse(low.program).program if fuse else low.program
    run = bb.compile(program, backend=backend)
    feeds = {b.name: t.detach().numpy().reshape([s for s in b.shape if s != 1])
             for b, t in zip(low.inputs, inputs)}
    out = run(**feeds, **low.weights)
    got = [out[b.name].reshape(b.shape) for b in low.outputs]
    with torch.no_grad():
        ref = model(*inputs)
    ref = [ref] if isinstance(ref, torch.Tensor) else [r for r in ref if r is not None]
    return got, [np.asarray(r.detach().double().numpy()) for r in ref], low


def float64_reference(model, *inputs):
    """The model's output in float64 (the oracle for accuracy comparisons)."""
    m64 = _copy(model).double()
    with torch.no_grad():
        out = m64(*[t.double() for t in inputs])
    return out[0] if isinstance(out, tuple) else out


def _copy(model):
    import copy
    return copy.deepcopy(model)


def max_rel_error(got, want) -> float:
    want = np.asarray(want, dtype=np.float64)
    return float(np.max(np.abs(got - want)) / max(1.0, float(np.max(np.abs(want)))))


def fused_error_vs_float64(model, *inputs) -> float:
    """The fused import's largest error against the model run in float64, relative
    to the output's largest magnitude (first output)."""
    got, _, _ = run_imported(model, *inputs, fuse=True)
    want = float64_reference(model, *inputs).numpy()
    return max_rel_error(got[0].reshape(want.shape), want)
