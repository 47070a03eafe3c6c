"""Helpers of the backend-conformance suite (imported by name: pytest puts this
directory on sys.path)."""

import textwrap

from blockbuster.ir.parser import parse_program


def program(text: str):
    """Parse and verify indented program text."""
    return parse_program(textwrap.dedent(text).strip() + "\n")
