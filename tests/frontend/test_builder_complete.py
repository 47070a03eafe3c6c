"""The builder writes real models by hand: leading (batch, head) dimensions, plain and
grouped multi-head attention from split/merge heads, slices and concatenation
(rotary written by hand, a fused q/k/v projection), ``where`` with comparisons, and a
``name=`` on every composite. Each against NumPy float64 written from the math, on
ragged sizes (37 rows in blocks of 16, 40 columns in blocks of 16) and large
magnitudes; the whole decoder-style program once fused and run on Numba."""

import importlib.util
import math

import numpy as np
import pytest

import blockbuster as bb
from blockbuster.errors import IRError, UsageError
from blockbuster.frontend.builder import GraphBuilder

B, T, E = 2, 37, 40          # batch, sequence (ragged in blocks of 16), width (ragged)
H, G, HD = 4, 2, 8           # query heads, key/value heads, head size (2 blocks of 4)


# --- float64 oracles, from the math -----------------------------------------------------

def layer_norm(x, g, b, eps):
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps) * g + b


def softmax(s):
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def heads(x, n):                                  # [B, T, n·HD] -> [B, n, T, HD]
    return x.reshape(x.shape[0], x.shape[1], n, -1).transpose(0, 2, 1, 3)


def merged(o):                                    # [B, H, T, HD] -> [B, T, H·HD]
    return o.transpose(0, 2, 1, 3).reshape(o.shape[0], o.shape[2], -1)


def attention(q, k, v, causal):
    k = np.repeat(k, q.shape[1] // k.shape[1], axis=1)   # GQA: head h reads h // group
    v = np.repeat(v, q.shape[1] // v.shape[1], axis=1)
    s = q @ k.swapaxes(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], dtype=bool)), s, -np.inf)
    return softmax(s) @ v


def rotary(x, cos, sin):
    half = x.shape[-1] // 2
    return x * cos + np.concatenate([-x[..., half:], x[..., :half]], -1) * sin


def leaky(y):
    return np.where(y > 0.0, y, 0.1 * y)


# --- programs ------------------------------------------------------------------------------

def builder() -> GraphBuilder:
    g = GraphBuilder("complete")
    g.point_dim("B", B)
    g.dim("T", T, 16)
    g.dim("E", E, 16)
    return g


def heads_dims(g: GraphBuilder, block: int) -> None:
    g.point_dim("H", H)
    g.point_dim("G", G)
    g.dim("QD", H * HD, block)       # query columns: head h = its blocks
    g.dim("KD", G * HD, block)
    g.dim("HD", HD, block)


def rotate(g, x, cos, sin):
    """Rotary embeddings by hand: halves of each head sliced, concatenated back."""
    x1, x2 = g.slice(x, "HD", 0, HD // 2, dim="HALF"), g.slice(x, "HD", HD // 2, HD, dim="HALF")
    return g.add(g.mul(x, cos), g.mul(g.concat([g.neg(x2), x1], "HD"), sin))


def decoder(norm: bool = True, rope: bool = True):
    """LayerNorm over [B, T, E] (``norm``); a fused q/k/v projection split into q, k
    and v; rotary by hand (``rope``); GQA attention; heads merged into the output
    projection; a residual and a leaky ReLU written with ``where`` and a comparison."""
    g = builder()
    heads_dims(g, HD // 2)
    g.dim("QKV", (H + 2 * G) * HD, HD // 2)
    x = g.input("X", "B", "T", "E")
    gamma, beta = g.weight("gamma", "E"), g.weight("beta", "E")
    wqkv, wo = g.weight("Wqkv", "E", "QKV"), g.weight("Wo", "QD", "E")
    cos, sin = (g.weight("cos", "T", "HD"), g.weight("sin", "T", "HD")) if rope else (0, 0)
    h = g.layer_norm(x, gamma, beta, 1e-5, name="LN") if norm else x
    q, k, v = g.split(g.matmul(h, wqkv), "QKV", [H * HD, G * HD, G * HD],
                      dims=["QD", "KD", "KD"])
    q, k = g.split_heads(q, "H", "HD"), g.split_heads(k, "G", "HD")
    if rope:
        q, k = rotate(g, q, cos, sin), rotate(g, k, cos, sin)
    o = g.attention(q, k, g.split_heads(v, "G", "HD"), causal=True, name="ATT")
    y = g.add(x, g.matmul(g.merge_heads(o, "QD"), wo))
    return g.build(g.where(g.gt(y, 0.0), y, g.mul(y, 0.1), name="Y"))


def decoder_oracle(a, norm=True, rope=True):
    h = layer_norm(a["X"], a["gamma"], a["beta"], 1e-5) if norm else a["X"]
    qkv = h @ a["Wqkv"]
    q, k, v = np.split(qkv, [H * HD, (H + G) * HD], axis=-1)
    q, k = heads(q, H), heads(k, G)
    if rope:
        q, k = rotary(q, a["cos"], a["sin"]), rotary(k, a["cos"], a["sin"])
    o = attention(q, k, heads(v, G), True)
    return leaky(a["X"] + merged(o) @ a["Wo"])


def decoder_inputs(seed=0, mean=1e3):
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 30.0, (B, T, E)) + mean                # rows with mean 1e3
    pos = np.arange(T)[:, None] / 10.0 ** (np.arange(HD // 2) / (HD // 2))[None, :]
    arrays = {"X": x, "gamma": rng.normal(1, 0.2, E), "beta": rng.normal(0, 0.2, E),
              "Wqkv": rng.normal(0, 1.5, (E, (H + 2 * G) * HD)),
              "Wo": rng.normal(0, 0.3, (H * HD, E)),
              "cos": np.cos(np.concatenate([pos, pos], 1)),
              "sin": np.sin(np.concatenate([pos, pos], 1))}
    return {n: np.float32(a).astype(np.float64) for n, a in arrays.items()}


def close(got, exact, rel=2e-5):
    """float32 results against the float64 oracle, relative to the largest value."""
    assert got.shape == exact.shape
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, exact, rtol=0, atol=rel * np.abs(exact).max())


# --- tests ---------------------------------------------------------------------------------

def test_batched_layer_norm_and_matmul_with_large_row_means():
    g = builder()
    g.dim("F", 21, 8)
    x = g.input("X", "B", "T", "E")
    gamma, beta, w = g.weight("gamma", "E"), g.weight("beta", "E"), g.weight("W", "E", "F")
    y = g.matmul(g.layer_norm(x, gamma, beta, 1e-5), w, name="Y")
    p = g.build(y)
    assert p.array("Y").dims == ("B", "T", "F")
    rng = np.random.default_rng(1)
    a = {"X": rng.normal(0, 2.0, (B, T, E)) + 1e3, "gamma": rng.normal(1, 0.1, E),
         "beta": rng.normal(0, 0.1, E), "W": rng.normal(0, 1.0, (E, 21))}
    exact = layer_norm(a["X"], a["gamma"], a["beta"], 1e-5) @ a["W"]
    close(bb.compile(p)(**a)["Y"], exact, 1e-4)        # centring 1e3-mean rows in float32
    close(bb.compile(bb.fuse(p).program)(**a)["Y"], exact, 1e-4)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_multi_head_attention_from_split_and_merged_heads(causal):
    g = builder()
    heads_dims(g, HD)                                  # one block per head
    x = g.input("X", "B", "T", "E")
    wq, wk, wv = (g.weight(n, "E", "QD") for n in ("Wq", "Wk", "Wv"))
    wo = g.weight("Wo", "QD", "E")
    q, k, v = (g.split_heads(g.matmul(x, w), "H", "HD") for w in (wq, wk, wv))
    o = g.attention(q, k, v, causal=causal)
    p = g.build(g.matmul(g.merge_heads(o, "QD"), wo, name="Y"))
    rng = np.random.default_rng(2)
    a = {"X": rng.normal(0, 1.0, (B, T, E)),
         **{n: rng.normal(0, 1.5, (E, H * HD)) for n in ("Wq", "Wk", "Wv")},
         "Wo": rng.normal(0, 0.3, (H * HD, E))}        # scores up to ~1e3: peaky softmax
    o = attention(heads(a["X"] @ a["Wq"], H), heads(a["X"] @ a["Wk"], H),
                  heads(a["X"] @ a["Wv"], H), causal)
    exact = merged(o) @ a["Wo"]
    close(bb.compile(p)(**a)["Y"], exact)
    fused = bb.fuse(p).program
    close(bb.compile(fused)(**a)["Y"], exact)
    # views are free: no kernel copies heads, and fusion removes the T×T arrays
    assert len(p.kernels) == 3 + 8 + causal + 1        # q, k, v; attention; output
    big = {a.name for a in fused.arrays if a.dims.count("T") == 2}
    assert not big & {s.array for k in fused.kernels for s in k.stores}


def test_grouped_query_attention_shares_key_value_heads():
    g = builder()
    heads_dims(g, HD)
    x = g.input("X", "B", "T", "E")
    wq, wk, wv = g.weight("Wq", "E", "QD"), g.weight("Wk", "E", "KD"), g.weight("Wv", "E", "KD")
    q = g.split_heads(g.matmul(x, wq), "H", "HD")
    k = g.split_heads(g.matmul(x, wk), "G", "HD")
    v = g.split_heads(g.matmul(x, wv), "G", "HD")
    p = g.build(g.attention(q, k, v, causal=True, scale=0.5, name="O"))
    assert p.array("O").dims == ("B", "H", "T", "HD")
    rng = np.random.default_rng(3)
    a = {"X": rng.normal(0, 1.0, (B, T, E)), "Wq": rng.normal(0, 1.0, (E, H * HD)),
         "Wk": rng.normal(0, 1.0, (E, G * HD)), "Wv": rng.normal(0, 1e2, (E, G * HD))}
    q, k = heads(a["X"] @ a["Wq"], H), heads(a["X"] @ a["Wk"], G)
    exact = attention(q * 0.5 * math.sqrt(HD), k, heads(a["X"] @ a["Wv"], G), True)
    close(bb.compile(p)(**a)["O"], exact)


def test_attention_without_heads_with_an_additive_mask_and_large_logits():
    g = builder()
    g.dim("S", 29, 16)
    q, k, v = g.input("Q", "B", "T", "E"), g.input("K", "B", "S", "E"), g.input("V", "B", "S", "E")
    with pytest.raises(IRError):                       # causal, keys of another length
        g.attention(q, k, v, causal=True)
    mask = g.input("M", "T", "S")                     # the same for every batch
    p = g.build(g.attention(q, k, v, mask=mask, scale=1.0, name="O"))
    rng = np.random.default_rng(8)
    m = np.where(rng.random((T, 29)) < 0.4, -1e4, 0.0)
    m[:, 0] = 0.0                                      # every query sees a key
    a = {"Q": rng.normal(0, 10, (B, T, E)), "K": rng.normal(0, 1, (B, 29, E)),   # logits ~±200
         "V": rng.normal(0, 1, (B, 29, E)), "M": m}
    s = a["Q"] @ a["K"].swapaxes(-1, -2) + a["M"]
    exact = softmax(s) @ a["V"]
    for program in (p, bb.fuse(p).program):
        close(bb.compile(program)(**a)["O"], exact, 1e-4)   # float32 logits of ~200


def test_rotary_by_hand_matches_rotate_half_and_the_math():
    g = builder()
    g.dim("D", 16, 8)
    g.dim("HALF", 8, 8)
    x, cos, sin = g.input("X", "B", "T", "D"), g.input("C", "T", "D"), g.input("S", "T", "D")
    x1, x2 = g.slice(x, "D", 0, 8, dim="HALF"), g.slice(x, "D", 8, 16, dim="HALF")
    hand = g.add(g.mul(x, cos), g.mul(g.concat([g.neg(x2), x1], "D", name="ROT"), sin),
                 name="HAND")
    g.dim("W", 16, 16)                                 # one block: rotate_half's unit
    xw = g.input("XW", "B", "T", "W")
    cw, sw = g.input("CW", "T", "W"), g.input("SW", "T", "W")
    builtin = g.add(g.mul(xw, cw), g.mul(g.rotate_half(xw, name="RH"), sw), name="BUILTIN")
    p = g.build(hand, builtin)
    rng = np.random.default_rng(4)
    xs, c, s = rng.normal(0, 1e4, (B, T, 16)), rng.normal(0, 1, (T, 16)), rng.normal(0, 1, (T, 16))
    exact = rotary(xs, c, s)
    runs = [(p, "reference"), (bb.fuse(p).program, "reference")]
    if importlib.util.find_spec("numba"):
        runs.append((bb.fuse(p, hardware="numba").program, "numba"))
    for program, backend in runs:
        out = bb.compile(program, backend=backend)(X=xs, C=c, S=s, XW=xs, CW=c, SW=s)
        close(out["HAND"], exact)
        close(out["BUILTIN"], exact)


def test_slices_of_a_point_dimension_and_a_fused_projection():
    g = builder()
    g.dim("F", 48, 16)
    x, w = g.input("X", "B", "T", "E"), g.weight("W", "E", "F")
    first = g.slice(x, "B", 1, 2, dim="B1")             # any range of a point dim
    a, b, c = g.split(g.matmul(x, w), "F", [16, 16, 16], dims=["P", "P", "P"])
    p = g.build(g.copy(first, name="FIRST"), g.add(g.mul(a, b), c, name="ABC"))
    rng = np.random.default_rng(5)
    xs, ws = rng.normal(0, 1e2, (B, T, E)), rng.normal(0, 1, (E, 48))
    out = bb.compile(p)(X=xs, W=ws)
    close(out["FIRST"], xs[1:2])
    y = xs @ ws
    close(out["ABC"], y[..., :16] * y[..., 16:32] + y[..., 32:])


def test_where_with_comparisons_broadcast_by_name():
    g = builder()
    x = g.input("X", "B", "T", "E")
    limit = g.input("L", "T")                           # one threshold per row
    m = g.row_max(x, name="M")
    out = g.where(g.ge(x, limit), x, g.sub(x, m), name="Y")
    p = g.build(out, g.where(g.lt(x, 0.0), 0.0, x, name="R"))
    rng = np.random.default_rng(6)
    xs, ls = rng.normal(0, 1e4, (B, T, E)), rng.normal(0, 1e4, T)
    want = np.where(xs >= ls[:, None], xs, xs - xs.max(-1, keepdims=True))
    for program in (p, bb.fuse(p).program):
        got = bb.compile(program)(X=xs, L=ls)
        close(got["Y"], want)
        close(got["R"], np.maximum(xs, 0.0))


def test_every_composite_takes_a_name():
    g = builder()
    heads_dims(g, HD)
    x, gain = g.input("X", "B", "T", "E"), g.weight("g", "E")
    w, q = g.weight("W", "QD", "E"), g.input("Q", "T", "QD")
    hq = g.split_heads(q, "H", "HD")
    named = [g.softmax(x, name="SM"), g.log_softmax(x, name="LSM"),
             g.layer_norm(x, gain, gain, 1e-5, name="LN"), g.rms_norm(x, gain, 1e-6, name="RMS"),
             g.attention(hq, hq, hq, name="ATT"), g.linear(x, g.weight("Wl", "E", "E"), gain,
                                                               name="LIN"),
             g.clamp(x, -1.0, 1.0, name="CL"), g.row_mean(x, name="RM"),
             g.col_mean(x, name="CM"), g.rotate_half(q, name="RH"), g.copy(hq, name="CP"),
             g.concat([q, q], "QQ", name="CAT"), g.silu(x, name="SI"), g.pow(x, 3, name="P3"),
             g.logsumexp(x, name="LSE"),
             g.matmul(g.merge_heads(g.copy(hq), "QD"), w, name="MM")]
    p = g.build(*named)
    assert [t.name for t in named] == list(p.outputs)
    rng = np.random.default_rng(7)
    xs, gs, qs = rng.normal(0, 1e3, (B, T, E)), rng.normal(1, 0.1, E), rng.normal(0, 1, (T, H * HD))
    out = bb.compile(p)(X=xs, g=gs, Q=qs, W=rng.normal(0, 1, (H * HD, E)),
                        Wl=rng.normal(0, 1, (E, E)))
    close(out["SM"], softmax(xs))
    close(out["LSM"], xs - xs.max(-1, keepdims=True)
          - np.log(np.exp(xs - xs.max(-1, keepdims=True)).sum(-1, keepdims=True)))
    close(out["RMS"], xs / np.sqrt((xs ** 2).mean(-1, keepdims=True) + 1e-6) * gs)
    close(out["CM"], xs.mean(-2))
    close(out["CAT"], np.concatenate([qs, qs], -1))
    close(out["P3"], xs ** 3)
    close(out["LSE"], np.log(np.exp(xs - xs.max(-1, keepdims=True)).sum(-1))
          + xs.max(-1))                                 # logits ~±3e3: exp overflows
    close(out["CL"], np.clip(xs, -1.0, 1.0))
    close(out["ATT"], attention(heads(qs[None], H), heads(qs[None], H),
                                heads(qs[None], H), False)[0])


def test_a_decoder_written_by_hand_matches_the_math():
    a = decoder_inputs()
    close(bb.compile(decoder())(**a)["Y"], decoder_oracle(a), 1e-4)


def test_a_decoder_written_by_hand_fuses_and_runs_on_numba():
    """Fused for Numba: kept small (no norm, no rotary: fusing those is tested on the
    reference backend above) so that the search stays quick."""
    pytest.importorskip("numba")
    p = decoder(norm=False, rope=False)
    a = decoder_inputs()
    a = {n: a[n] for n in p.inputs}
    exact = decoder_oracle(a, norm=False, rope=False)
    close(bb.compile(p)(**a)["Y"], exact)
    fused = bb.fuse(p, hardware="numba").program
    assert len(fused.kernels) <= 3
    close(bb.compile(fused, backend="numba")(**a)["Y"], exact)


# --- bad use: one line naming the tensors ---------------------------------------------------

def _one_line(err, *names):
    msg = str(err.value)
    assert "\n" not in msg and "Traceback" not in msg
    for n in names:
        assert n in msg, (n, msg)


def test_mismatched_dimensions_name_the_tensors():
    g = builder()
    g.dim("F", 21, 8)
    x, w = g.input("X", "B", "T", "E"), g.weight("W", "F", "E")
    with pytest.raises(IRError) as err:
        g.matmul(x, w)
    _one_line(err, "X", "W", "E", "F")
    with pytest.raises(IRError) as err:                  # linear's weight is [out, in]
        g.linear(x, g.weight("W2", "E", "F"))
    _one_line(err, "linear", "W2", "[out, in]", "matmul")
    with pytest.raises(IRError) as err:
        g.add(x, g.input("Z", "T", "F"))
    _one_line(err, "X", "Z")
    heads_dims(g, HD)
    q = g.split_heads(g.input("Q", "T", "QD"), "H", "HD")
    k = g.split_heads(g.input("K", "E", "QD"), "H", "HD")
    with pytest.raises(IRError) as err:
        g.attention(q, k, k, causal=True)
    _one_line(err, "Q", "K", "causal")
    with pytest.raises(IRError) as err:
        g.split_heads(x, "H", "HD")
    _one_line(err, "X", "E", "H")


def test_a_slice_must_be_whole_blocks_and_along_must_be_known():
    g = builder()
    x = g.input("X", "B", "T", "E")
    with pytest.raises(UsageError) as err:
        g.slice(x, "E", 3, 20)
    _one_line(err, "X", "[3:20]", "16")
    with pytest.raises(UsageError) as err:
        g.slice(x, "Q", 0, 4)
    _one_line(err, "X", "'Q'")
    with pytest.raises(UsageError) as err:
        g.binary("add", x, g.input("r", "E"), along="diagonal")
    _one_line(err, "along", "diagonal")
    with pytest.raises(UsageError) as err:
        g.concat([x, g.slice(x, "E", 0, 16, dim="E0")], "EE")
    _one_line(err, "X")


def test_builder_refuses_what_the_text_form_cannot_write():
    # Names the grammar cannot read made programs that did not round-trip; a second
    # dim() silently replaced the first; non-tensors failed with AttributeError.
    import numpy as np
    import pytest

    import blockbuster as bb
    from blockbuster.frontend.builder import GraphBuilder
    with pytest.raises(bb.UsageError, match="program name 'my prog'"):
        GraphBuilder("my prog")
    g = GraphBuilder("g")
    for bad in ("1M", "inf", "a-b", 3):
        with pytest.raises(bb.UsageError, match="a name is letters"):
            g.dim(bad, 10, 2)
    g.dim("M", np.int64(70), np.int32(32))       # NumPy integers are sizes
    g.dim("D", 40, 16)
    with pytest.raises(bb.IRError, match="dimension M is declared twice"):
        g.dim("M", 5, 5)
    x = g.input("X", "M", "D")
    with pytest.raises(bb.IRError, match="array X is defined twice"):
        g.input("X", "M", "D")
    with pytest.raises(bb.UsageError, match="expected a tensor, got 3"):
        g.matmul(x, 3)
    with pytest.raises(bb.UsageError, match="build: outputs are tensors"):
        g.build(3)
    with pytest.raises(bb.IRError, match="X is an input"):
        g.build(x)
    with pytest.raises(bb.UsageError, match="array name 'Y 2'"):
        g.exp(x, name="Y 2")
    program = g.build(g.exp(x, name="Y"))
    assert program.dim("M").size == 70 and type(program.dim("M").size) is int
    assert bb.parse_program(bb.format_program(program)) == program


def test_a_tensor_of_another_builder_is_refused_by_name():
    """Two builders both with an ``X``: the other's tensor in an operator or as an
    output is a one-line UsageError naming both builders, not a KeyError (or a
    program reading the wrong X) later."""
    g1, g2 = GraphBuilder("one"), GraphBuilder("two")
    for g in (g1, g2):
        g.dim("M", 100, 64), g.dim("K", 130, 64)
    x1, x2 = g1.input("X", "M", "K"), g2.input("X", "M", "K")
    y1 = g1.exp(x1, name="Y")
    with pytest.raises(UsageError, match="tensor Y belongs to builder 'one', not 'two'"):
        g2.build(y1)
    with pytest.raises(UsageError, match="tensor X belongs to builder 'one', not 'two'"):
        g2.add(x2, x1)
    with pytest.raises(UsageError, match="belongs to builder 'one'"):   # a view of it too
        g2.exp(g1.slice(x1, "K", 0, 64))
    program = g2.build(g2.add(x2, x2, name="Y"))         # its own tensors: fine
    assert program.inputs == ("X",) and program.outputs == ("Y",)


def test_an_input_without_dimensions_is_a_scalar_of_the_program():
    """``g.input("X")`` is a 0-d input: it broadcasts into the others, and an operator
    on it alone is stored along a unit point dimension (shape (1,); a dimension of its
    own, which broadcasts by name like any other: not into M)."""
    g = GraphBuilder("s")
    g.dim("M", 37, 16)
    x, v = g.input("X"), g.input("V", "M")
    with pytest.raises(IRError, match=r"cannot broadcast V\['M'\] and neg\w*\['U\w*'\] "
                                      r"\(neg\w*: computed from 0-d inputs alone"):
        g.mul(v, g.neg(x))
    program = g.build(g.exp(x, name="Y"), g.mul(v, x, name="Z"))
    assert program.shape("X") == () and program.shape("Y") == (1,)
    xs, vs = np.float32(2.5), (np.arange(37, dtype=np.float32) - 18) * 1e3
    for backend in ("reference", "numba"):
        out = bb.compile(bb.fuse(program).program, backend=backend)(X=np.array(xs), V=vs)
        np.testing.assert_allclose(out["Y"], [math.exp(2.5)], rtol=1e-6)
        np.testing.assert_allclose(out["Z"], 2.5 * vs.astype(np.float64), rtol=1e-6)


def test_a_slice_off_the_default_blocks_says_the_block_was_the_default():
    g = GraphBuilder("s")
    g.dim("N", 200), g.dim("M", 200, 50)
    x = g.input("X", "M", "N")
    with pytest.raises(UsageError, match=r"\[0:100\] of N is not whole blocks of 64 \(the "
                                         r"default block: declare one, g.dim\('N', 200, block\)\)"):
        g.slice(x, "N", 0, 100)
    with pytest.raises(UsageError, match=r"\[0:70\] of M is not whole blocks of 50$"):
        g.slice(x, "M", 0, 70)


@pytest.mark.parametrize("backend", ["reference", "numba"])
def test_a_slice_up_to_a_ragged_end(backend):
    """``x[16:37]`` of M = 37 in blocks of 16 (and the columns likewise): the slice's
    last block and M's are both 5 long, so the view's block m + 1 is M's; the
    verifier refused it ("computed from no loop over M")."""
    g = GraphBuilder("ragged_slice")
    g.dim("M", 37, 16)
    g.dim("C", 40, 16)
    g.dim("N", 24, 8)
    x, w = g.input("X", "M", "C"), g.input("W", "C", "N")
    rows = g.slice(x, "M", 16, 37)
    p = g.build(g.add(rows, 1.0, name="Z"), g.matmul(rows, w, name="Y"),
                g.exp(g.mul(g.slice(x, "C", 16, 40), 0.01), name="E"))
    rng = np.random.default_rng(3)
    xs, ws = rng.normal(0, 1e2, (37, 40)), rng.normal(0, 1, (40, 24))
    for program in (p, bb.fuse(p).program):
        got = bb.compile(program, backend=backend)(X=xs, W=ws)
        close(got["Z"], xs[16:] + 1)
        close(got["Y"], xs[16:] @ ws)
        close(got["E"], np.exp(xs[:, 16:] * 0.01))
