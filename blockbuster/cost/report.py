"""A plain-text table of a :class:`~.model.Cost`, for reports and the CLI."""

from __future__ import annotations

from .model import Cost

_HEADER = ("kernel", "loaded", "stored", "flops", "local", "fits")


def format_cost_table(cost: Cost) -> str:
    """One row per kernel (bytes and FLOPs as exact integers), a total row, and the
    compulsory traffic the global bytes compare against."""
    def row(name, k) -> tuple[str, ...]:
        return (name, f"{k.loaded_bytes:,}", f"{k.stored_bytes:,}", f"{k.flops:,}",
                f"{k.local_bytes:,}", "yes" if k.fits else "NO")

    rows = [row(k.name, k) for k in cost.per_kernel]
    rows.append(row(f"total ({cost.kernels} kernel{'' if cost.kernels == 1 else 's'})", cost))
    widths = [max(len(r[c]) for r in rows + [_HEADER]) for c in range(len(_HEADER))]

    def line(r) -> str:
        cells = [r[0].ljust(widths[0])] + [v.rjust(w) for v, w in zip(r[1:], widths[1:])]
        return "  ".join(cells).rstrip()

    rule = "-" * len(line(_HEADER))
    out = [line(_HEADER), rule, *map(line, rows[:-1]), rule, line(rows[-1])]
    out.append(f"global bytes {cost.global_bytes:,} (compulsory {cost.compulsory_bytes:,}); "
               f"time estimate {format_seconds(cost.time_estimate)} on {cost.hardware.name}")
    return "\n".join(out)


def format_seconds(t: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if t >= scale:
            return f"{t / scale:.3g} {unit}"
    return f"{t / 1e-9:.3g} ns"
