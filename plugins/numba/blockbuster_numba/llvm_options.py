"""LLVM options for compiling the generated kernels, and only them.

Loop strength reduction (LSR), a pass of LLVM's code generator, rewrites the address
arithmetic of loops. On generated kernels (many short loops over views of blocks,
each with several induction variables) it took up to half of the machine-code step:
0.7-0.9 of 1.4 CPU s for the largest kernel of the default Llama layer; off, a cold
compile of that layer's kernels took 6.2 instead of 8.1 CPU s. The kernels' hot
loops are the micro-kernel's (compiled apart, with every pass) and vectorised
element-wise loops whose addressing LLVM's other passes already simplify. Run times
did not move: the same generated source compiled both ways in one process, calls
interleaved, best of 7 (attention 4096: 31.7 / 32.3 ms; LayerNorm·W 2048³: 104.5 /
102.6; RMSNorm·FFN: 207.8 / 207.3; the T=E=2048 Llama layer: 1214 / 1228, with /
without LSR).

The kernels' optimisation pipeline is LLVM's -O2, not Numba's default -O3: -O3 adds
argument promotion, call-site splitting and control-height reduction, which generated
kernels (one function each, their helpers inlined by Numba already) do not gain
from. The default Llama layer's five kernels, compiled in one process alternately
both ways, best of four: LLVM 2.56 / 1.97 CPU s, the whole compile 5.53 / 4.97 (-O3 /
-O2). Loop and SLP vectorisation run at -O2 alike, and run times did not move: the
same source both ways in one process, calls interleaved, best of 7 on a shared AVX2
machine (-O3 / -O2): attention 4096 58.8 / 57.0 ms, causal 33.9 / 34.5, attention
16384 938 / 908, LayerNorm·W 2048³ 209 / 186, RMSNorm·FFN 369 / 345, the T=E=2048
Llama layer 2245 / 2102 ms. (Only the pass pipeline changes: the target machine
that emits machine code keeps the level Numba made it with. The micro-kernel's
driver keeps -O3.)

The options are global to the process, so they are set only while this plugin's
kernels compile, under Numba's compiler lock (no other compile can run meanwhile),
and restored after.
"""

from __future__ import annotations

import contextlib

from llvmlite import binding as llvm
from numba.core import config
from numba.core.compiler_lock import global_compiler_lock

#: The kernels' optimisation level (Numba reads ``config.OPT`` each time it builds a
#: pass pipeline; the target machine keeps the level it was made with).
KERNEL_OPT = 2

_KERNEL = [False]        # kernel options set now (in a kernel_codegen block)?
_FULL_OPT = config.OPT   # Numba's level (NUMBA_OPT), for everything but the kernels
_OPT_LEVEL = type(config.OPT)   # Numba's int subclass for it (it also knows 'max')


def _set_kernel_options(kernel: bool) -> None:
    """The kernels' options (LSR off, ``KERNEL_OPT``) or every pass at Numba's level."""
    llvm.set_option("blockbuster", f"-disable-lsr={'true' if kernel else 'false'}")
    config.OPT = _OPT_LEVEL(min(KERNEL_OPT, int(_FULL_OPT))) if kernel else _FULL_OPT
    _KERNEL[0] = kernel


@contextlib.contextmanager
def kernel_codegen():
    """Compile the generated kernels inside this block."""
    with global_compiler_lock:
        before = _KERNEL[0]
        _set_kernel_options(True)
        try:
            yield
        finally:
            _set_kernel_options(before)


@contextlib.contextmanager
def full_codegen():
    """Every pass, also inside a :func:`kernel_codegen` block (the micro-kernel's
    driver, compiled on first use, maybe while a module's kernels compile)."""
    with global_compiler_lock:
        before = _KERNEL[0]
        _set_kernel_options(False)
        try:
            yield
        finally:
            _set_kernel_options(before)
