"""The ``workloads`` and ``backends`` subcommands: list the built-in workloads and
the installed backends."""

from __future__ import annotations

import argparse

from .cli_common import EXIT_OK, print_json


# ---------------------------------------------------------------------------
# workloads
# ---------------------------------------------------------------------------

def add_workloads(sub) -> None:
    p = sub.add_parser("workloads", help="list the built-in workloads")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_workloads)


def _dims_text(w) -> str:
    # A derived dimension's default follows another one: "S=N".
    return " ".join(f"{d}={w.derived[d]}" if d in w.derived else f"{d}={n}"
                    for d, n in w.dims.items())


def cmd_workloads(args: argparse.Namespace) -> int:
    from .frontend.workloads import WORKLOADS
    if args.json:
        print_json({name: {"description": w.description, "dims": dict(w.dims),
                           "blocks": dict(w.blocks), "derived": dict(w.derived),
                           "params": dict(w.params)}
                    for name, w in WORKLOADS.items()})
        return EXIT_OK
    rows = [("WORKLOAD", "DIMENSIONS (default sizes)", "DESCRIPTION")]
    rows += [(name, _dims_text(w), w.description) for name, w in WORKLOADS.items()]
    width = [max(len(r[i]) for r in rows) for i in range(2)]
    for name, dims, description in rows:
        print(f"{name:<{width[0]}}  {dims:<{width[1]}}  {description}")
    return EXIT_OK


# ---------------------------------------------------------------------------
# backends
# ---------------------------------------------------------------------------

def add_backends(sub) -> None:
    p = sub.add_parser("backends", help="list the installed backends and their status")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_backends)


def cmd_backends(args: argparse.Namespace) -> int:
    from .backends.registry import default_backend_name, list_backends
    records = list_backends()
    default = default_backend_name()
    if args.json:
        print_json({"default": default,
                    "backends": [{"name": r.name, "description": r.description,
                                  "status": r.status, "error": r.error} for r in records]})
        return EXIT_OK
    width = max((len(r.name) for r in records), default=0)
    for r in records:
        mark = " (default)" if r.name == default else ""
        print(f"{r.name:<{width}}  {r.status:<6}  {r.description or ''}{mark}")
        if r.status != "ok" and r.error:
            print(f"{'':<{width}}  error: {r.error}")
    return EXIT_OK
