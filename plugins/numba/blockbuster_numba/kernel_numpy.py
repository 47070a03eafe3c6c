"""``np`` as the generated kernels see it: NumPy, with the functions they call on
every block in its place: ``empty``, ``zeros`` and ``full`` as intrinsics (the
allocation lowered straight into the kernel).

Why: Numba compiles its implementation of ``np.empty``/``np.zeros``/... afresh in
every process, once per signature, and never caches it. An allocation through
Numba's ``np.zeros`` is three nested compiles (``zeros``, ``empty``, the zero fill;
~0.13 CPU s) per shape type, and a block shape is a tuple of literals: ``(64,)``,
``(4, 64)`` and ``(64, 64)`` each compiled again (0.85 of the 4.3 CPU s of fused
attention's cold compile, ``benchmarks/bench_compile.py``). The intrinsics below
emit the same NRT allocation (and memset, or fill loop) as LLVM IR in the kernel
that calls them: no function of their own to compile, type or cache. (Block matmuls
are the micro-kernel's, :mod:`.microkernel`: nothing here calls BLAS.)

Every other name is NumPy's own (``np.float32``, ``np.inf``, ...). The generated
module's Python driver (``run``) calls ``numpy`` itself.
"""

from __future__ import annotations

import types as pytypes

import numpy
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic
from numba.np.arrayobj import make_array, populate_array


def _array_type(shape, dtype):
    """The C-contiguous array type of ``np.empty(shape, dtype)``: ``shape`` an integer
    or a tuple of integers, ``dtype`` a NumPy scalar type (``np.float32``) or an
    array's ``.dtype``; else None (Numba then reports a typing error at the call)."""
    if isinstance(shape, types.Integer):
        ndim = 1
    elif isinstance(shape, types.BaseTuple) and all(
            isinstance(s, types.Integer) for s in shape.types):
        ndim = len(shape.types)
    else:
        return None
    if isinstance(dtype, types.DType):
        return types.Array(dtype.dtype, ndim, "C")
    if not isinstance(dtype, types.NumberClass):
        return None
    return types.Array(dtype.instance_type, ndim, "C")


def _allocate(context, builder, arrtype, shape_type, shape):
    """A new C-contiguous array of ``arrtype`` (NRT-allocated, uninitialised)."""
    intp = context.get_value_type(types.intp)
    if isinstance(shape_type, types.BaseTuple):
        dims = [context.cast(builder, v, t, types.intp)
                for v, t in zip(cgutils.unpack_tuple(builder, shape), shape_type.types)]
    else:
        dims = [context.cast(builder, shape, shape_type, types.intp)]
    itemsize = context.get_abi_sizeof(context.get_data_type(arrtype.dtype))
    strides = [intp(itemsize)]
    for dim in reversed(dims[1:]):
        strides.append(builder.mul(strides[-1], dim))
    strides.reverse()
    nbytes = intp(itemsize)
    for dim in dims:
        nbytes = builder.mul(nbytes, dim)
    align = context.get_preferred_array_alignment(arrtype.dtype)
    meminfo = context.nrt.meminfo_alloc_aligned(builder, nbytes, align)
    data = context.nrt.meminfo_data(builder, meminfo)
    array = make_array(arrtype)(context, builder)
    populate_array(array, data=builder.bitcast(data, array.data.type), shape=dims,
                   strides=strides, itemsize=intp(itemsize), meminfo=meminfo)
    return array, nbytes


@intrinsic
def empty(typingctx, shape, dtype):
    """``numpy.empty(shape, dtype)``, C order."""
    arrtype = _array_type(shape, dtype)
    if arrtype is None:
        return None

    def codegen(context, builder, signature, args):
        return _allocate(context, builder, arrtype, shape, args[0])[0]._getvalue()

    return arrtype(shape, dtype), codegen


@intrinsic
def zeros(typingctx, shape, dtype):
    """``numpy.zeros(shape, dtype)``, C order."""
    arrtype = _array_type(shape, dtype)
    if arrtype is None:
        return None

    def codegen(context, builder, signature, args):
        array, nbytes = _allocate(context, builder, arrtype, shape, args[0])
        cgutils.memset(builder, array.data, nbytes, 0)
        return array._getvalue()

    return arrtype(shape, dtype), codegen


@intrinsic
def full(typingctx, shape, fill_value, dtype):
    """``numpy.full(shape, fill_value, dtype)``, C order."""
    arrtype = _array_type(shape, dtype)
    if arrtype is None or not isinstance(fill_value, (types.Float, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        array, nbytes = _allocate(context, builder, arrtype, shape, args[0])
        value = context.cast(builder, args[1], fill_value, arrtype.dtype)
        itemsize = context.get_abi_sizeof(context.get_data_type(arrtype.dtype))
        count = builder.udiv(nbytes, nbytes.type(itemsize))
        with cgutils.for_range(builder, count) as loop:
            builder.store(value, builder.gep(array.data, [loop.index]))
        return array._getvalue()

    return arrtype(shape, fill_value, dtype), codegen


class _KernelNumpy(pytypes.ModuleType):
    """NumPy's namespace with the functions above in place of its own."""

    def __getattr__(self, name):
        return getattr(numpy, name)


np = _KernelNumpy("blockbuster_numba.kernel_numpy.np",
                  "NumPy as generated kernels call it (inline allocations, cached dot)")
np.empty, np.zeros, np.full = empty, zeros, full
