"""A binder never shadows a variable bound around it (issue 15, item 1).

``matmul(X[N, M], W[M, M])`` used to name the output column loop and the
contraction both ``m``: ``sum(m in M: dot(X[n, m], W[m, m]))`` read the diagonal
block of W, silently. The builder now names binders freshly, the verifier rejects
shadowing text, and fusion (whose steps may shadow while rules match reductions by
name) hands back programs without it. Checked against NumPy float64.
"""

import textwrap

import numpy as np
import pytest

import blockbuster as bb
from blockbuster.errors import IRError
from blockbuster.frontend.builder import GraphBuilder
from blockbuster.ir.verify import verify
from blockbuster.rewrite.actions import find_hold, find_hold_accumulators, find_inline
from blockbuster.rewrite.subst import unshadow_program

# (rows, width, block): ragged (10 rows, 7 columns in blocks of 4) and whole blocks.
SIZES = [pytest.param(10, 7, 4, id="ragged"), pytest.param(8, 8, 4, id="whole-blocks")]


def _rng_inputs(shapes, seed=3):
    rng = np.random.default_rng(seed)
    return {k: (rng.standard_normal(s) * 30).astype(np.float32) for k, s in shapes.items()}


def _assert_matches(got, want64, scale):
    # float32 matmuls of |x| ~ 30 over <= 8 terms: a few ulps of the term magnitude
    np.testing.assert_allclose(got, want64, rtol=0, atol=1e-5 * scale)


def _binders(program):
    for k in program.kernels:
        for s in k.stores:
            for n in s.value.walk():
                if n.op in ("reduce", "map"):
                    yield k, n


@pytest.mark.parametrize("fused", [False, True], ids=["unfused", "fused"])
@pytest.mark.parametrize("rows,width,block", SIZES)
def test_square_matmul_and_chained_projections(backend, fused, rows, width, block):
    """X[N,E]·Wq[E,E], its transpose-weight form, and a second E×E projection."""
    g = GraphBuilder("proj")
    g.dim("N", rows, block)
    g.dim("E", width, block)
    x, wq, wo = g.input("X", "N", "E"), g.weight("Wq", "E", "E"), g.weight("Wo", "E", "E")
    q = g.matmul(x, wq)
    qt = g.matmul(x, wq, transpose_b=True)
    o = g.matmul(g.unary("tanh", q), wo)
    program = g.build(q, qt, o)
    assert "m2" not in bb.format_program(program)   # dims named N, E: loops n, e; sum e2
    assert "sum(e2 in E: dot(X[n, e2], Wq[e2, e]))" in bb.format_program(program)
    if fused:
        program = bb.fuse(program).program
    verify(program)
    ins = _rng_inputs({"X": (rows, width), "Wq": (width, width), "Wo": (width, width)})
    out = bb.compile(program, backend)(**ins)
    X, Wq, Wo = (ins[k].astype(np.float64) for k in ("X", "Wq", "Wo"))
    _assert_matches(out[q.name], X @ Wq, 900 * width)
    _assert_matches(out[qt.name], X @ Wq.T, 900 * width)
    _assert_matches(out[o.name], np.tanh(X @ Wq) @ Wo, 30 * width)


@pytest.mark.parametrize("rows,width,block", SIZES)
def test_square_row_and_column_reductions(backend, rows, width, block):
    """A row sum of a square matrix reduces over a fresh binder too."""
    g = GraphBuilder("sq")
    g.dim("M", width, block)
    x = g.input("X", "M", "M")
    r, c, s = g.row_reduce("sum", x), g.col_reduce("max", x), g.softmax(x)
    program = g.build(r, c, s)
    ins = {"X": _rng_inputs({"X": (width, width)})["X"] / 30}   # moderate logits
    X = ins["X"].astype(np.float64)
    e = np.exp(X - X.max(axis=1, keepdims=True))
    for prog in (program, bb.fuse(program).program):
        out = bb.compile(prog, backend)(**ins)
        np.testing.assert_allclose(out[r.name], X.sum(axis=1), atol=1e-5 * width)
        np.testing.assert_array_equal(out[c.name], X.max(axis=0))
        np.testing.assert_allclose(out[s.name], e / e.sum(axis=1, keepdims=True), atol=1e-6)


@pytest.mark.parametrize("rows,width,block", SIZES)
def test_norms_of_a_square_matrix_scale_columns(backend, rows, width, block):
    """LayerNorm/RMSNorm gains are per column, also for X[E, E] (the builder used to
    broadcast them along the rows, the first matching dimension)."""
    g = GraphBuilder("norms")
    g.dim("E", width, block)
    x = g.input("X", "E", "E")
    gamma, beta = g.weight("gamma", "E"), g.weight("beta", "E")
    ln, rms = g.layer_norm(x, gamma, beta, 1e-5), g.rms_norm(x, gamma, 1e-6)
    program = g.build(ln, rms)
    ins = _rng_inputs({"X": (width, width), "gamma": (width,), "beta": (width,)})
    X, G, B = (ins[k].astype(np.float64) for k in ("X", "gamma", "beta"))
    c = X - X.mean(axis=1, keepdims=True)
    want_ln = c / np.sqrt((c * c).mean(axis=1, keepdims=True) + 1e-5) * G + B
    want_rms = X / np.sqrt((X * X).mean(axis=1, keepdims=True) + 1e-6) * G
    for prog in (program, bb.fuse(program).program):
        out = bb.compile(prog, backend)(**ins)
        np.testing.assert_allclose(out[ln.name], want_ln, rtol=0, atol=1e-5 * 60)
        np.testing.assert_allclose(out[rms.name], want_rms, rtol=0, atol=1e-5 * 60)


def test_binary_along_names_the_broadcast_axis():
    g = GraphBuilder("b")
    g.dim("E", 5, 2)
    x, v = g.input("X", "E", "E"), g.input("v", "E")
    rows, cols = g.binary("mul", x, v), g.binary("mul", x, v, along="cols")
    text = bb.format_program(g.build(rows, cols))
    assert "rowscale(v[e], X[e, e2])" in text and "colscale(v[e2], X[e, e2])" in text
    with pytest.raises(bb.UsageError, match="along must be 'rows' or 'cols'"):
        g.binary("mul", x, v, along="diagonal")


SHADOWING = """
program sq
dim N = 10 block 4
dim M = 7 block 4
input X[N, M]
weight W[M, M]
output Y[N, M]
kernel k_matmul for n in N, m in M:
  Y[n, m] = sum(m in M: dot(X[n, m], W[m, m]))
"""


def test_verifier_rejects_a_binder_shadowing_a_loop_variable():
    with pytest.raises(IRError) as err:
        bb.parse_program(SHADOWING)
    message = str(err.value)
    assert "kernel 'k_matmul'" in message and "sum(m in M: dot(X[n, m], W[m, m]))" in message
    assert "shadows the enclosing loop variable 'm'" in message
    assert "\n" not in message


def test_verifier_rejects_a_binder_shadowing_another_binder():
    # (Adding W's row blocks together needs M in blocks of equal extent: 8, not 7.)
    text = SHADOWING.replace("sum(m in M: dot(X[n, m], W[m, m]))",
                             "sum(k in M: dot(X[n, k], sum(k in M: W[k, m])))").replace(
        "dim M = 7 block 4", "dim M = 8 block 4")
    with pytest.raises(IRError, match=r"'k' in `sum\(k in M: W\[k, m\]\)` shadows the "
                                      r"enclosing binder 'k'"):
        bb.parse_program(text)
    fixed = text.replace("sum(k in M: W[k, m])", "sum(k2 in M: W[k2, m])")
    assert bb.parse_program(fixed).name == "sq"


CAPTURE = """
program cap
dim M = 10 block 4
input X[M, M]
output c[M, M]
array r[M]
kernel r for i in M:
  r[i] = sum(j in M: rowsum(X[i, j]))
kernel c for j in M, i in M:
  c[j, i] = rowshift(r[j], X[j, i])
"""


def _want_capture(x):
    return x + x.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("consumer_loops", ["j, i", "i2, i"], ids=["capture", "shadow"])
def test_inline_is_capture_avoiding_and_the_result_is_unshadowed(consumer_loops):
    """Inlining r[j] where r's binder is j must rename it (capture); inlining r[i2]
    puts ``sum(i ...)`` under the loop i (shadowing, legal while rewriting):
    ``unshadow_program`` renames it without changing a number."""
    a, b = consumer_loops.split(", ")
    text = CAPTURE.replace("for j in M, i in M", f"for {a} in M, {b} in M") \
                  .replace("c[j, i] = rowshift(r[j], X[j, i])",
                           f"c[{a}, {b}] = rowshift(r[{a}], X[{a}, {b}])")
    program = bb.parse_program(textwrap.dedent(text))
    x = _rng_inputs({"X": (10, 10)})["X"]
    want = _want_capture(x.astype(np.float64))
    (app,) = [app for app in find_inline(program) if app.kernel == "c"]
    inlined = verify(app.build(), allow_shadowing=True)
    clean = verify(unshadow_program(inlined))
    assert list(_binders(clean))
    for prog in (inlined, clean):
        got = bb.compile(prog, "reference")(X=x)["c"]
        np.testing.assert_allclose(got, want, atol=1e-4 * 300)
    if consumer_loops == "shadow":
        with pytest.raises(IRError, match="shadows the enclosing loop variable 'i'"):
            verify(inlined)


def test_fusion_steps_with_held_rows_and_accumulators_keep_every_number(backend):
    """A SwiGLU block with square weights fused with a reference re-run after every
    step (``verify_steps``): a capturing inline/hold/hold_accumulators would change the outputs."""
    g = GraphBuilder("ffn")
    g.dim("M", 6, 4)
    g.dim("E", 10, 4)
    x = g.input("X", "M", "E")
    w1, w3, w2 = (g.weight(n, "E", "E") for n in ("W1", "W3", "W2"))
    h = g.rms_norm(x, g.weight("g", "E"), 1e-6)
    y = g.matmul(g.binary("mul", g.unary("silu", g.matmul(h, w1)), g.matmul(h, w3)), w2)
    program = g.build(y)
    result = bb.fuse(program, verify_steps=True)
    assert "hold_output_row" in {s.rule for s in result.trace}
    fused = verify(result.program)
    assert all(n.attr.var not in k.loop_vars for k, n in _binders(fused))
    ins = _rng_inputs({"X": (6, 10), "W1": (10, 10), "W3": (10, 10), "W2": (10, 10),
                       "g": (10,)}, seed=5)
    ins = {k: v / 30 for k, v in ins.items()}
    X, W1, W3, W2, gg = (ins[k].astype(np.float64) for k in ("X", "W1", "W3", "W2", "g"))
    hh = X / np.sqrt(np.mean(X * X, axis=1, keepdims=True) + 1e-6) * gg
    a = hh @ W1
    want = (a / (1 + np.exp(-a)) * (hh @ W3)) @ W2
    got = bb.compile(fused, backend)(**ins)[y.name]
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-5 * np.abs(want).max())


def test_holding_accumulators_of_a_held_row_keeps_every_number():
    """``hold_accumulators`` nests ``map(e ...)`` inside the held ``map(e ...)`` (a
    legal shadow while rewriting): every application, unshadowed, computes the same."""
    g = GraphBuilder("held_accumulators")
    g.dim("M", 5, 4)
    g.dim("E", 10, 4)
    x = g.input("X", "M", "E")
    w1, w2 = g.weight("W1", "E", "E"), g.weight("W2", "E", "E")
    y = g.matmul(g.unary("silu", g.matmul(g.rms_norm(x, g.weight("g", "E"), 1e-6), w1)), w2)
    result = bb.fuse(g.build(y))
    # every state of the run with a row held (as the soundness check does)
    held = [unshadow_program(verify(app.build(), allow_shadowing=True))
            for s in result.trace for app in find_hold(s.program_after)]
    ins = {k: v / 30 for k, v in _rng_inputs({"X": (5, 10), "W1": (10, 10), "W2": (10, 10),
                                              "g": (10,)}, seed=8).items()}
    tried = 0
    for state in held:
        want = bb.compile(state, "reference")(**ins)[y.name]
        for app in find_hold_accumulators(state):
            after = verify(unshadow_program(verify(app.build(), allow_shadowing=True)))
            got = bb.compile(after, "reference")(**ins)[y.name]
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
            tried += 1
    assert tried
