"""Loading the one Lark grammar (``grammar/bbr.lark``) and turning Lark's parse
errors into :class:`~blockbuster.errors.SourceError` (``FILE:LINE:COL: message``)."""

from __future__ import annotations

import functools
from importlib import resources

import lark

from ..errors import SourceError

# Human names for the tokens Lark reports as expected.
_TOKEN_NAMES = {
    "NAME": "a name", "INT": "an integer", "SIGNED_NUMBER": "a number", "INF": "inf",
    "LPAR": "'('", "RPAR": "')'", "LSQB": "'['", "RSQB": "']'", "COMMA": "','",
    "COLON": "':'", "EQUAL": "'='", "DOT": "'.'", "PLUS": "'+'", "MINUS": "'-'",
    "STAR": "'*'", "SLASH": "'/'", "ROLE": "input/output/array",
    "STRING": "a quoted string", "_NL": "a new line", "$END": "end of file",
    "LBRACE": "'{'", "RBRACE": "'}'", "ARROW": "'=>'", "MORETHAN": "'>'",
}


def grammar_text() -> str:
    return resources.files("blockbuster.grammar").joinpath("bbr.lark").read_text()


@functools.cache
def parser() -> lark.Lark:
    return lark.Lark(grammar_text(), parser="lalr", start=["program", "rulefile"],
                     propagate_positions=True, maybe_placeholders=True)


def _describe_token(name: str) -> str:
    if name in _TOKEN_NAMES:
        return _TOKEN_NAMES[name]
    if name.startswith("__ANON"):       # an unnamed literal: Lark numbers them in order
        try:
            pattern = parser().get_terminal(name).pattern
        except KeyError:
            pattern = None
        if isinstance(pattern, lark.lexer.PatternStr):
            return repr(pattern.value)
    return name.lower().strip("_") if name.isupper() else repr(name)


def _describe_expected(expected) -> str:
    names = sorted({_describe_token(t) for t in expected})
    if len(names) > 6:
        names = names[:6] + ["..."]
    return ", ".join(names)


def _line(text: str, line: int) -> str:
    lines = text.splitlines()
    return lines[line - 1] if 0 < line <= len(lines) else ""


#: Deepest nesting of a parse tree (terms inside terms, index arithmetic, ...). The
#: builders, the verifier and the interpreters recurse on terms; a deeper text is a
#: located error rather than a RecursionError. Real programs nest about 25 levels.
MAX_NESTING = 100


def parse(text: str, start: str, filename: str) -> lark.Tree:
    if text.startswith("\ufeff"):        # a byte-order mark: blank (columns stay put)
        text = " " + text[1:]
    if "\r" in text:       # Windows and old Mac line ends: lines as splitlines() counts them
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    tree = _parse(text, start, filename)
    _check_nesting(tree, text, filename)
    return tree


def _check_nesting(tree: lark.Tree, text: str, filename: str) -> None:
    stack = [(tree, 1)]
    while stack:                       # iterative: the tree may be arbitrarily deep
        node, depth = stack.pop()
        if depth > MAX_NESTING:
            raise error_at(node, f"nested deeper than {MAX_NESTING} levels (the limit for "
                                 "rule and program texts)",
                           text, filename)
        stack.extend((c, depth + 1) for c in node.children if isinstance(c, lark.Tree))


#: Words that begin a line of a rule file or a program. Not reserved (a rule may have
#: a pattern variable `rule`), so after an incomplete line (`rule r: mul(a, 1.0) =>`)
#: the next line's first word is read as a name and the error comes one word later.
_STATEMENT_WORDS = frozenset({"rule", "phase", "schedule", "include", "program", "dim",
                              "input", "weight", "output", "array", "kernel", "let"})


def _cut_short(text: str, pos: int, value: str, expected: str,
               previous=None) -> tuple[int, int, str] | None:
    """For an unexpected statement word that begins its line, or an unexpected token
    right after one read as a name, the place where the line before ends and a
    message saying that line is incomplete. ``previous``: the token before, where Lark
    knows it (a statement word read as its keyword began a statement: the slip is
    in that statement, `schedule p` without its colon, not in the line before)."""
    before = text[:pos].rstrip(" \t")
    start = max(before.rfind("\n"), before.rfind("\r")) + 1
    word = before[start:].strip()
    as_keyword = previous is not None and previous.type in (str(previous).upper(), "ROLE")
    if not word and value in _STATEMENT_WORDS:     # the token itself begins the line
        word, wanted = value, f", expected {expected}"
    elif word in _STATEMENT_WORDS and not as_keyword:   # read as a name: Lark's list
        wanted = ""                                     # is no help
    else:
        return None
    lines = text[:start].splitlines()
    while lines and not lines[-1].split("#", 1)[0].strip():   # blank or comment only
        lines.pop()
    if not lines:
        return None
    line = len(lines)
    code = lines[-1].split("#", 1)[0].rstrip()
    after = f" after {code.split()[-1]!r}" if code.split() else ""
    return (line, len(code) + 1, f"this line is incomplete{after} (the next line begins "
                                 f"a new '{word}'){wanted}")


#: The words that begin each kind of file (a rule file may also begin with a rule).
_FIRST_WORDS = {"rulefile": frozenset({"rule", "phase", "schedule", "include"}),
                "program": frozenset({"program"})}
_KINDS = {"rulefile": "a rule file (.bbr)", "program": "a block program (.bbp)"}


def _other_kind(text: str, tok, start: str) -> str | None:
    """Where the first word of the text begins the other kind of file (a program given
    to `rules check`, a rule file given to `run`), or the text is a file's name
    (`parse_program("model.bbp")`), say so: the grammar's list of expected words does
    not."""
    if start not in _KINDS or text[:tok.start_pos or 0].split("#", 1)[0].strip():
        return None                                       # not the first word
    for kind, words in _FIRST_WORDS.items():
        if kind != start and tok.value in words:
            return f"this is {_KINDS[kind]}, not {_KINDS[start]}"
    stripped = text.strip()
    if "\n" not in stripped and stripped.endswith((".bbp", ".bbr")):
        return (f"{stripped!r} looks like a file name; the text is wanted here "
                "(read the file first)")
    return None


def _parse(text: str, start: str, filename: str) -> lark.Tree:
    try:
        return parser().parse(text, start=start)
    except lark.exceptions.UnexpectedCharacters as err:
        raise SourceError(f"unexpected character {text[err.pos_in_stream]!r}", filename,
                          err.line, err.column, _line(text, err.line)) from None
    except lark.exceptions.UnexpectedToken as err:
        tok = err.token
        if tok.type == "$END":
            lines = text.splitlines() or [""]
            line, col = len(lines), len(lines[-1]) + 1
            message = f"unexpected end of file, expected {_describe_expected(err.expected)}"
        else:
            line, col = tok.line, tok.column
            message = (f"unexpected {tok.value!r}, expected "
                       f"{_describe_expected(err.expected)}")
            history = getattr(err, "token_history", None) or [None]
            other = _other_kind(text, tok, start)
            if other:
                message = f"{message}: {other}"
            cut = _cut_short(text, tok.start_pos, tok.value,
                             _describe_expected(err.expected), history[-1])
            if cut is not None:
                line, col, message = cut
        raise SourceError(message, filename, line, col, _line(text, line)) from None
    except lark.exceptions.UnexpectedEOF as err:
        lines = text.splitlines() or [""]
        raise SourceError(f"unexpected end of file, expected {_describe_expected(err.expected)}",
                          filename, len(lines), len(lines[-1]) + 1, lines[-1]) from None


def error_at(meta_or_token, message: str, text: str, filename: str) -> SourceError:
    """A SourceError at a tree node (``meta``) or token position."""
    if isinstance(meta_or_token, lark.Tree):
        meta_or_token = meta_or_token.meta
    line = getattr(meta_or_token, "line", 0) or 0
    col = getattr(meta_or_token, "column", 0) or 0
    return SourceError(message, filename, line, col, _line(text, line))
