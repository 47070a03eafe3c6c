"""Growth merges pieces greedily; a last cover over every piece it priced makes the
result no worse than any cover it passed through (seeds, greedy merges), and moves a
seam the seeds placed a kernel off. On the softmax head below, both are needed: the
cheaper cover's first piece ends one kernel after any seam the seeds or merges made."""

from pathlib import Path

import numpy as np

import blockbuster as bb
from blockbuster.backends.reference import run_program
from blockbuster.dsl.loader import default_rules
from blockbuster.select.selection import Selector

HW = bb.cost.DEFAULT_HARDWARE
HEAD = Path(__file__).with_name("softmax_head.bbp")


def _covers(program, monkeypatch):
    """(price of the seed cover, price of greedy growth's cover, the selection)."""
    seen = {}
    grow = Selector._grow

    def recording(self, program, parts, options):
        seen["seeds"] = sum(p.price for p in parts)
        grown = grow(self, program, parts, options)
        seen["greedy"] = sum(p.price for p in grown)
        return grown

    monkeypatch.setattr(Selector, "_grow", recording)
    result = Selector(default_rules(), HW, progress=False).select(program)
    return seen["seeds"], seen["greedy"], result


def test_the_last_cover_is_cheaper_than_greedy_growth(monkeypatch):
    program = bb.parse_program(HEAD.read_text())
    seeds, greedy, result = _covers(program, monkeypatch)
    final = bb.cost(result.program, hardware=HW).objective
    assert final < greedy * (1 - 1e-6)          # greedy merging overshot here
    assert final <= seeds * (1 + 1e-9)
    # Pieces tile the program in order.
    spans = [(p.start, p.stop) for p in result.pieces]
    assert spans[0][0] == 0 and spans[-1][1] == len(program.kernels)
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))


def test_the_chosen_cover_computes_the_head():
    program = bb.parse_program(HEAD.read_text())
    result = bb.fuse(program, progress=False)
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((100, 64)) * 30).astype(np.float32)   # logits ~ ±2e3
    w = rng.standard_normal((64, 300)).astype(np.float32)
    got = run_program(result.program, {"x": x, "w": w})["add_2"]
    logits = x.astype(np.float64) @ w.astype(np.float64)
    m = logits.max(axis=1)
    e = np.exp(logits - m[:, None])
    want = np.log(e.sum(axis=1)) + m - m + (e / e.sum(axis=1)[:, None]).sum(axis=1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6 * np.abs(logits).max())
