"""How generated kernels call the micro-kernel's driver: by a symbol's name, not by
linking the driver into every kernel.

A Numba function that calls another one links the callee's LLVM module into its own
and optimises the whole again: every kernel with a block matmul re-optimised the
driver (~370 KB of IR, ~0.6 CPU s per kernel, when the kernel itself took 0.2 s).
Instead the driver (:func:`.microkernel.driver`) is compiled once per dtype as a
C-callable entry point (``@cfunc``, cached on disk like the kernels; ~0.8 CPU s once
per machine), its address is registered with LLVM
under a fixed name (:func:`ensure_gemm_symbol`), and a kernel only declares that
name and calls it (:func:`call_gemm`). A kernel's cached machine code refers to the
name, so a generated module registers it before its kernels load (the header calls
:func:`ensure_gemm_symbol`).

The entry takes raw pointers, shapes and byte strides and rebuilds array views of
them (no copy, no owner), so the driver sees exactly the arrays the kernel passed.
:func:`gemm` is the same call for Python (tests, benchmarks).
"""

from __future__ import annotations

from llvmlite import binding as llvm_binding
from llvmlite import ir
from numba import cfunc, njit, types
from numba.core import cgutils
from numba.core.compiler_lock import global_compiler_lock
from numba.extending import intrinsic
from numba.np.arrayobj import make_array

from . import microkernel
from .llvm_options import full_codegen

_DTYPES = {"float32": types.float32, "float64": types.float64}
_ENTRIES: dict[str, object] = {}       # dtype name -> its compiled entry (kept alive)


def symbol(dtype: str) -> str:
    """The registered name of ``dtype``'s entry (the driver's hash in it: a kernel
    compiled against another driver never binds to this one)."""
    return f"blockbuster_gemm_{dtype}_{microkernel.SOURCE_HASH}"


def _entry_signature(dtype):
    p, i = types.CPointer(dtype), types.int64
    return types.void(p, i, i, i, i, p, i, i, i, p, i, i, i)


def _compile_entry(dtype):
    # The driver itself is the entry (compiled once, nothing linked in to optimise
    # again); Numba caches it beside microkernel.py, one entry per dtype's signature.
    return cfunc(_entry_signature(dtype), cache=True, error_model="numpy",
                 boundscheck=False)(microkernel.driver)


def ensure_gemm_symbol(dtype: str) -> str:
    """Compile (or load from the cache) ``dtype``'s entry once per process and
    register its address under :func:`symbol`; the name."""
    name = symbol(dtype)
    # Numba's compiler lock, not a lock of our own: a kernel's codegen (which holds
    # it) calls this too, and two locks taken in both orders could deadlock.
    with global_compiler_lock:
        if dtype not in _ENTRIES:
            with full_codegen():
                entry = _compile_entry(_DTYPES[dtype])
            llvm_binding.add_symbol(name, entry.address)
            _ENTRIES[dtype] = entry
    return name


@intrinsic
def call_gemm(typingctx, a, b, c, overwrite):
    """``C += A·B`` (``overwrite`` zero) or ``C = A·B``, through the registered entry."""
    arrays = (a, b, c)
    if not all(isinstance(x, types.Array) and x.ndim == 2 for x in arrays):
        return None
    if not (a.dtype == b.dtype == c.dtype and a.dtype in _DTYPES.values()):
        return None
    if not isinstance(overwrite, types.Integer):
        return None
    dtype = str(a.dtype)

    def codegen(context, builder, signature, args):
        name = ensure_gemm_symbol(dtype)
        i64 = ir.IntType(64)
        ptr = context.get_value_type(types.CPointer(a.dtype))
        fnty = ir.FunctionType(ir.VoidType(), [ptr, i64, i64, i64, i64, ptr, i64, i64, i64,
                                               ptr, i64, i64, i64])
        fn = cgutils.get_or_insert_function(builder.module, fnty, name)
        parts = []
        for ty, value in zip(arrays, args[:3]):
            array = make_array(ty)(context, builder, value)
            shape = cgutils.unpack_tuple(builder, array.shape, 2)
            strides = cgutils.unpack_tuple(builder, array.strides, 2)
            parts.append((array.data, shape, strides))
        (ad, (m, k), (sa0, sa1)), (bd, (_, n), (sb0, sb1)), (cd, _, (sc0, sc1)) = parts
        flag = context.cast(builder, args[3], overwrite, types.int64)
        builder.call(fn, [ad, m, k, sa0, sa1, bd, n, sb0, sb1, cd, sc0, sc1, flag])
        return context.get_dummy_value()

    return types.void(a, b, c, overwrite), codegen


@njit(error_model="numpy")
def gemm(A, B, C, overwrite):
    """``C += A·B`` (``overwrite`` 0) or ``C = A·B`` from Python, through the entry point."""
    call_gemm(A, B, C, overwrite)
