"""Has a compiled region's constant input changed since it was compiled?

A region reads its parameters and buffers when it is compiled (its weight
preparation runs once, a backend keeps packed copies) and checks them on every
call. PyTorch bumps a tensor's version counter on every write in place, and a new
tensor set with ``p.data = t`` has another storage; but some writes move neither:
through ``p.data`` (``p.data.mul_(0.5)``), and the fused and foreach optimizer
steps (``torch.optim.Adam(..., fused=True)``: the compiled module kept computing
with the weights of before the step). So a stamp also holds

* the count of optimizer steps that held the tensor: a post-step hook on every
  ``torch.optim`` optimizer (registered with the first stamp) counts them, so any
  step is seen, one that changed a single row of an embedding table too;
* a sample of the tensor's values, ``SAMPLES`` elements spread evenly through it,
  compared byte for byte on every call (NaN equals NaN; about a microsecond per
  tensor): a write through ``p.data`` that changes the weights changes the sample.
  A write of a few elements through ``p.data`` can fall between the samples.
"""

from __future__ import annotations

#: Elements sampled per tensor.
SAMPLES = 16

#: The attribute an optimizer step counts on each tensor it holds.
STEPS = "_blockbuster_optimizer_steps"
_HOOKED = [False]


def _count_steps(optimizer, args, kwargs) -> None:
    for group in optimizer.param_groups:
        for p in group["params"]:
            setattr(p, STEPS, getattr(p, STEPS, 0) + 1)


def _hook_optimizers() -> None:
    if _HOOKED[0]:
        return
    from torch.optim.optimizer import register_optimizer_step_post_hook
    register_optimizer_step_post_hook(_count_steps)
    _HOOKED[0] = True


class Stamp:
    """One constant input: its identity, version, storage and a sample of its
    values; a tensor that is not a parameter (computed outside the region from
    constants only: position ids, a mask; a new tensor on every call) by all its
    values."""

    def __init__(self, t):
        import torch
        _hook_optimizers()
        self.ident, self.version, self.storage = id(t), t._version, t.data_ptr()
        self.steps = getattr(t, STEPS, 0)
        self.values = None if isinstance(t, torch.nn.Parameter) else t.detach().clone()
        n = t.numel()
        self.index = torch.linspace(0, max(n - 1, 0), min(n, SAMPLES)).round().long()
        self.flat = _flat_view(t)      # NumPy reads the sample ~4x faster than take
        self.flat_index = self.index.numpy()
        self.sample = self._sample(t)

    def matches(self, t) -> bool:
        import torch
        if not isinstance(t, torch.Tensor):
            return False
        if id(t) == self.ident and t._version == self.version and \
                t.data_ptr() == self.storage and getattr(t, STEPS, 0) == self.steps:
            return self._sample(t) == self.sample
        v = self.values
        return (v is not None and t.shape == v.shape and t.dtype == v.dtype
                and bool(torch.equal(t, v)))

    def _sample(self, t) -> bytes:
        if self.flat is not None:
            return self.flat[self.flat_index].tobytes()
        import torch
        picked = torch.take(t.detach(), self.index.to(t.device)).cpu().contiguous()
        return picked.view(torch.uint8).numpy().tobytes()


def _flat_view(t):
    """A 1-D NumPy view of ``t``'s elements (None where there is none: not on the
    CPU, not contiguous, a dtype NumPy lacks)."""
    if t.device.type != "cpu" or not t.is_contiguous():
        return None
    try:
        return t.detach().numpy().reshape(-1)
    except (TypeError, RuntimeError):
        return None
