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

The option is global to the process, so it is set only while this plugin's kernels
compile, under Numba's compiler lock (no other compile can run meanwhile), and
restored after.
"""

from __future__ import annotations

import contextlib

from llvmlite import binding as llvm
from numba.core.compiler_lock import global_compiler_lock


_DISABLED = [False]      # LSR off now (in a kernel_codegen block)?


def _set_lsr(on: bool) -> None:
    llvm.set_option("blockbuster", f"-disable-lsr={'false' if on else 'true'}")
    _DISABLED[0] = not on


@contextlib.contextmanager
def kernel_codegen():
    """Compile the generated kernels inside this block."""
    with global_compiler_lock:
        before = _DISABLED[0]
        _set_lsr(False)
        try:
            yield
        finally:
            _set_lsr(not before)


@contextlib.contextmanager
def full_codegen():
    """Every pass, also inside a :func:`kernel_codegen` block (the micro-kernel's
    driver, compiled on first use, maybe while a module's kernels compile)."""
    with global_compiler_lock:
        before = _DISABLED[0]
        _set_lsr(True)
        try:
            yield
        finally:
            _set_lsr(not before)
