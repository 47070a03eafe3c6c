"""Depth limits of the text front ends: deeply nested rule and program texts are
located errors, never a RecursionError (the builders and the verifier recurse)."""

import pytest

import blockbuster
from blockbuster.dsl.loader import load_rules_text
from blockbuster.errors import SourceError
from blockbuster.ir.depth import MAX_DEPTH, expr_depth

HEADER = "program p\ndim N = 70 block 32\ninput X[N]\noutput Y[N]\nkernel Y for i in N:\n"


@pytest.mark.parametrize("depth", [200, 3000])
@pytest.mark.parametrize("shape", ["exp({})", "neg(({}))", "add(X[i], {})"])
def test_deep_terms_in_a_program_are_a_located_error(depth, shape):
    term = "X[i]"
    for _ in range(depth):
        term = shape.format(term)
    with pytest.raises(SourceError) as info:
        blockbuster.parse_program(HEADER + f"  Y[i] = {term}\n", "deep.prog")
    assert info.value.filename == "deep.prog" and info.value.line == 6
    assert info.value.column > 1 and "nested deeper than" in info.value.message


def test_redundant_parentheses_add_no_depth():
    text = HEADER + "  Y[i] = " + "(" * 5000 + "exp(X[i])" + ")" * 5000 + "\n"
    assert expr_depth(blockbuster.parse_program(text).kernels[0].stores[0].value) == 2


def test_deep_index_arithmetic_is_a_located_error():
    index = "(" * 300 + "i" + " + 1)" * 300
    with pytest.raises(SourceError, match="nested deeper than"):
        blockbuster.parse_program(HEADER + f"  Y[i] = X[{index}]\n")


def test_a_deep_rule_is_a_located_error():
    with pytest.raises(SourceError) as info:
        load_rules_text("rule r: exp(a) => " + "exp(" * 300 + "a" + ")" * 300, "deep.bbr")
    assert info.value.line == 1 and "nested deeper than" in info.value.message


def test_let_chains_cannot_build_a_term_deeper_than_the_limit():
    # Each let is shallow, the expression they build is not.
    lets = ["  let t0 = X[i]"] + [f"  let t{n} = exp(t{n - 1})" for n in range(1, 400)]
    text = HEADER + "\n".join(lets) + "\n  Y[i] = t399\n"
    with pytest.raises(SourceError) as info:
        blockbuster.parse_program(text, "lets.prog")
    assert "deeper than" in info.value.message
    assert info.value.line == 6 + MAX_DEPTH     # the first let past the limit


def test_nesting_within_the_limits_still_parses():
    term = "X[i]"
    for _ in range(60):
        term = f"exp({term})"
    program = blockbuster.parse_program(HEADER + f"  Y[i] = {term}\n")
    assert expr_depth(program.kernels[0].stores[0].value) == 61
