"""Mutated rule files and program texts (shared by tests/dsl/test_fuzz_text.py and
benchmarks/fuzz_text.py).

Seeds are the shipped rule files (cut into small pieces: Lark parses ~10k tokens a
second on a loaded machine, so whole files would make 1,000 cases far too slow) and
printed built-in programs cut to their declarations plus one or two kernels. Each
case applies one to three token or byte mutations: deletions, duplications, swaps,
random tokens, and deep nesting. :func:`run_case` loads/parses/verifies the text and
returns the project error it raised (or None); any other exception escapes.
"""

from __future__ import annotations

import random
import re
from functools import cache

import blockbuster
from blockbuster.dsl.loader import load_rules_text, shipped_rulesets_dir
from blockbuster.errors import BlockbusterError
from blockbuster.frontend.workloads import WORKLOADS

_TOKEN = re.compile(r"\s+|#[^\n]*|[A-Za-z_][A-Za-z_0-9]*|-?\d+(?:\.\d*)?(?:e[-+]?\d+)?|"
                    r"=>|//|\"[^\"\n]*\"|.", re.S)

#: Tokens a mutation may insert: the language's own, and things it must refuse.
RANDOM_TOKENS = (
    "(", ")", "[", "]", ",", ":", ".", "=", "=>", "+", "-", "*", "//", "#", "\n", " ",
    "rule", "phase", "schedule", "include", "apply", "if", "not", "with", "in", "let",
    "kernel", "for", "program", "dim", "block", "point", "input", "output", "array",
    "weight", "sum", "max", "map", "online_softmax", "meanvar", "runmax", "get", "pos",
    "dot", "exp", "rowscale", "rowshift", "transpose", "add", "mul", "recip", "load",
    "inf", "-inf", "nan", "0", "1", "-1", "0.0", "1e308", "1e999", "99999999999999999999",
    "2.5", "k", "R", "a", "N", "i", "x", '"default.bbr"', '"nope.bbr"', '"../x"',
    "\u00e9", "\u2192", "\t", "\\", "'", "{", "}", "@", "$", "\x00",
)


_NAME = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")
_VOCAB_NAMES = tuple(t for t in RANDOM_TOKENS if _NAME.fullmatch(t))


@cache
def rule_seeds() -> tuple[str, ...]:
    """Single rules, small groups with a phase and schedule, and include lines."""
    seeds = []
    for name in ("default.bbr", "paper.bbr"):
        text = (shipped_rulesets_dir() / name).read_text()
        items = [s for s in re.split(r"\n(?=rule |phase |schedule|include )", text) if s.strip()]
        rules = [s for s in items if s.startswith("rule ")]
        seeds += rules
        for a, b in zip(rules[::2], rules[1::2]):
            na, nb = (re.match(r"rule (\w+)", r).group(1) for r in (a, b))
            seeds.append(f"{a}\n{b}\nphase p: {na}, {nb}\nschedule: p\n")
    seeds.append('include "default.bbr"\nrule extra: neg(neg(x)) => x\n'
                 'phase mine: extra\nschedule: fuse, mine\n')
    return tuple(seeds)


@cache
def program_seeds() -> tuple[str, ...]:
    """Declarations plus one or two consecutive kernels of each printed workload
    (unfused, and fused where fusion is quick), at small sizes."""
    texts = []
    for name in WORKLOADS:
        program = blockbuster.workload(name)
        texts.append(blockbuster.format_program(program))
        if name != "llama_block":
            fused = blockbuster.fuse(program, progress=False).program
            texts.append(blockbuster.format_program(fused))
    seeds = []
    for text in texts:
        head, *kernels = re.split(r"\n(?=kernel )", text)
        for i in range(len(kernels)):
            body = "\n".join(kernels[i:i + 2])
            stored = set(re.findall(r"^  (\w+)\[", body, re.M))
            # A well-formed excerpt: what it stores is an output, the rest an input.
            decls = re.sub(r"^(?:array|output|input|weight) (\w+)\[",
                           lambda m: f"{'output' if m.group(1) in stored else 'input'} "
                                     f"{m.group(1)}[", head, flags=re.M)
            seeds.append(f"{decls}\n{body}")
    return tuple(seeds)


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall(text)


def _deep(rng: random.Random, depth: int) -> str:
    kind = rng.choice(["call", "paren", "index", "binder"])
    if kind == "call":
        return "exp(" * depth + "a" + ")" * depth
    if kind == "paren":
        return "(" * depth + "a" + ")" * depth
    if kind == "index":
        return "X[" + "(" * depth + "i + 1" + ")" * depth + ", j]"
    return "sum(k in R: " * depth + "a" + ")" * depth


def mutate(text: str, rng: random.Random) -> str | bytes:
    """One to three mutations of ``text``; a byte mutation returns bytes."""
    toks = _tokens(text)
    for _ in range(rng.choice((1, 1, 2, 3))):
        if not toks:
            toks = [rng.choice(RANDOM_TOKENS)]
        op = rng.random()
        i = rng.randrange(len(toks))
        j = min(len(toks), i + rng.choice((1, 1, 2, 5, 20)))
        names = [t for t in toks if _NAME.fullmatch(t)]
        if op < 0.20:                                   # delete a span
            del toks[i:j]
        elif op < 0.30:                                 # duplicate a span
            toks[i:i] = toks[i:j]
        elif op < 0.40:                                 # swap two tokens
            k = rng.randrange(len(toks))
            toks[i], toks[k] = toks[k], toks[i]
        elif op < 0.55:                                 # insert random tokens
            toks[i:i] = [rng.choice(RANDOM_TOKENS) for _ in range(rng.choice((1, 1, 2, 3)))]
        elif op < 0.65:                                 # replace a token
            toks[i] = rng.choice(RANDOM_TOKENS)
        elif op < 0.88 and names:                       # a name becomes another name:
            spots = [k for k, t in enumerate(toks) if _NAME.fullmatch(t)]   # mostly parses
            toks[rng.choice(spots)] = rng.choice(names + list(_VOCAB_NAMES))
        elif op < 0.96:                                 # deep nesting in place of a token
            toks[i] = _deep(rng, rng.choice((40, 99, 100, 101, 150, 400)))
        else:                                           # raw bytes: invalid UTF-8, NUL
            data = bytearray("".join(toks).encode())
            pos = rng.randrange(len(data) + 1)
            data[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.choice((1, 3))))
            return bytes(data)
    return "".join(toks)


def run_case(kind: str, text: str | bytes, tmp_file=None) -> BlockbusterError | None:
    """Load a rule text or parse and verify a program text (a byte string is written
    to ``tmp_file`` and loaded from there, as a user's file would be). Returns the
    project error raised, None if the text was accepted; anything else escapes."""
    try:
        if kind == "rules":
            if isinstance(text, bytes):
                tmp_file.write_bytes(text)
                blockbuster.load_rules(tmp_file)
            else:
                load_rules_text(text, "fuzz.bbr")
        else:
            if isinstance(text, bytes):
                text = text.decode("utf-8", errors="replace")
            program = blockbuster.parse_program(text, "fuzz.prog")
            blockbuster.format_program(program)      # what was accepted prints
    except BlockbusterError as err:
        str(err)                                     # messages render without errors
        return err
    return None


def cases(n: int, seed: int = 0):
    """``n`` (kind, text) cases, half rule files and half programs."""
    rng = random.Random(seed)
    rules, programs = rule_seeds(), program_seeds()
    for index in range(n):
        if index % 2 == 0:
            yield "rules", mutate(rng.choice(rules), rng)
        else:
            yield "program", mutate(rng.choice(programs), rng)
