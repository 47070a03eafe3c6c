"""The command line: ``python -m blockbuster COMMAND ...`` (also the ``blockbuster`` script).

Each subcommand is one ``add_*`` function that declares its arguments and one
``cmd_*`` function that does the work and returns the exit status, in a module of its
own (``cli_run.py``, ``cli_show.py``, ``cli_import.py``, ``cli_lists.py``,
``cli_rules.py``; what they share is ``cli_common.py``); add a command by writing both
and listing the ``add_*`` in :data:`COMMANDS`. This module parses the command line and
turns errors into exit statuses and one-line messages.

Exit status: 0 success; 1 validation failed or a rule is unsound (nothing else);
2 bad usage or input; 3 an internal error (a bug: one line and a hint, the traceback
only with ``--debug``); 141 stdout was closed early (``... | head``), quietly. User
mistakes (:class:`~blockbuster.errors.BlockbusterError`) print one ``error: ...``
line on stderr (a source error prints its file:line:col excerpt); no command prints
a Python traceback without ``--debug``.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
import warnings
from typing import Callable, Sequence

from .cli_args import (check_output_path, parse_assignments, positive_int_arg,  # noqa: F401
                       seconds_arg, seed_arg, write_new_file)
from .cli_common import (EXIT_BROKEN_PIPE, EXIT_INTERNAL, EXIT_OK,  # noqa: F401
                         EXIT_USAGE, EXIT_VALIDATION_FAILED, add_backend_arg,
                         add_program_args, add_tune_args, build_program, chosen_backend,
                         print_json)
from .cli_import import add_import, cmd_import  # noqa: F401
from .cli_lists import add_backends, add_workloads, cmd_backends, cmd_workloads  # noqa: F401
from .cli_rules import add_rules, cmd_rules_check, cmd_rules_list  # noqa: F401
from .cli_run import (DOT_PREFIX, add_rule_args, add_run, check_user_rules,  # noqa: F401
                      cmd_run, load_rule_args)
from .cli_show import add_show, cmd_show  # noqa: F401
from .errors import BlockbusterError, SourceError


# ---------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------

#: The subcommands, in the order ``--help`` lists them.
COMMANDS: list[Callable] = [add_run, add_show, add_import, add_workloads, add_backends,
                             add_rules]


#: The command line being parsed (for :meth:`_Parser.error`'s ``--json`` check).
_ARGV: list[str] = []


class _Parser(argparse.ArgumentParser):
    """argparse, with bad usage reported like every other bad input: one line,
    ``error: ...``, exit status 2 (the full usage is one ``--help`` away)."""

    def error(self, message: str):
        self._usage_exit(f"error: {_one_line(message)} (usage: {self.prog} --help)")

    @staticmethod
    def _usage_exit(line: str):
        # With --json anywhere on the line, stdout carries the one JSON object that
        # every other error gives too (the subcommand's parser sees only its part).
        if "--json" in _ARGV:
            print_json({"error": line.removeprefix("error: "), "exit_status": 2})
        print(line, file=sys.stderr)
        raise SystemExit(2)

    def parse_args(self, args=None, namespace=None):
        # Options a subcommand does not know reach the top-level parser as extras:
        # point to that subcommand's --help, which lists what it takes.
        ns, extras = self.parse_known_args(args, namespace)
        if extras:
            command = getattr(ns, "command", None)
            prog = f"{self.prog} {command}" if command else self.prog
            self._usage_exit(f"error: unrecognized arguments: {' '.join(extras)} "
                             f"(usage: {prog} --help)")
        return ns


def build_parser() -> argparse.ArgumentParser:
    from . import __version__
    parser = _Parser(
        prog="blockbuster",
        description="Block-level AI operator fusion: build, fuse, cost, compile and "
                    "validate block programs.")
    parser.add_argument("--version", action="version", version=f"blockbuster {__version__}")
    parser.add_argument("--debug", action="store_true",
                        help="show the Python traceback of an internal error")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for add in COMMANDS:
        add(sub)
    for command in sub.choices.values():     # `run ... --debug` works too
        command.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                             help="show the Python traceback of an internal error")
    return parser


def _one_line(message: str) -> str:
    return " ".join(message.split())


def _silence_stdout() -> None:
    """stdout's reader is gone: point the descriptor at /dev/null so the interpreter's
    final flush does not complain about the broken pipe a second time."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass      # no real descriptor (captured in-process): nothing will flush to it


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (argparse exits 2 by itself
    on malformed arguments)."""
    _ARGV[:] = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    with warnings.catch_warnings():
        _show_own_deprecations()
        return _run(args)


def _show_own_deprecations() -> None:
    """Python hides a DeprecationWarning raised outside ``__main__``; the project's
    own (a deprecated action name in a rule file) are meant for the user: each prints
    one ``warning: ...`` line on stderr, as a constant ``--size`` leaves stale does
    (``subjects.ResizeWarning``). Other warnings show as Python shows them."""
    warnings.filterwarnings("default", category=DeprecationWarning,
                            module=r"blockbuster(\.|$)")
    shown = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        from .subjects import ResizeWarning
        own = os.sep + "blockbuster" + os.sep in filename
        if own and issubclass(category, (DeprecationWarning, ResizeWarning)):
            print(f"warning: {_one_line(str(message))}", file=sys.stderr)
        else:
            shown(message, category, filename, lineno, file, line)
    warnings.showwarning = show


def _run(args: argparse.Namespace) -> int:
    try:
        status = args.func(args)
        sys.stdout.flush()          # a closed pipe shows here, inside the handlers
        return status
    except SourceError as err:
        # FILE:LINE:COL with the line and a caret; a whole-file problem (no such
        # file) has no position, and reads as the other errors do.
        print(err.render() if err.line else f"error: {err.headline()}", file=sys.stderr)
        return _json_error(args, err.headline(), err.exit_code)
    except BlockbusterError as err:
        if getattr(args, "debug", False) and err.__cause__ is not None:
            # where the user's code failed (a factory's own exception, say)
            traceback.print_exception(err.__cause__, file=sys.stderr)
        print(f"error: {_one_line(str(err))}", file=sys.stderr)
        return _json_error(args, _one_line(str(err)), err.exit_code)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except Exception as err:            # a bug, not a user mistake: one line and a hint
        if args.debug:
            raise
        detail = _one_line(str(err))
        detail = detail if len(detail) <= 200 else detail[:197] + "..."
        message = f"internal error: {type(err).__name__}{': ' + detail if detail else ''}"
        print(f"{message}; please report it (rerun with --debug for the traceback)",
              file=sys.stderr)
        return _json_error(args, message, EXIT_INTERNAL)


def _json_error(args: argparse.Namespace, message: str, status: int) -> int:
    """With ``--json`` stdout always carries one JSON object, an error's too."""
    if getattr(args, "json", False):
        try:
            print_json({"error": message, "exit_status": status})
        except BrokenPipeError:
            _silence_stdout()
    return status
