"""Block matmuls of the generated kernels: ``gemm_(A, B, C)`` computes ``C += A·B``,
``gemm_set_(A, B, C)`` ``C = A·B``.

A register-tiled micro-kernel, emitted as LLVM IR (``numba.extending.intrinsic``):
an ``MR x NR`` tile of ``C`` lives in ``MR * NR / VW`` vector registers (SSA values,
phi nodes of the k loop: never reloaded from memory, which plain Numba loops do;
``CPU-PERFORMANCE.md`` pitfall 5), and every step of k is one row of ``B`` (``NR /
VW`` vector loads) times ``MR`` broadcasts of ``A``, in fused multiply-adds.

Around it, the driver packs B the way BLIS does, from any strides (a transposed
block or a column slice costs no copy before the call): a ``kc x nc`` panel in
``NR``-wide column strips, zero-padded, kept in L2; each ``MR``-row strip of ``A``,
in L1, meets every strip of the panel in turn (:func:`_panel`). ``A`` is read where
it lies, at any strides, and a ragged tile of ``C`` is read and written through masked vector loads and stores (a
full one through plain ones): one instantiation of the micro-kernel serves every
block size and layout. No calls into BLAS: inside a
``prange`` there is no thread oversubscription, and on small blocks no per-call
overhead to amortise.

Tile sizes come from this CPU (read once, at import): the vector width from its
instruction set (AVX-512: 16 lanes and 32 registers; AVX2: 8 lanes and 16), ``MR``
and ``NR`` so that the accumulators, one row of ``B`` and a broadcast fit the
register file; ``KC`` and the panel width from the L1/L2 sizes. The generated module's header
names them (and this file's hash), so a module generated for other values is not
reused (the compiled module's cache key is its source).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from .kernel_numpy import np  # NumPy, with np.empty lowered inline (no compile of its own)
from llvmlite import binding as llvm_binding
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic
from numba.np.arrayobj import make_array, populate_array


def _host_features() -> set[str]:
    try:
        return {k for k, v in llvm_binding.get_host_cpu_features().items() if v}
    except Exception:      # unknown host: the portable choice
        return set()


def tile_shape(features: set[str]) -> tuple[int, int, int]:
    """``(VW, MR, NR)``: float32 lanes per vector register, rows and columns of the
    register tile. AVX-512: 8 x 32 (16 accumulators of 32 registers); AVX2/AVX: 6 x 16
    (12 of 16, the shape of OpenBLAS's Haswell kernel); else 4 x 8 of SSE vectors."""
    if "avx512f" in features:
        return 16, 8, 32
    if "avx" in features:
        return 8, 6, 16
    return 4, 4, 8


def _cache_bytes(level: int, default: int) -> int:
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    try:
        for index in sorted(base.glob("index*")):
            if (index / "level").read_text().strip() != str(level):
                continue
            if (index / "type").read_text().strip() not in ("Data", "Unified"):
                continue
            text = (index / "size").read_text().strip().upper()
            scale = {"K": 1 << 10, "M": 1 << 20}.get(text[-1:], 1)
            return int(text.rstrip("KMB")) * scale
    except (OSError, ValueError):
        pass
    return default


VW, MR, NR = tile_shape(_host_features())
#: k-depth of a packed panel: an MR-row strip of A (KC*MR floats) stays in half of L1;
#: at most 256 with AVX2 (measured there: 256 beat 512 by 5-10 % at every block shape
#: tried), 512 with AVX-512 (Zen 4, 512x1024x704 and 512x704x1024 blocks on one and
#: two threads: 512 beat 256 by 1.5-3 % in BLIS's loop order, the micro-kernel's
#: per-tile cost -- C's loads and stores, its row pointers -- spread over twice the
#: k steps; the two are even in :func:`_panel`'s order).
KC = max(64, min(512 if VW == 16 else 256,
                 (_cache_bytes(1, 32 << 10) // 2) // (4 * MR) // 16 * 16))
#: Bytes of a packed B panel (``kc x nc`` floats): half of L2. Its width follows the
#: call's k-depth (a shallow block gets a wide panel: A is re-packed once per panel).
PANEL_BYTES = _cache_bytes(2, 512 << 10) // 2

#: This file's hash: part of the driver's symbol name (:mod:`.gemm_call`).
#: Everything the drivers compile lives in this one file on purpose: Numba's disk
#: cache of a ``cache=True`` function is checked against its own file's timestamp
#: only, so a helper moved to another module could change while a stale driver
#: still loads (split the file only with the drivers' cache keyed on both).
SOURCE_HASH = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:12]
#: Names the generated module's header (the values differ per CPU, the hash per edit).
SIGNATURE = (f"gemm micro-kernel {MR}x{NR} (vector {VW}), panels KC={KC} B panel {PANEL_BYTES} B, "
             f"microkernel.py sha256 {SOURCE_HASH}")


def _element(dtype) -> tuple:
    """``(LLVM type, bytes)`` of a float32 or float64 element."""
    if dtype == types.float64:
        return ir.DoubleType(), 8
    return ir.FloatType(), 4


def _llvm_prefetch(module):
    """LLVM's prefetch intrinsic ``(address, rw, locality, cache type)``, declared in
    ``module``."""
    i32 = ir.IntType(32)
    return cgutils.get_or_insert_function(module, ir.FunctionType(
        ir.VoidType(), [ir.IntType(8).as_pointer(), i32, i32, i32]), "llvm.prefetch.p0i8")


def _no_unroll(module):
    """Loop metadata that keeps LLVM from unrolling a loop. Unrolled twice, the k
    loop addressed each row of A through two pointers (one per copy): twelve of them
    on AVX2, of which five lived on the stack and were reloaded every step."""
    disable = module.add_metadata([ir.MetaDataString(module, "llvm.loop.unroll.disable")])
    loop = module.add_metadata([None, disable])
    loop.operands = (loop, disable)        # a loop's metadata names itself first
    return loop


def _micro(mr: int, nr: int, vw: int):
    """The micro-kernel intrinsic ``(a, aoff, ars, acs, bp, boff, kc, c, coff, crs, m,
    n, store)``: the ``m x n`` corner of an ``mr x nr`` tile, ``C += A · B`` (with
    ``store`` true, ``C = A · B``).

    * ``A``: element ``(i, k)`` at byte ``aoff + i*ars + k*acs`` of the pointer ``a``:
      any strides, read where it lies. A row-major block's ``mr`` rows are ``mr``
      sequential streams, each broadcast element loaded once, as from a packed strip;
      packing A cost a third of a 512x2048x128 block's time on AVX-512. Rows past
      ``m`` read row ``m - 1`` again (in bounds; their sums are never stored).
    * ``B``: ``bp[boff:]``, packed ``kc x nr`` (row-major, zero-padded past ``n``).
    * ``C``: the tile at byte ``coff`` of the pointer ``c``, rows ``crs`` bytes apart,
      unit column stride. Only rows ``< m`` and columns ``< n`` are read or written
      (masked vector loads and stores): a ragged tile needs no scratch copy.

    One instantiation serves every case (each call site is a copy of the tile's IR to
    optimise: six of them, with the scratch tile's copy loops, took half the
    driver's 1.4 s compile). ``vw`` is in float32 lanes: float64 arrays get half as
    many lanes per vector and so twice the accumulators per row, and go over the tile
    in row passes of as many accumulators as float32's one pass (each pass its own k
    loop: more would spill the register file)."""

    @intrinsic
    def micro(typingctx, a, aoff, ars, acs, bp, boff, kc, c, coff, crs, m, n, store):
        if not (isinstance(a, types.CPointer) and isinstance(c, types.CPointer)
                and a.dtype == bp.dtype == c.dtype
                and a.dtype in (types.float32, types.float64)):
            return None
        i = types.int64
        sig = types.void(a, i, i, i, bp, i, i, c, i, i, i, i, types.boolean)

        def codegen(context, builder, signature, args):
            a_v, aoff_v, ars_v, acs_v, bp_v, boff_v, kc_v, c_v, coff_v, crs_v, m_v, n_v, \
                store_v = args
            fty, size = _element(signature.args[0].dtype)
            lanes = vw * 4 // size
            nv = nr // lanes
            passes = size // 4                 # float64: two passes of half the rows
            rows_per_pass = -(-mr // passes)
            i64, i32, i8p = ir.IntType(64), ir.IntType(32), ir.IntType(8).as_pointer()
            vty = ir.VectorType(fty, lanes)
            mty = ir.VectorType(ir.IntType(1), lanes)

            def const(v):
                return ir.Constant(i64, v)

            b_arr = context.make_array(signature.args[4])(context, builder, bp_v)
            b_ptr = builder.gep(b_arr.data, [boff_v])
            a_base = builder.gep(builder.bitcast(a_v, i8p), [aoff_v])
            c_base = builder.gep(builder.bitcast(c_v, i8p), [coff_v])
            last = builder.sub(m_v, const(1))
            # Where row i of A and C start (hoisted out of the k loop); A's rows past
            # m repeat its last row: in bounds, and never stored.
            a_rows, c_rows, row_masks = [], [], []
            lane_index = [ir.Constant(ir.VectorType(i64, lanes),
                                      [v * lanes + j for j in range(lanes)]) for v in range(nv)]
            n_splat = builder.insert_element(ir.Constant(ir.VectorType(i64, lanes), ir.Undefined),
                                             n_v, ir.Constant(i32, 0))
            n_splat = builder.shuffle_vector(n_splat, n_splat,
                                             ir.Constant(ir.VectorType(i32, lanes), [0] * lanes))
            col_masks = [builder.icmp_signed("<", idx, n_splat) for idx in lane_index]
            full = builder.and_(builder.icmp_signed(">=", m_v, const(mr)),
                                builder.icmp_signed(">=", n_v, const(nr)))
            for row in range(mr):
                r = builder.select(builder.icmp_signed("<", const(row), m_v), const(row), last)
                a_rows.append(builder.gep(a_base, [builder.mul(r, ars_v)]))
                c_rows.append(builder.gep(c_base, [builder.mul(const(row), crs_v)]))
                inside = builder.icmp_signed("<", const(row), m_v)
                row_masks.append([builder.select(inside, cm, ir.Constant(mty, [0] * lanes))
                                  for cm in col_masks])
            fma = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(vty, [vty, vty, vty]),
                f"llvm.fma.v{lanes}{'f64' if size == 8 else 'f32'}")
            vname = f"v{lanes}{'f64' if size == 8 else 'f32'}"
            masked_load = cgutils.get_or_insert_function(builder.module, ir.FunctionType(
                vty, [vty.as_pointer(), i32, mty, vty]), f"llvm.masked.load.{vname}.p0")
            masked_store = cgutils.get_or_insert_function(builder.module, ir.FunctionType(
                ir.VoidType(), [vty, vty.as_pointer(), i32, mty]), f"llvm.masked.store.{vname}.p0")
            zero = ir.Constant(vty, [0.0] * lanes)
            undef = ir.Constant(vty, ir.Undefined)
            splat_mask = ir.Constant(ir.VectorType(i32, lanes), [0] * lanes)

            # The tile of C is read after the k loop: fetch it now, so that its cache
            # misses overlap the loop instead of stalling the store (a prefetch never
            # faults, past the corner included).
            prefetch = _llvm_prefetch(builder.module)
            for row_ptr in c_rows:
                for byte in list(range(0, nr * size, 64)) + [nr * size - 1]:
                    builder.call(prefetch, [builder.gep(row_ptr, [const(byte)]),
                                            ir.Constant(i32, 1), ir.Constant(i32, 3),
                                            ir.Constant(i32, 1)])

            for first in range(0, mr, rows_per_pass):
                rows = range(first, min(mr, first + rows_per_pass))
                pre = builder.block
                loop = builder.append_basic_block("mk.loop")
                done = builder.append_basic_block("mk.done")
                builder.cbranch(builder.icmp_signed(">", kc_v, const(0)), loop, done)

                builder.position_at_end(loop)
                k = builder.phi(i64, "k")
                k.add_incoming(const(0), pre)
                accs = []
                for _ in range(len(rows) * nv):
                    p = builder.phi(vty)
                    p.add_incoming(zero, pre)
                    accs.append(p)
                brow = builder.gep(b_ptr, [builder.mul(k, const(nr))])
                bvec = [builder.load(builder.bitcast(
                    builder.gep(brow, [const(v * lanes)]), vty.as_pointer()),
                    align=size) for v in range(nv)]
                a_step = builder.mul(k, acs_v)
                new = []
                for n, row in enumerate(rows):
                    a = builder.load(builder.bitcast(builder.gep(a_rows[row], [a_step]),
                                                     fty.as_pointer()), align=size)
                    splat = builder.shuffle_vector(builder.insert_element(undef, a, ir.Constant(
                        i32, 0)), undef, splat_mask)
                    for v in range(nv):
                        new.append(builder.call(fma, [splat, bvec[v], accs[n * nv + v]]))
                k_next = builder.add(k, const(1))
                latch = builder.block
                k.add_incoming(k_next, latch)
                for p, n in zip(accs, new):
                    p.add_incoming(n, latch)
                back = builder.cbranch(builder.icmp_signed("<", k_next, kc_v), loop, done)
                back.set_metadata("llvm.loop", _no_unroll(builder.module))

                builder.position_at_end(done)
                outs = []
                for n in new:     # phis first: the tile, or zeros when kc = 0
                    out = builder.phi(vty)
                    out.add_incoming(zero, pre)
                    out.add_incoming(n, latch)
                    outs.append(out)
                align = ir.Constant(i32, size)

                def write_tile(add, masked):
                    for n, row in enumerate(rows):
                        row_ptr = builder.bitcast(c_rows[row], fty.as_pointer())
                        for v in range(nv):
                            ptr = builder.bitcast(builder.gep(
                                row_ptr, [const(v * lanes)]), vty.as_pointer())
                            mask, out = row_masks[row][v], outs[n * nv + v]
                            if add:
                                old = (builder.call(masked_load, [ptr, align, mask, zero])
                                       if masked else builder.load(ptr, align=size))
                                out = builder.fadd(old, out)
                            if masked:
                                builder.call(masked_store, [out, ptr, align, mask])
                            else:
                                builder.store(out, ptr, align=size)

                # Storing, C is not read (a load would cost its bandwidth even unused).
                # A full tile takes plain vector stores: without AVX-512, a masked
                # store (vmaskmovps) is microcoded on AMD's cores, many micro-ops each,
                # and a 6x16 tile has twelve of them.
                with builder.if_else(store_v) as (storing, adding):
                    for add in (False, True):
                        with (adding if add else storing):
                            with builder.if_else(full) as (whole, ragged):
                                with whole:
                                    write_tile(add, masked=False)
                                with ragged:
                                    write_tile(add, masked=True)
            return context.get_dummy_value()

        return sig, codegen

    return micro


_micro_tile = _micro(MR, NR, VW)

_OPTS = dict(cache=True, error_model="numpy", nogil=True, boundscheck=False)


def _row_copier(width: int):
    """The intrinsic ``(dst, doff, src, row, col)``: ``dst[doff:doff+width] =
    src[row, col:col+width]`` for a 2-D ``src`` of unit column stride, as one copy of
    a constant size (vector moves; indexing an array of unknown strides element by
    element does not vectorise, and packing B cost a third of a 128x1024x64 block)."""

    @intrinsic
    def copy(typingctx, dst, doff, src, row, col):
        if dst.dtype != src.dtype or dst.dtype not in (types.float32, types.float64):
            return None
        sig = types.void(dst, types.int64, src, types.int64, types.int64)

        def codegen(context, builder, signature, args):
            dst_v, doff_v, src_v, row_v, col_v = args
            fty, size = _element(signature.args[0].dtype)
            i64 = ir.IntType(64)
            d = builder.gep(context.make_array(signature.args[0])(context, builder, dst_v).data,
                            [doff_v])
            s_arr = context.make_array(signature.args[2])(context, builder, src_v)
            row_stride = cgutils.unpack_tuple(builder, s_arr.strides, 2)[0]
            off = builder.add(builder.mul(row_v, row_stride),
                              builder.mul(col_v, ir.Constant(i64, size)))
            base = builder.bitcast(s_arr.data, ir.IntType(8).as_pointer())
            src_ptr = builder.bitcast(builder.gep(base, [off]), fty.as_pointer())
            cgutils.raw_memcpy(builder, d, src_ptr, ir.Constant(i64, width), size)
            return context.get_dummy_value()

        return sig, codegen

    return copy


_copy_strip_row = _row_copier(NR)


@njit(inline="always", **{k: v for k, v in _OPTS.items() if k != "cache"})
def _pack_b(B, k0, kc, j0, nc, bp):
    """bp[t, k, j] (flat) = B[k0+k, j0+t*NR+j] in NR-wide strips, zero-padded."""
    strips = (nc + NR - 1) // NR
    unit_columns = B.strides[1] == B.itemsize
    for t in range(strips):
        jt = j0 + t * NR
        w = min(NR, j0 + nc - jt)
        base = t * kc * NR
        if unit_columns and w == NR:
            for k in range(kc):
                _copy_strip_row(bp, base + k * NR, B, k0 + k, jt)
            continue
        # A transposed B reads down its columns (unit stride in k); others likewise.
        for j in range(w):
            for k in range(kc):
                bp[base + k * NR + j] = B[k0 + k, jt + j]
        for k in range(kc):
            for j in range(w, NR):
                bp[base + k * NR + j] = 0.0


@intrinsic
def radd(typingctx, a, b):
    """``a + b`` that LLVM may reassociate (``reassoc`` on this one addition only): a
    running sum over a loop of it vectorises into partial sums per lane. Only the
    order in which a row's terms are added changes, never the terms themselves; every
    other operation stays IEEE (see runtime.FASTMATH: a global ``reassoc`` rewrote
    terms). The generated kernels use it as ``radd_``, the drivers' narrow products
    here."""
    if a != b or a not in (types.float32, types.float64):
        return None
    sig = a(a, b)

    def codegen(context, builder, signature, args):
        return builder.fadd(args[0], args[1], flags=("reassoc", "nsz"))

    return sig, codegen


@intrinsic
def _run(typingctx, ptr, byte, count):
    """The 1-D array of ``count`` contiguous elements at byte ``byte`` of ``ptr`` (a
    view: no copy, no owner; C layout, so that loops over it vectorise)."""
    if not isinstance(ptr, types.CPointer) or ptr.dtype not in (types.float32, types.float64):
        return None
    arrtype = types.Array(ptr.dtype, 1, "C")

    def codegen(context, builder, signature, args):
        p, off, n = args
        i8p = ir.IntType(8).as_pointer()
        data = builder.bitcast(builder.gep(builder.bitcast(p, i8p), [off]), p.type)
        array = make_array(arrtype)(context, builder)
        itemsize = context.get_abi_sizeof(context.get_data_type(ptr.dtype))
        populate_array(array, data=data, shape=[n], strides=[ir.Constant(n.type, itemsize)],
                       itemsize=ir.Constant(n.type, itemsize), meminfo=None)
        return array._getvalue()

    return arrtype(ptr, types.int64, types.int64), codegen


@intrinsic
def _view(typingctx, ptr, rows, cols, row_stride, col_stride):
    """The 2-D array of ``rows x cols`` elements at ``ptr``, strides in bytes (a view:
    no copy, no owner)."""
    if not isinstance(ptr, types.CPointer) or ptr.dtype not in (types.float32, types.float64):
        return None
    arrtype = types.Array(ptr.dtype, 2, "A")

    def codegen(context, builder, signature, args):
        data, r, c, s0, s1 = args
        array = make_array(arrtype)(context, builder)
        itemsize = context.get_abi_sizeof(context.get_data_type(ptr.dtype))
        populate_array(array, data=data, shape=[r, c], strides=[s0, s1],
                       itemsize=ir.Constant(r.type, itemsize), meminfo=None)
        return array._getvalue()

    return arrtype(ptr, rows, cols, row_stride, col_stride), codegen


@intrinsic
def _view_flat(typingctx, ptr, count):
    """The 1-D array of ``count`` contiguous elements at ``ptr`` (a view: no copy, no
    owner)."""
    if not isinstance(ptr, types.CPointer) or ptr.dtype not in (types.float32, types.float64):
        return None
    arrtype = types.Array(ptr.dtype, 1, "C")

    def codegen(context, builder, signature, args):
        data, n = args
        array = make_array(arrtype)(context, builder)
        itemsize = context.get_abi_sizeof(context.get_data_type(ptr.dtype))
        populate_array(array, data=data, shape=[n], strides=[ir.Constant(n.type, itemsize)],
                       itemsize=ir.Constant(n.type, itemsize), meminfo=None)
        return array._getvalue()

    return arrtype(ptr, count), codegen


@njit(inline="always", **{k: v for k, v in _OPTS.items() if k != "cache"})
def _panel(a, a_off, sa0, sa1, m, kc, bp, b_off, b_step, c, c_off, sc0, sc1, nc, store, size):
    """``C (+)= A · B`` over one packed panel of B: ``A`` the ``m x kc`` block at byte
    ``a_off`` of ``a``, ``B``'s ``NR``-wide strips at ``bp[b_off + t*b_step:]``,
    ``C`` the ``m x nc`` block at byte ``c_off`` of ``c``.

    Each ``MR``-row strip of A (``MR x kc``, in L1 after its first tile) meets every
    strip of B in turn (``kc x NR`` each, consecutive in the packed panel: one
    sequential stream out of L2 across the strip's tiles). Per step of k the
    micro-kernel then reads ``NR`` floats of B from L2 and ``MR`` of A from L1.
    BLIS's order (each strip of B against every strip of a row block of A) read both
    from L2 here: a ``kc x NR`` strip at KC=512 is twice L1, and every tile restarted
    B's stream at its strip's start (Zen 4, 512x1024x704 and 512x704x1024 blocks on
    one thread: this order 2-3 % faster; FFN and LayerNorm workloads 2-3 % faster,
    attention unchanged). A prefetch of the next strip of A cost ~1 %."""
    strips = (nc + NR - 1) // NR
    for i0 in range(0, m, MR):
        for t in range(strips):
            jt = t * NR
            _micro_tile(a, a_off + i0 * sa0, sa0, sa1, bp, b_off + t * b_step, kc,
                        c, c_off + i0 * sc0 + jt * sc1, sc0, min(MR, m - i0),
                        min(NR, nc - jt), store)


@intrinsic
def _packed_entry(typingctx, a, a_off, m, k, sa0, sa1, bp, n, c, c_off, sc0, sc1, overwrite):
    """:func:`driver_packed` on ``bp``, one panel packed as :func:`pack_panels` lays
    out a ``k x n`` matrix, ``A`` at byte ``a_off`` of ``a`` and ``C`` at byte
    ``c_off`` of ``c``: called through its registered entry point (:mod:`.gemm_call`),
    so that the micro-kernel's tile and its loops are compiled once, in that entry,
    and not again in this driver (the two drivers' cold compile: ~2.6 -> ~1.7 CPU s)."""
    if not (isinstance(a, types.CPointer) and isinstance(c, types.CPointer)
            and isinstance(bp, types.Array) and a.dtype == bp.dtype == c.dtype
            and a.dtype in (types.float32, types.float64)):
        return None
    i = types.int64
    sig = types.void(a, i, i, i, i, i, bp, i, c, i, i, i, types.boolean)

    def codegen(context, builder, signature, args):
        from .gemm_call import declare_entry
        a_v, aoff_v, m_v, k_v, sa0_v, sa1_v, bp_v, n_v, c_v, coff_v, sc0_v, sc1_v, ow_v = args
        fn = declare_entry(context, builder, a.dtype, "packed")
        i64, i8p = ir.IntType(64), ir.IntType(8).as_pointer()
        ptr = context.get_value_type(a)

        def at(p, off):
            return builder.bitcast(builder.gep(builder.bitcast(p, i8p), [off]), ptr)

        data = context.make_array(signature.args[6])(context, builder, bp_v).data
        zero = ir.Constant(i64, 0)
        builder.call(fn, [at(a_v, aoff_v), m_v, k_v, sa0_v, sa1_v, data, k_v, n_v, zero, zero,
                          n_v, at(c_v, coff_v), sc0_v, sc1_v, builder.zext(ow_v, i64)])
        return context.get_dummy_value()

    return sig, codegen


#: Products with at most this many columns skip the tile: an ``NR``-wide tile would
#: do ``NR / n`` times the multiply-adds (a matrix-vector product 32x on AVX-512).
NARROW = max(1, NR // 4)


@njit(inline="always", **{k: v for k, v in _OPTS.items() if k != "cache"})
def _narrow(a, m, k, sa0, sa1, B, c, sc0, sc1, overwrite, size):
    """``C (+)= A·B`` for ``B`` of at most :data:`NARROW` columns (``k > 0``), where
    ``A``'s rows or columns are contiguous: a dot product along ``k`` per element of
    ``C`` (rows; ``B``'s columns copied contiguous first), or a scaled column of ``A``
    added per step of ``k`` (columns). ``A`` is read once either way, each load
    vectorised, and every multiply-add is one the product needs."""
    n = B.shape[1]
    C = _view(c, m, n, sc0, sc1)
    if sa1 == size:
        bt = np.empty((n, k), B.dtype)
        for kk in range(k):
            for j in range(n):
                bt[j, kk] = B[kk, j]
        for i in range(m):
            row = _run(a, i * sa0, k)
            for j in range(n):
                col = bt[j]
                acc = row[0] * col[0]
                for kk in range(1, k):
                    acc = radd(acc, row[kk] * col[kk])
                C[i, j] = acc if overwrite != 0 else C[i, j] + acc
        return
    sums = np.zeros((n, m), B.dtype)
    for kk in range(k):
        col = _run(a, kk * sa1, m)
        for j in range(n):
            bj = B[kk, j]
            out = sums[j]
            for i in range(m):
                out[i] += bj * col[i]
    for i in range(m):
        for j in range(n):
            C[i, j] = sums[j, i] if overwrite != 0 else C[i, j] + sums[j, i]


def driver(a, m, k, sa0, sa1, b, n, sb0, sb1, c, sc0, sc1, overwrite):
    """``C += A·B``, or with ``overwrite`` (non-zero) ``C = A·B``, of the ``m x k``,
    ``k x n`` and ``m x n`` arrays at ``a``, ``b`` and ``c`` (strides in bytes;
    float32 or float64, all three alike; ``C`` of unit column stride). Overwriting,
    the first panel of k stores its tiles instead of adding them: no zeroing of C
    first, no read of it (a product block of flash attention's depth-64 ``Q·Kᵀ``
    spent a fifth of its time on that). A is read where it lies, at any strides; B is
    packed a panel at a time, and each panel multiplied by :func:`driver_packed`. A
    ``B`` of at most :data:`NARROW` columns takes :func:`_narrow` instead (``A``'s rows
    or columns contiguous, as views of blocks are).

    Compiled only as a C-callable entry point (:mod:`.gemm_call`), never as a Numba
    function that kernels link in."""
    if m == 0 or n == 0 or (k == 0 and overwrite == 0):
        return
    B = _view(b, k, n, sb0, sb1)
    size = B.itemsize
    if k > 0 and n <= NARROW and (sa1 == size or sa0 == size):
        _narrow(a, m, k, sa0, sa1, B, c, sc0, sc1, overwrite, size)
        return
    kc_max = max(1, min(KC, k))
    nc_step = max(NR, PANEL_BYTES // (size * kc_max) // NR * NR)
    nc_max = min(nc_step, (n + NR - 1) // NR * NR)
    bp = np.empty(kc_max * ((nc_max + NR - 1) // NR) * NR, B.dtype)
    for k0 in range(0, max(k, 1), KC):       # k = 0, overwriting: one pass of zeros
        kc = min(KC, k - k0)
        store = overwrite != 0 and k0 == 0
        for j0 in range(0, n, nc_step):
            nc = min(nc_step, n - j0)
            _pack_b(B, k0, kc, j0, nc, bp)
            _packed_entry(a, k0 * sa1, m, kc, sa0, sa1, bp, nc, c, j0 * sc1, sc0, sc1, store)


# -- pre-packed right operands ---------------------------------------------------------
#
# A block matmul whose right operand is a view of a program input (a weight, a key or
# value matrix) re-packs the same panels in every parallel instance of its kernel: a
# 1024x2816 weight costs ~1.5 ms per packing on one core, and RMSNorm+FFN-SwiGLU at
# 512-row blocks packed each of its three weights four times per call. Instead the
# generated module packs such an input once per call (once per binding for a bound,
# read-only weight) into the layout below, and the kernels pass it to
# :func:`driver_packed`, which only points into it.
#
# Layout of a ``K x N`` matrix: panels of ``KC`` rows (the last may be shallower), each
# panel its ``NR``-wide column strips, each strip ``depth x NR`` floats row-major,
# zero-padded past ``N``: strip ``s`` of panel ``p`` starts at
# ``p*KC*Np + s*depth_p*NR`` (``Np``: N rounded up to NR). Any run of rows of a strip
# is contiguous, so a view starting at any row is served; a view must start at a
# strip's first column (the code generator checks, else it packs as before).


def packed_size(k: int, n: int) -> int:
    """Elements of the packed layout of a ``k x n`` matrix."""
    return k * (-(-n // NR) * NR)


def pack_panels(B, out, lo, hi):
    """Column strips ``lo .. hi`` of ``out`` (1-D, :func:`packed_size` elements) =
    ``B`` (2-D, any strides) in the pre-packed layout, in every panel: threads given
    disjoint strips pack one matrix together. Compiled per dtype by :mod:`.prepack`
    (for any strides: a transposed weight needs no compile of its own)."""
    k, n = B.shape
    strips = (n + NR - 1) // NR
    hi = min(hi, strips)
    if lo >= hi:
        return
    for p0 in range(0, k, KC):
        depth = min(KC, k - p0)
        _pack_b(B, p0, depth, lo * NR, min(n, hi * NR) - lo * NR,
                out[p0 * strips * NR + lo * depth * NR:])


def driver_packed(a, m, k, sa0, sa1, pk, kfull, nfull, r0, c0, n, c, sc0, sc1, overwrite):
    """``C += A·B`` (``overwrite``: ``C = A·B``) where ``B`` is rows ``r0 .. r0+k`` and
    columns ``c0 .. c0+n`` of the ``kfull x nfull`` matrix packed at ``pk``
    (:func:`pack_panels`; ``c0`` a multiple of ``NR``). ``A`` and ``C`` as in
    :func:`driver`. The loops are the driver's, over the packed panels' row runs."""
    if m == 0 or n == 0 or (k == 0 and overwrite == 0):
        return
    strips = (nfull + NR - 1) // NR
    P = _view_flat(pk, max(1, kfull * strips * NR))
    size = P.itemsize
    if k == 0:            # overwriting with an empty sum: the tiles' zeros
        _panel(a, 0, sa0, sa1, m, 0, P, 0, 0, c, 0, sc0, sc1, n, True, size)
        return
    kc_max = min(KC, k)
    nc_step = max(NR, PANEL_BYTES // (size * kc_max) // NR * NR)
    ks = r0
    while ks < r0 + k:
        p = ks // KC
        depth = min(KC, kfull - p * KC)              # the packed panel's depth
        ke = min(p * KC + depth, r0 + k)
        kc = ke - ks
        store = overwrite != 0 and ks == r0
        base = p * KC * strips * NR + (ks - p * KC) * NR
        for j0 in range(0, n, nc_step):
            nc = min(nc_step, n - j0)
            _panel(a, (ks - r0) * sa1, sa0, sa1, m, kc, P,
                   base + (c0 + j0) // NR * depth * NR, depth * NR, c, j0 * sc1, sc0, sc1, nc,
                   store, size)
        ks = ke
