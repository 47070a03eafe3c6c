"""A GraphBuilder program's blocks are chosen for the backend like a workload's, for
the dimensions declared without a block and only where no operator's meaning
depends on the blocks; hand-set blocks and block-dependent views keep the program
as built. Results against NumPy in float64, at sizes that are not multiples of any
block, with large magnitudes."""

from __future__ import annotations

import numpy as np
import pytest

import blockbuster as bb
from blockbuster import cli
from blockbuster.frontend.builder import GraphBuilder
from blockbuster.tuning.origins import origin

M, K, N = 300, 777, 130


def _mlp(blocks: dict | None = None, sizes=(M, K, N), sliced: bool = False):
    blocks = blocks or {}
    g = GraphBuilder("mlp")
    for d, n in zip("MKN", sizes):
        g.dim(d, n, blocks.get(d))
    x, w = g.input("X", "M", "K"), g.weight("W", "K", "N")
    if sliced:
        x = g.slice(x, "M", 0, 128)
    return g.build(g.relu(g.matmul(x, w), name="Y"))


def _arrays():
    rng = np.random.default_rng(0)
    return {"X": (rng.standard_normal((M, K)) * 1e3).astype(np.float32),
            "W": rng.standard_normal((K, N)).astype(np.float32)}


def _want(a):
    return np.maximum(a["X"].astype(np.float64) @ a["W"].astype(np.float64), 0.0)


def _blocks(program) -> dict:
    return {d.name: d.block for d in program.dims}


@pytest.mark.parametrize("fuse_first", [False, True])
def test_blocks_declared_without_a_size_are_chosen_by_compile(fuse_first):
    program = _mlp()
    assert set(origin(program).sizes) == {"M", "K", "N"}
    assert _blocks(program) == {"M": 64, "K": 64, "N": 64}       # the builder's defaults
    target = bb.fuse(program).program if fuse_first else program
    compiled = bb.compile(target, backend="reference", tune="model")
    assert _blocks(compiled.program) != {"M": 64, "K": 64, "N": 64}
    a = _arrays()
    got = compiled(**a)["Y"]
    assert np.abs(got - _want(a)).max() <= 1e-5 * np.abs(_want(a)).max()
    off = bb.compile(target, backend="reference", tune="off")       # off: as built
    assert _blocks(off.program) == {"M": 64, "K": 64, "N": 64}


def test_hand_set_blocks_and_block_dependent_views_keep_the_program_as_built():
    given = _mlp({"M": 32})                    # K and N left free: M is the user's
    assert set(origin(given).sizes) == {"K", "N"}
    tuned = bb.compile(given, backend="reference", tune="model").program
    assert tuned.dim("M").block == 32
    every = _mlp({"M": 32, "K": 64, "N": 64})
    assert origin(every) is None
    assert bb.compile(every, backend="reference", tune="model").program is every
    sliced = _mlp(sizes=(256, 256, 128), sliced=True)   # a slice is whole blocks of M
    assert origin(sliced) is None
    assert bb.compile(sliced, backend="reference", tune="model").program is sliced


def test_run_tunes_a_factory_s_free_blocks_and_keeps_given_ones(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "f.py").write_text(
        "from blockbuster.frontend.builder import GraphBuilder\n"
        "def factory():\n"
        "    g = GraphBuilder('mlp')\n"
        f"    g.dim('M', {M}); g.dim('K', {K}); g.dim('N', {N})\n"
        "    x, w = g.input('X', 'M', 'K'), g.weight('W', 'K', 'N')\n"
        "    return g.build(g.relu(g.matmul(x, w), name='Y'))\n")
    argv = ["run", "f.py:factory", "--backend", "reference", "--tune", "model"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "blocks          tuned " in out and "passed" in out
    assert cli.main(argv + ["--size", "M=100"]) == 0        # resized: still free
    assert "blocks          tuned " in capsys.readouterr().out
    assert cli.main(argv + ["--block", "M=32"]) == 0
    assert "as stated by the program, given M=32 (not tuned)" in capsys.readouterr().out


def _ops():
    """(name, build) of programs over M=40, K=50, N=30 declared without blocks."""
    def x(g):
        return g.input("X", "M", "K")
    return [
        ("layer_norm·W", lambda g: g.matmul(g.layer_norm(x(g), g.weight("ga", "K"),
                                                         g.weight("be", "K"), 1e-5),
                                            g.weight("W", "K", "N"), name="Y")),
        ("log_softmax", lambda g: g.log_softmax(x(g), name="Y")),
        ("col_mean", lambda g: (lambda t: g.sub(t, g.col_mean(t), name="Y"))(x(g))),
        ("softmaxᵀ·V", lambda g: g.matmul(g.softmax(x(g)), g.input("V", "M", "N"),
                                          transpose_a=True, name="Y")),
        ("linear+bias", lambda g: g.linear(x(g), g.weight("W", "N", "K"),
                                           g.weight("b", "N"), name="Y")),
    ]


@pytest.mark.parametrize("name,make", _ops(), ids=[n for n, _ in _ops()])
def test_every_re_blocking_a_tuner_may_take_computes_the_same(name, make):
    """The tuner's candidates are the program at other blocks: each one it can derive
    (ragged and single-block cases alike) computes what the program computes."""
    from blockbuster.validate import random_inputs
    g = GraphBuilder("p")
    g.dim("M", 40), g.dim("K", 50), g.dim("N", 30)
    program = g.build(make(g))
    arrays = {n: v * 1e3 for n, v in random_inputs(program, seed=1).items()}
    want = bb.compile(program, backend="reference", dtype=np.float64, tune="off")(**arrays)
    derived = 0
    for blocks in ({"M": 7, "K": 8, "N": 5}, {"M": 16, "K": 25, "N": 30},
                   {"M": 40, "K": 50, "N": 30}):
        try:
            other = origin(program).derive(blocks)
        except bb.IRError:              # an assignment the verifier refuses
            continue
        derived += 1
        got = bb.compile(other, backend="reference", dtype=np.float64, tune="off")(**arrays)
        for out, value in want.items():
            assert np.abs(got[out] - value).max() <= 1e-9 * np.abs(value).max(), (blocks, out)
    assert derived >= 2
