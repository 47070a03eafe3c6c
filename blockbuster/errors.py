"""User-facing errors.

Every mistake a user can make (a bad rule file, an ill-formed program, an unknown
backend, impossible sizes) raises a subclass of :class:`BlockbusterError`. The CLI
prints ``str(error)`` on one line (plus an excerpt with a caret for source errors)
and exits with ``error.exit_code``; it never shows a Python traceback for them.
"""

from __future__ import annotations


class BlockbusterError(Exception):
    """Base class of errors caused by user input (exit status 2 unless a subclass says
    otherwise; the CLI's exit status 3 is reserved for internal errors, i.e. bugs)."""

    exit_code = 2


class UsageError(BlockbusterError):
    """Unknown workload, backend, dimension, bad size, ..."""


class IRError(BlockbusterError):
    """An ill-formed block program (raised by the verifier and the builders).

    ``kernel``, ``store`` (the store's position in the kernel) and ``array`` say what
    the error is about, where the verifier knows it: the program parser turns them
    into a ``FILE:LINE:COL`` of the text that declared it."""

    def __init__(self, message: str, *, kernel: str | None = None,
                 store: int | None = None, array: str | None = None):
        super().__init__(message)
        self.kernel, self.store, self.array = kernel, store, array


class BackendError(BlockbusterError):
    """A backend is unknown, broken, or cannot run a program."""


class UntrustedRulesError(BlockbusterError):
    """Rules of the user's own rule files failed the soundness or stability check, so
    they are not used (``trust_rules=True`` uses them anyway). Exit status 1, as
    ``run --rules`` with such rules."""

    exit_code = 1


class SourceError(BlockbusterError):
    """An error located in a text file: ``FILE:LINE:COL: message``.

    ``excerpt`` is the offending source line; the caret goes under ``column``.
    """

    def __init__(self, message: str, filename: str = "<string>", line: int = 0,
                 column: int = 0, excerpt: str | None = None):
        self.message = message
        self.filename = filename
        self.line = line
        self.column = column
        self.excerpt = excerpt
        super().__init__(self.headline())

    def headline(self) -> str:
        if self.line:
            return f"{self.filename}:{self.line}:{self.column}: {self.message}"
        return f"{self.filename}: {self.message}"

    def render(self) -> str:
        """The headline, the offending line and a caret under the column."""
        out = [self.headline()]
        if self.excerpt is not None and self.line:
            line = self.excerpt.rstrip("\r\n")
            col = max(self.column - 1, 0)
            # Tabs as spaces, so that the caret sits under the column on any terminal.
            col = len(line[:col].expandtabs(8))
            text, caret = _clip(line.expandtabs(8), col)
            out.append("    " + text)
            out.append("    " + " " * caret + "^")
        return "\n".join(out)


def _clip(line: str, col: int, width: int = 100) -> tuple[str, int]:
    """A window of a long source line around ``col`` (marked with "..."), and the
    caret's position in it: a deeply nested one-line term stays readable."""
    if len(line) <= width:
        return line, col
    start = max(0, min(col - width // 2, len(line) - width))
    text = line[start:start + width]
    caret = col - start
    if start > 0:
        text, caret = "..." + text, caret + 3
    if start + width < len(line):
        text += "..."
    return text, caret


class ProgramSourceError(SourceError, IRError):
    """An :class:`IRError` of a program read from text, located there
    (``FILE:LINE:COL``): still an ``IRError`` for those who catch one."""
