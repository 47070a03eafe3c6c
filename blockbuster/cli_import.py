"""The ``import`` subcommand: write the unfused program of a module.py:factory (and
the model's weights) to files."""

from __future__ import annotations

import argparse

from .cli_args import check_output_path, parse_assignments, write_new_file
from .cli_common import EXIT_OK
from .errors import UsageError


# ---------------------------------------------------------------------------
# import
# ---------------------------------------------------------------------------

def add_import(sub) -> None:
    p = sub.add_parser("import", help="write the unfused program of a model or factory",
                       description="Import module.py:factory (a PyTorch model with example "
                                   "inputs, or a Program) and write its unfused block "
                                   "program in the text form.")
    p.add_argument("workload", metavar="module.py:factory")
    p.add_argument("-o", "--output", metavar="FILE.bbp", required=True,
                   help="the program file to write (never overwritten)")
    p.add_argument("--weights", metavar="FILE.npz",
                   help="also write the model's parameter values and its example inputs "
                        "(for run --inputs)")
    p.add_argument("--block", action="append", metavar="DIM=INT", default=[],
                   help="block size of a dimension (repeatable)")
    p.set_defaults(func=cmd_import, size=[])


def cmd_import(args: argparse.Namespace) -> int:
    import blockbuster
    from .subjects import is_factory
    if not is_factory(args.workload):
        raise UsageError(f"{args.workload}: import takes module.py:factory")
    if not args.output.endswith(".bbp"):
        raise UsageError(f"-o {args.output}: the file name must end in .bbp (run and show "
                         "recognise program files by it)")
    check_output_path(args.output, allowed=(".bbp",), flag="-o")
    if args.weights:
        check_output_path(args.weights, allowed=(".npz",), flag="--weights")
        if not args.weights.endswith(".npz"):
            raise UsageError(f"--weights {args.weights}: the file name must end in .npz")
    from .subjects import load_subject
    subject = load_subject(args.workload, {}, parse_assignments(args.block, "--block"))
    program = subject.program
    if args.weights and not program.params:
        raise UsageError(f"--weights {args.weights}: {args.workload} has no parameter values "
                         "to write (its factory returned a Program, not a model); nothing "
                         "was written")
    write_new_file(args.output, blockbuster.format_program(program), allowed=(".bbp",))
    note = ""
    if args.weights:
        import numpy as np
        # The example inputs too: `run --inputs` then validates on them, not on random
        # normals (token ids drawn as floats select no embedding row at all).
        examples = subject.make_inputs(program, 0) if subject.kind == "torch" else {}
        np.savez(args.weights, **examples, **program.params)
        note = f", weights{' and example inputs' if examples else ''} in {args.weights}"
    print(f"wrote {args.output}: {len(program.kernels)} kernels, inputs "
          f"{', '.join(n for n in program.inputs if n not in program.weights)}{note}")
    return EXIT_OK
