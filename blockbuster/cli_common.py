"""What the command line's subcommands share: the exit statuses, the TARGET and
--backend/--tune arguments, building the TARGET's program, the chosen backend and
JSON output (:mod:`blockbuster.cli` and its ``cli_*`` command modules use these)."""

from __future__ import annotations

import argparse
import json

from .cli_args import parse_assignments, seconds_arg
from .tuning.mode import DEFAULT_BUDGET_S

EXIT_OK, EXIT_VALIDATION_FAILED, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3
EXIT_BROKEN_PIPE = 128 + 13          # what a shell reports for a process killed by SIGPIPE


# ---------------------------------------------------------------------------
# Shared argument helpers
# ---------------------------------------------------------------------------

def add_program_args(p: argparse.ArgumentParser) -> None:
    """TARGET [--size DIM=INT]... [--block DIM=INT]..."""
    p.add_argument("workload", metavar="TARGET",
                   help="a built-in workload (see `blockbuster workloads`), a program "
                        "file PATH.bbp, or module.py:factory (a Python file whose "
                        "factory() returns a Program or (torch model, example inputs))")
    p.add_argument("--size", action="append", metavar="DIM=INT", default=[],
                   help="size of a dimension (repeatable), e.g. --size N=200")
    p.add_argument("--block", action="append", metavar="DIM=INT", default=[],
                   help="block size of a dimension (repeatable), e.g. --block N=64")


def build_program(args: argparse.Namespace):
    """The unfused program of the command's TARGET."""
    from .subjects import load_subject
    return load_subject(args.workload, parse_assignments(args.size, "--size"),
                        parse_assignments(args.block, "--block")).program


def print_json(obj) -> None:
    print(json.dumps(obj, indent=2, allow_nan=False))


def add_backend_arg(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--backend", metavar="NAME",
                   help=f"{what} (default: the registry's default, as for `run`); "
                        "fusion decides with this backend's hardware description")


def chosen_backend(args: argparse.Namespace):
    """The backend ``--backend`` names, else the registry's default (what ``run``
    compiles with), so every command fuses for the same hardware."""
    from .backends.registry import default_backend_name, get_backend
    return get_backend(args.backend or default_backend_name())


def add_tune_args(p: argparse.ArgumentParser, what: str = "") -> None:
    p.add_argument("--tune", choices=("measure", "model", "off"), default=None,
                   help=f"{what}how block sizes are chosen when no --block is given: "
                        "measure (the cost model's best few and the defaults are compiled "
                        "and timed; the default), model (the cost model alone) or off (the "
                        "workload's defaults); default $BLOCKBUSTER_TUNE, else measure. "
                        "Choices are cached in $BLOCKBUSTER_CACHE/tuning")
    p.add_argument("--tune-seconds", type=seconds_arg, metavar="S", default=None,
                   help="measurement budget: no new candidate is started after S seconds "
                        f"(default $BLOCKBUSTER_TUNE_SECONDS, else {DEFAULT_BUDGET_S:g})")
