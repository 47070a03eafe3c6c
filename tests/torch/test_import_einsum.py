"""``torch.einsum`` in users' models: attention over per-head weight tensors
(``[E, H, D]`` projections, an ``[H, D, E]`` output projection), weights laid out with
the heads innermost, and the usual two-operand forms. Each checked against float64
eager; the importer's decomposition itself against ``torch.einsum``."""

from __future__ import annotations

import pytest
import torch

from blockbuster.frontend.pytorch.einsum import decompose_einsum
from helpers_torch import fused_error_vs_float64

SIZES = dict(b=2, h=3, t=5, s=7, d=4, e=6, f=9, i=2, j=3, k=4)


@pytest.mark.parametrize("equation", [
    "bhtd,hde->bte", "bte,ehd->bhtd", "bte,edh->bhtd", "bte,ef->btf", "ij,jk->ki",
    "bhtd,bhsd->bhts", "bij,bjk->bik", "ijk,jk->i", "ik,j->ijk", "ij,ij->", "i,i->",
    "b t e , e f -> b f t", "ij,k->i", "...e,ef->...f", "...hd,hde->...e", "b...d,bd->b...", "...d,d->...", "ij,jk,kd->id",
    "bte,ef,bf->bt", "i,j,k->ijk",
    "ii->i", "bij->j", "ij->ji", "bij->bji", "ij->ij", "ij,jk", "kj,ji", "ij", "...ij->...ji",
    "iij->j", "bii,bi->b"])
def test_decomposition_computes_what_torch_einsum_computes(equation):
    ins = equation.replace(" ", "").replace("...", "ts").split("->")[0].split(",")
    torch.manual_seed(0)
    tensors = [torch.randn(*[SIZES[c] if c != "i" or s != "ii" else 3 for c in s])
               for s in ins]
    want = torch.einsum(equation, *tensors)
    got = decompose_einsum(torch)(equation, tensors)
    assert got.shape == want.shape
    assert torch.allclose(got, want, atol=1e-5)


class _PerHeadWeights(torch.nn.Module):
    """Attention written with einsum over per-head weight tensors. ``heads_last``
    stores the projections as ``[E, D, H]``, whose flattened (D, H) columns put the
    heads innermost."""

    def __init__(self, heads_last: bool, e=48, h=4, d=16):
        super().__init__()
        shape = (e, d, h) if heads_last else (e, h, d)
        self.heads_last, self.d = heads_last, d
        self.wq, self.wk, self.wv = (torch.nn.Parameter(torch.randn(*shape) / e ** 0.5)
                                     for _ in range(3))
        self.wo = torch.nn.Parameter(torch.randn(h, d, e) / (h * d) ** 0.5)

    def forward(self, x):
        proj = "bte,edh->bhtd" if self.heads_last else "bte,ehd->bhtd"
        q, k, v = (torch.einsum(proj, x, w) for w in (self.wq, self.wk, self.wv))
        a = torch.softmax(torch.einsum("bhtd,bhsd->bhts", q, k) / self.d ** 0.5, dim=-1)
        return torch.einsum("bhtd,hde->bte", torch.einsum("bhts,bhsd->bhtd", a, v), self.wo)


@pytest.mark.parametrize("heads_last", [False, True])
def test_attention_over_per_head_weight_tensors(heads_last):
    """The output projection contracts over heads and head columns at once; PyTorch's
    decomposition flattens them into one axis with the heads innermost, which no
    block of the tiled head columns can hold (it was an import error)."""
    torch.manual_seed(0)
    model = _PerHeadWeights(heads_last).eval()
    x = torch.randn(2, 37, 48) * 10
    assert fused_error_vs_float64(model, x) < 1e-5


class _Einsum(torch.nn.Module):
    def __init__(self, equation):
        super().__init__()
        self.equation = equation

    def forward(self, *xs):
        return torch.einsum(self.equation, *xs) * 1e3


@pytest.mark.parametrize("equation, shapes", [
    ("bij->j", [(7, 13, 24)]), ("bij->bj", [(7, 13, 24)]), ("ij->ji", [(13, 24)]),
    ("ij,jk", [(13, 24), (24, 7)]), ("bji,bkj", [(3, 13, 24), (3, 7, 13)]),
    ("bij,bjk->bik", [(1, 13, 24), (5, 24, 7)]), ("bij,jk->bik", [(5, 13, 1), (24, 7)])])
def test_forms_torch_leaves_to_its_own_decomposition_import(equation, shapes):
    """One operand, an implicit output and an axis broadcast from size 1: torch's own
    decomposition of these called this importer's again (unbounded recursion)."""
    torch.manual_seed(1)
    xs = [torch.randn(*s) * 100 for s in shapes]
    assert fused_error_vs_float64(_Einsum(equation).eval(), *xs) < 1e-5


def test_an_equation_the_operands_do_not_fit_is_one_clear_error():
    with pytest.raises(ValueError, match="index 'j' has sizes 24 and 5"):
        decompose_einsum(torch)("ij,jk->ik", [torch.randn(13, 24), torch.randn(5, 7)])
