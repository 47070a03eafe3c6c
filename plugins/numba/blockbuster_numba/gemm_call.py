"""How generated kernels call the micro-kernel's driver: by a symbol's name, not by
linking the driver into every kernel.

A Numba function that calls another one links the callee's LLVM module into its own
and optimises the whole again: every kernel with a block matmul re-optimised the
driver (~370 KB of IR, ~0.6 CPU s per kernel, when the kernel itself took 0.2 s).
Instead each driver (:func:`.microkernel.driver`, :func:`.microkernel.driver_packed`)
is compiled once per dtype as a C-callable entry point (``@cfunc``, cached on disk
like the kernels; ~1.1 and ~0.6 CPU s once per machine), its address is registered with LLVM
under a fixed name (:func:`ensure_gemm_symbol`), and a kernel only declares that
name and calls it (:func:`call_gemm`). A kernel's cached machine code refers to the
name, so a generated module registers it before its kernels load (the header calls
:func:`ensure_gemm_symbol`).

The entry takes raw pointers, shapes and byte strides and rebuilds array views of
them (no copy, no owner), so the driver sees exactly the arrays the kernel passed.
:func:`gemm` is the same call for Python (tests, benchmarks).
"""

from __future__ import annotations

import ctypes
from pathlib import Path

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
_ENTRIES: dict[tuple, object] = {}     # (dtype name, kind) -> its compiled entry (kept alive)

#: The two entries: ``plain`` (:func:`.microkernel.driver`: packs B from its view) and
#: ``packed`` (:func:`.microkernel.driver_packed`: B already packed).
_KINDS = ("plain", "packed")   # each compiled when first needed


def symbol(dtype: str, kind: str = "plain") -> str:
    """The registered name of ``dtype``'s entry (the driver's hash in it: a kernel
    compiled against another driver never binds to this one)."""
    tag = "" if kind == "plain" else "_packed"
    return f"blockbuster_gemm{tag}_{dtype}_{microkernel.SOURCE_HASH}"


def _entry_signature(dtype, kind: str):
    p, i = types.CPointer(dtype), types.int64
    if kind == "packed":
        return types.void(p, i, i, i, i, p, i, i, i, i, i, p, i, i, i)
    return types.void(p, i, i, i, i, p, i, i, i, p, i, i, i)


def _compile_entry(dtype, kind: str):
    # The driver itself is the entry (compiled once, nothing linked in to optimise
    # again); Numba caches it beside microkernel.py, one entry per dtype's signature.
    fn = microkernel.driver_packed if kind == "packed" else microkernel.driver
    return cfunc(_entry_signature(dtype, kind), cache=True, error_model="numpy",
                 boundscheck=False)(fn)


#: Set in a compile-only worker (:func:`bind_placeholders`): the entries' names bound
#: to a placeholder address instead of the compiled drivers.
_PLACEHOLDERS = [False]
_PLACEHOLDER = ctypes.c_int64(0)       # never called: only its address is used


def bind_placeholders() -> None:
    """For a process that compiles kernels into the cache and never runs them
    (:mod:`.parallel_compile`'s workers): from now on :func:`ensure_gemm_symbol` binds
    the entries' names to a placeholder instead of compiling the drivers. A kernel's
    cached machine code refers to the name, not to an address (the process that
    loads it binds the name to the real entry first), so the worker need not wait
    for, nor repeat, the drivers' compile."""
    _PLACEHOLDERS[0] = True


def entry_ready(dtype: str, kind: str) -> bool:
    """Whether ``dtype``'s entry of ``kind`` is compiled in this process or (for some
    dtype: a guess, for planning) in Numba's cache on disk."""
    if (dtype, kind) in _ENTRIES:
        return True
    fn = microkernel.driver_packed if kind == "packed" else microkernel.driver
    return numba_cache_index(fn).exists()


def numba_cache_index(fn) -> Path:
    """Where Numba keeps the index of ``fn``'s cached machine code (a path that does
    not exist where this Numba keeps it elsewhere: planning then assumes a compile)."""
    from numba.core.caching import FunctionCache
    try:
        return Path(FunctionCache(fn)._cache_file._index_path)
    except (AttributeError, RuntimeError):     # Numba's internals moved; no cache dir
        return Path("/nonexistent/numba-index")


def ensure_gemm_symbol(dtype: str, kind: str = "plain") -> str:
    """Compile (or load from the cache) ``dtype``'s entry of ``kind`` once per process
    and register its address under :func:`symbol`; the name. After
    :func:`bind_placeholders`, bind the name to the placeholder instead."""
    name = symbol(dtype, kind)
    if _PLACEHOLDERS[0] and (dtype, kind) not in _ENTRIES:
        llvm_binding.add_symbol(name, ctypes.addressof(_PLACEHOLDER))
        return name
    # Numba's compiler lock, not a lock of our own: a kernel's codegen (which holds
    # it) calls this too, and two locks taken in both orders could deadlock.
    with global_compiler_lock:
        if kind == "plain":      # the plain driver calls the packed one by its name
            ensure_gemm_symbol(dtype, "packed")
        if (dtype, kind) not in _ENTRIES:
            with full_codegen():
                entry = _compile_entry(_DTYPES[dtype], kind)
            llvm_binding.add_symbol(name, entry.address)
            _ENTRIES[dtype, kind] = entry
    return name


def declare_entry(context, builder, dtype, kind: str = "plain"):
    """``dtype``'s entry of ``kind`` (``dtype`` a Numba type), compiled or loaded and
    registered, then declared in the module being built: its LLVM function, typed
    from :func:`_entry_signature` (the one statement of the entry's arguments)."""
    name = ensure_gemm_symbol(str(dtype), kind)
    signature = _entry_signature(dtype, kind)
    fnty = ir.FunctionType(ir.VoidType(), [context.get_value_type(t) for t in signature.args])
    return cgutils.get_or_insert_function(builder.module, fnty, name)


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

    def codegen(context, builder, signature, args):
        fn = declare_entry(context, builder, a.dtype)
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


@intrinsic
def call_gemm_packed(typingctx, a, pk, kfull, nfull, r0, c0, c, overwrite):
    """``C += A·B`` (``overwrite`` zero) or ``C = A·B``, ``B`` the ``A.shape[1] x
    C.shape[1]`` block at row ``r0``, column ``c0`` of the ``kfull x nfull`` matrix
    packed in ``pk`` (:func:`.microkernel.pack_panels`), through the packed entry."""
    if not (isinstance(a, types.Array) and a.ndim == 2 and isinstance(c, types.Array)
            and c.ndim == 2 and isinstance(pk, types.Array) and pk.ndim == 1):
        return None
    if not (a.dtype == pk.dtype == c.dtype and a.dtype in _DTYPES.values()):
        return None
    ints = (kfull, nfull, r0, c0, overwrite)
    if not all(isinstance(x, types.Integer) for x in ints):
        return None

    def codegen(context, builder, signature, args):
        fn = declare_entry(context, builder, a.dtype, "packed")
        av = make_array(a)(context, builder, args[0])
        m, k = cgutils.unpack_tuple(builder, av.shape, 2)
        sa0, sa1 = cgutils.unpack_tuple(builder, av.strides, 2)
        pv = make_array(pk)(context, builder, args[1])
        cv = make_array(c)(context, builder, args[6])
        n = cgutils.unpack_tuple(builder, cv.shape, 2)[1]
        sc0, sc1 = cgutils.unpack_tuple(builder, cv.strides, 2)
        kf, nf, r, col, flag = (context.cast(builder, args[i], signature.args[i], types.int64)
                                for i in (2, 3, 4, 5, 7))
        builder.call(fn, [av.data, m, k, sa0, sa1, pv.data, kf, nf, r, col, n, cv.data,
                          sc0, sc1, flag])
        return context.get_dummy_value()

    return types.void(a, pk, kfull, nfull, r0, c0, c, overwrite), codegen


@njit(error_model="numpy")
def gemm(A, B, C, overwrite):
    """``C += A·B`` (``overwrite`` 0) or ``C = A·B`` from Python, through the entry point."""
    call_gemm(A, B, C, overwrite)
