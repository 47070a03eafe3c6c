"""Shared helpers for the cost-model tests: ragged extents and a text-program maker."""

from blockbuster.ir.parser import parse_program


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def ext(size: int, block: int, b: int) -> int:
    """Elements in block ``b`` of a dimension, written independently of the IR."""
    return min(block, size - b * block)


def program(text: str):
    return parse_program(text)
