"""``torch.einsum`` as matmuls over broadcast batch axes, never as
reshapes that merge axes.

PyTorch's own decomposition flattens every group of indices into one axis (all the
contracted indices into one K, all of an operand's free indices into one row or
column axis) and calls ``bmm``. The importer cannot always take those flattened
axes: ``einsum("bhtd,hde->bte", o, w_o)`` (an output projection over per-head
weights) contracts over (d, h) merged with the heads innermost, and a head is
iterated one index at a time while ``d`` is tiled into blocks, so no block of the
merged axis exists. Here each index keeps its own axis instead: one contracted index
is the matmul's K, one free index of each operand its rows and columns, and every
other index a batch axis of the matmul (broadcast where an operand lacks it), the
other contracted ones summed after the product. The FLOPs are the same.
"""

from __future__ import annotations


def decompose_einsum(torch):
    """The decomposition of ``aten.einsum.default``: the equation normalised
    (:func:`_normalise`: an implicit output spelled out, ``...`` as letters, an index
    twice in one operand as a diagonal, an axis of size 1 broadcast), then one operand
    summed and permuted, or operands contracted two at a time, left to right. It never
    hands back to torch's own einsum: that decomposition dispatches to this one again."""
    def einsum(equation, tensors, *, path=None):
        subs, out, tensors = _normalise(torch, equation, list(tensors))
        if len(tensors) == 1:
            return _single(torch, tensors[0], subs[0], out)
        acc, sacc = tensors[0], subs[0]
        for p in range(1, len(tensors)):
            later = "".join(subs[p + 1:])
            keep = out if not later else \
                "".join(i for i in dict.fromkeys(out + sacc + subs[p])
                        if i in later + out and i in sacc + subs[p])
            acc, sacc = _contract(torch, acc, sacc, tensors[p], subs[p], keep), keep
        return acc
    return einsum


def _normalise(torch, equation: str, tensors: list):
    """(each operand's indices, the output's, the operands) of ``equation``, each index
    once per operand and of one size everywhere: an implicit output is ``...`` then
    the indices used once, sorted (torch's rule); ``...`` becomes spare letters; an
    index twice in one operand takes that operand's diagonal; an axis of size 1 is
    expanded to its index's size. ValueError for an equation the operands do not fit."""
    eq = equation.replace(" ", "")
    ins, arrow, out = eq.partition("->")
    subs = ins.split(",")
    if len(subs) != len(tensors):
        raise ValueError(f"einsum {equation!r}: the equation has {len(subs)} operand(s), "
                         f"{len(tensors)} given")
    if not arrow:
        used = "".join(s.replace("...", "") for s in subs)
        out = ("..." if "..." in ins else "") + \
            "".join(sorted(i for i in set(used) if used.count(i) == 1))
    if "..." in ins + out:
        subs, out = _spell_ellipsis(subs, out, tensors)
        if subs is None:
            raise ValueError(f"einsum {equation!r}: '...' does not fit the operands' shapes")
    bad = [i for i in "".join(subs) + out if not i.isalpha()]
    if bad:
        raise ValueError(f"einsum {equation!r}: {bad[0]!r} is not an index letter")
    for n, (s, t) in enumerate(zip(subs, tensors)):
        if len(s) != t.dim():
            raise ValueError(f"einsum {equation!r}: operand {n} has {t.dim()} dimension(s) "
                             f"but {len(s)} indices")
    if len(set(out)) != len(out) or any(i not in "".join(subs) for i in out):
        raise ValueError(f"einsum {equation!r}: each output index must appear once in the "
                         "output and in some operand")
    for n in range(len(tensors)):
        t, s = tensors[n], subs[n]
        while len(set(s)) != len(s):             # an index twice: the diagonal
            i = next(c for c in s if s.count(c) > 1)
            a = s.index(i)
            b = s.index(i, a + 1)
            t = torch.diagonal(t, 0, a, b)       # the diagonal's axis comes last
            s = "".join(c for p, c in enumerate(s) if p not in (a, b)) + i
        tensors[n], subs[n] = t, s
    size = {}
    for s, t in zip(subs, tensors):
        for i, k in zip(s, t.shape):
            if k != 1 and size.setdefault(i, k) != k:
                raise ValueError(f"einsum {equation!r}: index {i!r} has sizes "
                                 f"{size[i]} and {k}")
    for n, (s, t) in enumerate(zip(subs, tensors)):
        want = [size.get(i, 1) for i in s]
        if list(t.shape) != want:                # a size-1 axis broadcast
            tensors[n] = t.expand(want)
    return subs, out, tensors


def _single(torch, t, sub: str, out: str):
    """One operand: the indices not in the output summed, the rest put in its order."""
    gone = [p for p, i in enumerate(sub) if i not in out]
    if gone:
        t = torch.sum(t, dim=gone)
        sub = "".join(i for i in sub if i in out)
    if sub != out:
        return torch.permute(t, [sub.index(i) for i in out])
    return t if gone else torch.clone(t)      # a new tensor, as einsum returns


def _spell_ellipsis(subs: list, out: str, tensors):
    """``...`` written out as letters the equation does not use, aligned from the
    right as broadcasting aligns them; (None, out) where they do not fit."""
    spare = [c for c in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
             if c not in "".join(subs) + out]
    counts = [t.dim() - (len(s) - 3) if "..." in s else 0 for s, t in zip(subs, tensors)]
    n = max(counts)
    if min(counts) < 0 or n > len(spare):
        return None, out
    letters = spare[:n]
    subs = [s.replace("...", "".join(letters[n - k:])) for s, k in zip(subs, counts)]
    return subs, out.replace("...", "".join(letters))


def _sum_unshared(torch, t, sub: str, other: str, out: str):
    """Indices in only this operand and not in the output: summed away first."""
    gone = [p for p, i in enumerate(sub) if i not in other and i not in out]
    if gone:
        t = torch.sum(t, dim=gone)
        sub = "".join(i for i in sub if i in other or i in out)
    return t, sub


def _arrange(torch, t, sub: str, order: list):
    """``t`` with its axes in ``order`` (an index it lacks: a size-1 axis)."""
    present = [i for i in order if i is not None and i in sub]
    if present != list(sub):
        t = torch.permute(t, [sub.index(i) for i in present])
    for p, i in enumerate(order):
        if i is None or i not in sub:
            t = torch.unsqueeze(t, p)
    return t


def _contract(torch, a, sa: str, b, sb: str, out: str):
    a, sa = _sum_unshared(torch, a, sa, sb, out)
    b, sb = _sum_unshared(torch, b, sb, sa, out)
    contracted = [i for i in sa if i in sb and i not in out]
    if not contracted:                      # an outer or element-wise product
        order = list(out)
        return torch.mul(_arrange(torch, a, sa, order), _arrange(torch, b, sb, order))
    k = contracted[-1]                       # a's innermost contracted index: the K
    # rows and columns: each operand's free index that comes last in the output (the
    # output's own matrix axes where it has them), the rest batch axes
    rows = [i for i in out if i in sa and i not in sb]
    cols = [i for i in out if i in sb and i not in sa]
    r = rows[-1] if rows else None
    c = cols[-1] if cols else None
    summed = contracted[:-1]
    lead = [i for i in out if i not in (r, c)] + summed
    prod = torch.matmul(_arrange(torch, a, sa, lead + [r, k]),
                        _arrange(torch, b, sb, lead + [k, c]))
    axes = lead + [r, c]
    if c is None:
        prod = torch.squeeze(prod, -1)
        axes.pop()
    if r is None:
        prod = torch.squeeze(prod, -1 if c is None else -2)
        axes.remove(None)
    if summed:
        prod = torch.sum(prod, dim=[axes.index(i) for i in summed])
        axes = [i for i in axes if i not in summed]
    if axes != list(out):
        prod = torch.permute(prod, [axes.index(i) for i in out])
    return prod
