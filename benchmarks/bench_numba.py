"""Execution speed and peak memory of the Numba backend.

    python benchmarks/bench_numba.py            # the full sizes (a few minutes)
    python benchmarks/bench_numba.py --quick    # small sizes (under a minute, warm cache)

For each workload it runs, on the same inputs and in the same process:

* ``numpy``   -- the unfused computation written as a NumPy user would (BLAS matmuls,
                 in-place softmax / normalisation), float32;
* ``fused``   -- the fused block program (``blockbuster.fuse``), generated and
                 JIT-compiled by the Numba backend;
* ``unfused`` -- the unfused block program on the Numba backend (one kernel per
                 operator, intermediates in global memory);
* ``hand``    -- a hand-written Numba kernel of the same algorithm as the fused
                 program, with the same block sizes (the yardstick for the generator).

Times are the best of ``3 x --repeat`` calls: three rounds over the variants, each
variant's calls together after an untimed one (threads of the previous variant spin
for a while after their work), so that load from other processes hits every variant
alike (this machine is shared: the load average is printed). Every output is checked
against the float64 oracle first.

Peak memory is measured per variant in a fresh subprocess (kernels loaded from the
cache): the growth of the resident set over the call, sampled every 0.2 ms, so it
sees NumPy's buffers and the kernels' own scratch alike; ``tracemalloc`` (NumPy
allocations only) is printed beside it. Inputs are excluded.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import threading
import time
import tracemalloc

import numpy as np

import scipy.linalg.cython_blas  # noqa: F401  (Numba's BLAS, before threadpoolctl)
from numba import njit, prange
from threadpoolctl import ThreadpoolController

from blockbuster.frontend.workloads import workload
from blockbuster.oracles import oracle
from blockbuster.rewrite.engine import fuse
from blockbuster.validate import compare, random_inputs
from blockbuster_numba import backend as numba_backend
from blockbuster_numba.runtime import FASTMATH, exp32, maximum, silu32

F32 = np.float32
OPTS = dict(parallel=True, fastmath=set(FASTMATH), error_model="numpy", cache=True, nogil=True)

# --------------------------------------------------------------------------------------
# NumPy, as a user writes it (unfused; BLAS matmuls; in-place elementwise work)
# --------------------------------------------------------------------------------------


def numpy_attention(Q, K, V):
    s = Q @ K.T
    s *= F32(1.0 / math.sqrt(Q.shape[1]))
    s -= s.max(axis=1, keepdims=True)
    np.exp(s, out=s)
    s /= s.sum(axis=1, keepdims=True)
    return {"O": s @ V}


def numpy_layernorm_matmul(X, gamma, beta, W):
    mean = X.mean(axis=1, keepdims=True)
    xc = X - mean
    var = np.mean(xc * xc, axis=1, keepdims=True)
    xc *= 1.0 / np.sqrt(var + F32(1e-5))
    xc *= gamma
    xc += beta
    return {"Y": xc @ W}


def numpy_rmsnorm_ffn_swiglu(X, g, W1, W3, W2):
    h = X * (1.0 / np.sqrt(np.mean(X * X, axis=1, keepdims=True) + F32(1e-6)))
    h *= g
    a = h @ W1
    b = h @ W3
    with np.errstate(over="ignore"):
        a /= 1 + np.exp(-a)          # silu, in place
    a *= b
    return {"Y": a @ W2}


# --------------------------------------------------------------------------------------
# Hand-written Numba kernels: the fused programs' algorithms, written by a person
# --------------------------------------------------------------------------------------


@njit(**OPTS)
def _attention_kernel(Q, K, V, O, scale, BN, BS):
    N, D = Q.shape
    S = K.shape[0]
    for ib in prange((N + BN - 1) // BN):
        i0 = ib * BN
        R = min(BN, N - i0)
        q = Q[i0:i0 + R]
        m = np.full(R, -np.inf, F32)
        l = np.zeros(R, F32)
        acc = np.zeros((R, D), F32)
        for jb in range((S + BS - 1) // BS):
            j0 = jb * BS
            C = min(BS, S - j0)
            s = np.dot(q, K[j0:j0 + C].T)
            for r in range(R):
                mx = m[r]
                for c in range(C):
                    v = s[r, c] * scale
                    s[r, c] = v
                    mx = maximum(mx, v)
                shift = F32(0.0) if mx == -np.inf else mx
                alpha = exp32(m[r] - shift)
                m[r] = mx
                rs = F32(0.0)
                for c in range(C):
                    e = exp32(s[r, c] - shift)
                    s[r, c] = e
                    rs += e
                l[r] = l[r] * alpha + rs
                for d in range(D):
                    acc[r, d] *= alpha
            acc += np.dot(s, V[j0:j0 + C])
        out = O[i0:i0 + R]
        for r in range(R):
            inv = F32(1.0) / l[r]
            for d in range(D):
                out[r, d] = acc[r, d] * inv


def hand_attention(blocks):
    def run(Q, K, V):
        O = np.empty_like(Q)
        _attention_kernel(Q, K, V, O, F32(1.0 / math.sqrt(Q.shape[1])), blocks["N"], blocks["S"])
        return {"O": O}
    return run


@njit(**OPTS)
def _layernorm_matmul_kernel(X, gamma, beta, W, Y, eps, BM, BK, BN):
    # Y = rstd * (X·(gamma∘W) - mean ⊗ colsum(gamma∘W)) + colsum(beta∘W), one pass
    # over the k blocks of X with Chan's running mean/variance (the fused program).
    M, K = X.shape
    N = W.shape[1]
    for ib in prange((M + BM - 1) // BM):
        i0 = ib * BM
        R = min(BM, M - i0)
        mean = np.zeros(R, F32)
        m2 = np.zeros(R, F32)
        count = F32(0.0)
        acc = np.zeros((R, N), F32)
        cg = np.zeros(N, F32)
        cb = np.zeros(N, F32)
        gw = np.empty((BK, BN), F32)
        for kb in range((K + BK - 1) // BK):
            k0 = kb * BK
            C = min(BK, K - k0)
            xb = np.ascontiguousarray(X[i0:i0 + R, k0:k0 + C])
            nb = F32(C)
            total = count + nb
            w1 = nb / total
            w2 = count * nb / total
            for r in range(R):
                s = F32(0.0)
                for c in range(C):
                    s += xb[r, c]
                mb = s / nb
                qb = F32(0.0)
                for c in range(C):
                    dv = xb[r, c] - mb
                    qb += dv * dv
                delta = mb - mean[r]
                mean[r] += delta * w1
                m2[r] += qb + delta * delta * w2
            count = total
            gk = gamma[k0:k0 + C]
            bk = beta[k0:k0 + C]
            for nblk in range((N + BN - 1) // BN):
                n0 = nblk * BN
                Cn = min(BN, N - n0)
                wb = W[k0:k0 + C, n0:n0 + Cn]
                g = gw[:C, :Cn] if (C < BK or Cn < BN) else gw
                cgv = cg[n0:n0 + Cn]
                cbv = cb[n0:n0 + Cn]
                for r in range(C):
                    gr = gk[r]
                    br = bk[r]
                    for c in range(Cn):
                        w = wb[r, c]
                        v = gr * w
                        g[r, c] = v
                        cgv[c] += v
                        cbv[c] += br * w
                acc[:, n0:n0 + Cn] += np.dot(xb, np.ascontiguousarray(g))
        out = Y[i0:i0 + R]
        for r in range(R):
            rstd = F32(1.0) / math.sqrt(m2[r] / count + eps)
            mu = mean[r]
            for c in range(N):
                out[r, c] = rstd * (acc[r, c] - mu * cg[c]) + cb[c]


def hand_layernorm_matmul(blocks):
    def run(X, gamma, beta, W):
        Y = np.empty((X.shape[0], W.shape[1]), F32)
        _layernorm_matmul_kernel(X, gamma, beta, W, Y, F32(1e-5), blocks["M"], blocks["K"],
                                 blocks["N"])
        return {"Y": Y}
    return run


@njit(**OPTS)
def _rmsnorm_ffn_kernel(X, g, W1, W3, W2, Y, eps, BM, BH):
    # Per row block: the RMS scale, then for each hidden block the gate and up
    # projections of X·(g∘W), silu(rs·a)·(rs·b), accumulated into the row strip of Y
    # through W2 (accumulators held for the whole strip: the fused program's map).
    M, D = X.shape
    H = W1.shape[1]
    for ib in prange((M + BM - 1) // BM):
        i0 = ib * BM
        R = min(BM, M - i0)
        xb = X[i0:i0 + R]
        rs = np.empty(R, F32)
        for r in range(R):
            s = F32(0.0)
            for c in range(D):
                s += xb[r, c] * xb[r, c]
            rs[r] = F32(1.0) / math.sqrt(s / F32(D) + eps)
        acc = np.zeros((R, D), F32)
        g1 = np.empty((D, BH), F32)
        g3 = np.empty((D, BH), F32)
        for hb in range((H + BH - 1) // BH):
            h0 = hb * BH
            C = min(BH, H - h0)
            w1 = W1[:, h0:h0 + C]
            w3 = W3[:, h0:h0 + C]
            a1 = g1[:, :C] if C < BH else g1
            a3 = g3[:, :C] if C < BH else g3
            for r in range(D):
                gr = g[r]
                for c in range(C):
                    a1[r, c] = gr * w1[r, c]
                    a3[r, c] = gr * w3[r, c]
            a = np.dot(xb, np.ascontiguousarray(a1))
            b = np.dot(xb, np.ascontiguousarray(a3))
            for r in range(R):
                sr = rs[r]
                for c in range(C):
                    a[r, c] = silu32(sr * a[r, c]) * (sr * b[r, c])
            acc += np.dot(a, W2[h0:h0 + C])
        Y[i0:i0 + R] = acc


def hand_rmsnorm_ffn_swiglu(blocks):
    def run(X, g, W1, W3, W2):
        Y = np.empty_like(X)
        _rmsnorm_ffn_kernel(X, g, W1, W3, W2, Y, F32(1e-6), blocks["M"], blocks["H"])
        return {"Y": Y}
    return run


# --------------------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------------------

NUMPY = {"attention": numpy_attention, "layernorm_matmul": numpy_layernorm_matmul,
         "rmsnorm_ffn_swiglu": numpy_rmsnorm_ffn_swiglu}
HAND = {"attention": hand_attention, "layernorm_matmul": hand_layernorm_matmul,
        "rmsnorm_ffn_swiglu": hand_rmsnorm_ffn_swiglu}

#: (label, workload, sizes, blocks). Block sizes are a tuning choice of the fused
#: program (the rules work with any); every variant uses the same ones. Where a
#: matmul dominates, few large row blocks (one per core) let each BLAS call amortise
#: its packing, and the weight scaling the fused program redoes per row block is
#: redone only once per core.
FULL = [
    ("attention N=1024", "attention", {"N": 1024, "D": 64}, {"N": 64, "S": 64, "D": 64}),
    ("attention N=4096", "attention", {"N": 4096, "D": 64}, {"N": 64, "S": 64, "D": 64}),
    ("attention N=8192", "attention", {"N": 8192, "D": 64}, {"N": 64, "S": 64, "D": 64}),
    ("LN+matmul 2048^3", "layernorm_matmul", {"M": 2048, "K": 2048, "N": 2048},
     {"M": 1024, "K": 2048, "N": 256}),
    ("RMSNorm+FFN 2048x1024x2816", "rmsnorm_ffn_swiglu", {"M": 2048, "D": 1024, "H": 2816},
     {"M": 1024, "D": 1024, "H": 256}),
]
QUICK = [
    ("attention N=512", "attention", {"N": 512, "D": 64}, {"N": 64, "S": 64, "D": 64}),
    ("attention N=2048", "attention", {"N": 2048, "D": 64}, {"N": 64, "S": 64, "D": 64}),
    ("LN+matmul 512^3", "layernorm_matmul", {"M": 512, "K": 512, "N": 512},
     {"M": 256, "K": 512, "N": 128}),
    ("RMSNorm+FFN 512x256x704", "rmsnorm_ffn_swiglu", {"M": 512, "D": 256, "H": 704},
     {"M": 256, "D": 256, "H": 128}),
]
VARIANTS = ("numpy", "fused", "unfused", "hand")
ROUNDS = 3


def build(name, sizes, blocks, seed=0):
    unfused = workload(name, blocks=blocks, **sizes)
    fused = fuse(unfused, hardware=numba_backend.hardware).program   # fused for this CPU
    inputs = random_inputs(unfused, seed=seed)
    return unfused, fused, inputs


def runners(name, sizes, blocks, unfused, fused):
    compiled_f = numba_backend.compile(fused)
    compiled_u = numba_backend.compile(unfused)
    return {
        "numpy": lambda x: NUMPY[name](**x),
        "fused": compiled_f,
        "unfused": compiled_u,
        "hand": _blas_limited(HAND[name](blocks)),
    }, {"fused": compiled_f, "unfused": compiled_u}


_CONTROLLER = []


def _blas_limited(fn):
    """BLAS held to one thread around the call, as the backend does it."""
    def run(x):
        if not _CONTROLLER:
            _CONTROLLER.append(ThreadpoolController())
        with _CONTROLLER[0].limit(limits=1, user_api="blas"):
            return fn(**x)
    return run


# --------------------------------------------------------------------------------------
# Peak memory (in a fresh process)
# --------------------------------------------------------------------------------------

def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _peak_during(fn) -> tuple[int, int]:
    """(peak RSS growth, tracemalloc peak) over one call of ``fn``."""
    peak = [0]
    stop = threading.Event()
    base = _rss_bytes()

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], _rss_bytes() - base)
            time.sleep(0.0002)

    t = threading.Thread(target=sample, daemon=True)
    tracemalloc.start()
    t.start()
    try:
        fn()
    finally:
        stop.set()
        t.join()
        _, traced = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    peak[0] = max(peak[0], _rss_bytes() - base)
    return peak[0], traced


def child(case_index: int, variant: str, quick: bool) -> None:
    label, name, sizes, blocks = (QUICK if quick else FULL)[case_index]
    unfused, fused, inputs = build(name, sizes, blocks)
    run = runners(name, sizes, blocks, unfused, fused)[0][variant]
    if variant == "hand":   # load the hand kernel from the cache on tiny inputs first
        small_sizes = {k: min(v, 8) for k, v in sizes.items()}
        small_blocks = {k: min(v, 8) for k, v in blocks.items()}
        tiny = random_inputs(workload(name, blocks=small_blocks, **small_sizes))
        runners(name, small_sizes, small_blocks, *build(name, small_sizes, small_blocks)[:2])[0]["hand"](tiny)
    rss, traced = _peak_during(lambda: run(inputs))
    print(json.dumps({"rss": rss, "traced": traced}))


def measure_memory(case_index: int, variant: str, quick: bool) -> dict:
    cmd = [sys.executable, __file__, "--child", str(case_index), variant] + (["--quick"] if quick else [])
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        return {"rss": float("nan"), "traced": float("nan"), "error": out.stderr.strip()[-300:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------

def _busy() -> str:
    try:
        out = subprocess.run(["ps", "-eo", "pcpu,comm", "--sort=-pcpu"], capture_output=True,
                             text=True, timeout=10).stdout.splitlines()[1:]
        busy = [l.strip() for l in out if l.strip() and float(l.split()[0]) > 20.0]
        return ", ".join(busy[:4]) or "none"
    except Exception:
        return "unknown"


def bench_case(index: int, case, repeat: int, quick: bool, memory: bool) -> dict:
    label, name, sizes, blocks = case
    unfused, fused, inputs = build(name, sizes, blocks)
    runs, compiled = runners(name, sizes, blocks, unfused, fused)
    want = oracle(name, inputs)
    result = {"label": label, "workload": name, "sizes": sizes, "blocks": blocks,
              "kernels": {"fused": len(fused.kernels), "unfused": len(unfused.kernels)},
              "compile_s": {k: round(c.compile_seconds, 3) for k, c in compiled.items()},
              "error": {}, "time_ms": {}, "median_ms": {}, "rss_mb": {}, "traced_mb": {}}
    for v in VARIANTS:
        check = compare(runs[v](inputs), want)
        result["error"][v] = check.max_rel_error
        if not check.passed:
            raise SystemExit(f"{label}: {v} is wrong: {check}")
    times = {v: [] for v in VARIANTS}
    # Rounds over the variants, so that load from other processes hits each alike;
    # within a round, one untimed call first: the previous variant's threads (BLAS
    # and OpenMP threads spin for a while after their work) must not be charged to
    # the next one.
    for _ in range(ROUNDS):
        for v in VARIANTS:
            runs[v](inputs)
            for _ in range(repeat):
                t = time.perf_counter()
                runs[v](inputs)
                times[v].append(time.perf_counter() - t)
    for v in VARIANTS:
        result["time_ms"][v] = 1e3 * min(times[v])
        result["median_ms"][v] = 1e3 * float(np.median(times[v]))
    if memory:
        for v in VARIANTS:
            m = measure_memory(index, v, quick)
            result["rss_mb"][v] = m["rss"] / 2**20
            result["traced_mb"][v] = m["traced"] / 2**20
    return result


def _fmt(x, spec):
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def print_table(results, memory: bool) -> None:
    head = (f"{'case':<28}{'numpy':>9}{'fused':>9}{'unfused':>9}{'hand':>9} | "
            f"{'numpy/fused':>11}{'fused/hand':>11}{'unfused/np':>11}")
    if memory:
        head += f" | {'peak MB: numpy':>14}{'fused':>8}{'unfused':>8}{'hand':>8}{'np/fused':>9}"
    print(head)
    print("-" * len(head))
    for r in results:
        t = r["time_ms"]
        line = (f"{r['label']:<28}{t['numpy']:>8.1f} {t['fused']:>8.1f} {t['unfused']:>8.1f} "
                f"{t['hand']:>8.1f} | {t['numpy'] / t['fused']:>10.2f}x"
                f"{t['fused'] / t['hand']:>10.2f}x{t['unfused'] / t['numpy']:>10.2f}x")
        if memory:
            m = r["rss_mb"]
            ratio = m["numpy"] / max(m["fused"], 0.1)
            line += (f" | {_fmt(m['numpy'], '14.1f')}{_fmt(m['fused'], '8.1f')}"
                     f"{_fmt(m['unfused'], '8.1f')}{_fmt(m['hand'], '8.1f')}{ratio:>8.0f}x")
        print(line)
    print("times: best of the round-robin runs, ms; peak MB: resident-set growth over one "
          "call in a fresh process (0.1 MB floor in the ratio)")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes")
    ap.add_argument("--repeat", type=int, default=None, help="timed calls per variant")
    ap.add_argument("--no-memory", action="store_true", help="skip the peak-memory subprocesses")
    ap.add_argument("--only", default="", help="comma-separated substrings of case labels")
    ap.add_argument("--json", default="", help="also write the results here")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(int(args.child[0]), args.child[1], args.quick)
        return
    cases = QUICK if args.quick else FULL
    repeat = args.repeat or (5 if args.quick else 3)
    hw = numba_backend.hardware
    print(f"machine: {hw.cores} cores, L2 {hw.local_capacity_bytes >> 10} KiB/core; "
          f"load average {os.getloadavg()[0]:.2f}; busy processes: {_busy()}")
    print(f"numpy {np.__version__}; OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '')!r}")
    results = []
    for i, case in enumerate(cases):
        if args.only and not any(s and s in case[0] for s in args.only.split(",")):
            continue
        r = bench_case(i, case, repeat, args.quick, not args.no_memory)
        results.append(r)
        print(f"  {case[0]}: " + ", ".join(f"{v} {r['time_ms'][v]:.1f} ms" for v in VARIANTS),
              flush=True)
    print()
    print_table(results, not args.no_memory)
    print(f"load average after: {os.getloadavg()[0]:.2f}; busy processes: {_busy()}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
