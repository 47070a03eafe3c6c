"""Compile time of the Numba backend: cold (fresh process, empty caches) and warm
(fresh process, the kernels on disk), with where the time goes.

    python benchmarks/bench_compile.py                    # the default cases
    python benchmarks/bench_compile.py attention --json   # one case, machine-readable
    python benchmarks/bench_compile.py --runtime-warm     # Numba's cache of the runtime
                                                          # helpers kept between cases

Each case runs in fresh subprocesses with ``BLOCKBUSTER_CACHE`` and
``NUMBA_CACHE_DIR`` in a new temporary directory: first cold (nothing cached: the
generated kernels, the runtime helpers of ``blockbuster_numba.runtime`` and every
NumPy function Numba compiles for them are compiled), then warm (a second process
loads the same kernels from the cache). The program is fused before the clock starts:
the times are ``backend.compile(program)`` alone, wall and CPU (the CPU time is the
steadier figure on a shared machine; compiling is single-threaded per process).
``+workers`` is the CPU time of the worker processes that compiled kernels alongside
(``blockbuster_numba.parallel_compile``; ``BLOCKBUSTER_COMPILE_WORKERS=1``: none):
on an idle machine the cold wall time is about the larger of the two.

The breakdown (cold) comes from Numba's own compile events (``numba.core.event``),
CPU seconds exclusive of nested compiles:

* ``kernels``  -- the generated kernel functions themselves (typing, lowering, LLVM);
* ``numpy``    -- NumPy functions Numba compiles for them (``np.dot``, ``np.empty``,
  ``np.zeros``, ``np.full``, ...: once per process and signature, never cached);
* ``runtime``  -- the runtime helpers (``exp32``, ...: cached on disk once compiled);
* ``llvm``     -- of all the above, the time inside LLVM (optimisation, machine code);
* ``setup``    -- the rest of ``compile``: code generation, Numba's first-compile
  initialisation, writing and loading the module.

``import`` is the time to import ``blockbuster`` and the plugin in a fresh process.

Measured 2026-12-02 on the shared 2-core AMD EPYC (Zen 4), wall seconds, several
runs each with other jobs on the machine (CPU seconds of the compiling process beside
``+workers`` are printed by every run):

    case (default sizes)   cold (empty caches)        warm (kernels cached)
                           before     now             before       now
    attention              2.2-3.2    1.5-2.4         0.27-0.44    0.06-0.11
    llama_layer            5.2-7.5    4.0-6.3         0.37-0.61    0.14-0.24
    llama_layer_2048          -       3.5-6.3            -         0.12-0.26

(The low ends are the three runs on a quiet machine.)

On the shared 2-core AMD EPYC (Zen 3, AVX2), 2026-12-04, wall seconds, alternating
pairs against the commit before (workers that wait for the runtime helpers, -O3
kernels, both drivers compiling the tile): llama_layer cold 7.7-10.4 before, 5.8-6.5
after (four pairs); attention cold 2.2-2.4 before, 2.4-2.5 after (three pairs: it has
one kernel, no worker); warm 0.15-0.25 both.

"Before": one driver call site per tile variant (six copies of the micro-kernel's IR,
1.45 CPU s to compile the driver; now one, 0.8 s) and cached kernels loaded after
Numba's full context refresh (0.25-0.4 s of a warm start; now skipped:
``blockbuster_numba/cache_loads.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap

#: name -> (workload, sizes): what ``python -m blockbuster run NAME`` compiles by
#: default, and the Llama layer of issue 13 at its full size.
CASES = {
    "attention": ("attention", {}),
    "layernorm_matmul": ("layernorm_matmul", {}),
    "rmsnorm_ffn_swiglu": ("rmsnorm_ffn_swiglu", {}),
    "llama_layer": ("llama_block", {}),
    "llama_layer_2048": ("llama_block", {"T": 2048, "E": 2048, "F": 5632, "NH": 16, "KVH": 4}),
}
DEFAULT = ("attention", "layernorm_matmul", "rmsnorm_ffn_swiglu", "llama_layer")

CHILD = textwrap.dedent("""
    import json, sys, time
    from collections import defaultdict
    t0 = time.perf_counter()
    import blockbuster as bb
    import blockbuster_numba
    imported = time.perf_counter() - t0
    from numba.core import event
    name, sizes = sys.argv[1], json.loads(sys.argv[2])
    program = bb.fuse(bb.workload(name, **sizes)).program
    backend = blockbuster_numba.backend
    parts = defaultdict(float)
    stack = []

    def group(disp):
        fn = disp.py_func
        mod = getattr(fn, "__module__", "") or ""
        if mod.startswith("_bb_numba_"):
            return "kernels"
        if mod.startswith("blockbuster_numba"):
            return "runtime"
        return "numpy"

    class Compiles(event.Listener):
        def on_start(self, ev):
            stack.append([time.process_time(), 0.0])

        def on_end(self, ev):
            start, nested = stack.pop()
            spent = time.process_time() - start
            parts[group(ev.data["dispatcher"])] += spent - nested
            if stack:
                stack[-1][1] += spent
            else:
                parts["_top"] += spent

    class Llvm(event.Listener):
        def on_start(self, ev):
            self.start = time.process_time()

        def on_end(self, ev):
            parts["llvm"] += time.process_time() - self.start

    cpu0, wall0 = time.process_time(), time.perf_counter()
    with event.install_listener("numba:compile", Compiles()), \\
            event.install_listener("numba:llvm_lock", Llvm()):
        compiled = backend.compile(program)
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    import os
    workers = os.times().children_user + os.times().children_system
    top = parts.pop("_top", 0.0)
    print(json.dumps({
        "wall": wall, "cpu": cpu, "workers_cpu": workers, "import": imported, "kernels_n": len(program.kernels),
        "parallel_n": compiled.source.count("parallel_for_(kernel"),
        "hits": compiled.cache_hits, "misses": compiled.cache_misses,
        "codegen": compiled.codegen_seconds, "setup": max(0.0, cpu - top),
        **{k: parts.get(k, 0.0) for k in ("kernels", "numpy", "runtime", "llvm")}}))
""")


def run_child(case: str, cache: str) -> dict:
    name, sizes = CASES[case]
    env = dict(os.environ, BLOCKBUSTER_CACHE=cache,
               NUMBA_CACHE_DIR=os.path.join(cache, "numba-cache"))
    out = subprocess.run([sys.executable, "-c", CHILD, name, json.dumps(sizes)], env=env,
                         capture_output=True, text=True, timeout=1800)
    if out.returncode:
        sys.exit(f"bench_compile: case {case} failed:\n{out.stderr.strip()[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(case: str, runtime_cache: str | None) -> dict:
    with tempfile.TemporaryDirectory(prefix="bb-compile-") as cache:
        if runtime_cache:        # the runtime helpers' machine code, kept between cases
            os.symlink(runtime_cache, os.path.join(cache, "numba-cache"))
        return {"case": case, "cold": run_child(case, cache), "warm": run_child(case, cache)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cases", nargs="*", help=f"cases (default: {' '.join(DEFAULT)}; "
                                             f"all: {' '.join(CASES)})")
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout")
    ap.add_argument("--runtime-warm", action="store_true",
                    help="compile the runtime helpers once and keep their cache between "
                         "cases (cold then means: the program's kernels not cached)")
    args = ap.parse_args()
    unknown = [c for c in args.cases if c not in CASES]
    if unknown:
        sys.exit(f"bench_compile: unknown case {unknown[0]!r} (known: {', '.join(CASES)})")
    cases = args.cases or list(DEFAULT)
    with tempfile.TemporaryDirectory(prefix="bb-runtime-") as runtime:
        if args.runtime_warm:
            with tempfile.TemporaryDirectory(prefix="bb-compile-") as cache:
                os.symlink(runtime, os.path.join(cache, "numba-cache"))
                run_child(cases[0], cache)       # fills the runtime helpers' cache
        results = [measure(c, runtime if args.runtime_warm else None) for c in cases]
    load = os.getloadavg()[0]
    if args.json:
        print(json.dumps({"load": load, "runtime_warm": args.runtime_warm,
                          "results": results}))
        return
    print(f"load average {load:.1f}; seconds; cold = fresh process, empty "
          f"{'kernel' if args.runtime_warm else 'kernel and runtime'} cache")
    print(f"{'case':<19} {'kernels':>7} {'cold wall':>9} {'cold cpu':>8} {'+workers':>8} "
          f"{'warm wall':>9} {'warm cpu':>8} {'import':>6} | cold cpu: {'kernels':>7} "
          f"{'numpy':>6} {'runtime':>7} {'setup':>6} (llvm)")
    for r in results:
        c, w = r["cold"], r["warm"]
        print(f"{r['case']:<19} {c['kernels_n']:>3} ({c['parallel_n']}p) {c['wall']:>9.2f} "
              f"{c['cpu']:>8.2f} {c['workers_cpu']:>8.2f} {w['wall']:>9.2f} {w['cpu']:>8.2f} "
              f"{w['import']:>6.2f} | {'':>9} {c['kernels']:>7.2f} {c['numpy']:>6.2f} "
              f"{c['runtime']:>7.2f} {c['setup']:>6.2f} ({c['llvm']:.2f})")
        if w["misses"]:
            print(f"  warning: the warm run of {r['case']} compiled {w['misses']} kernel(s)")


if __name__ == "__main__":
    main()
