"""The README's Python examples run as written when copied (every name they use is
defined in them), and compute what they say. The backend of the weight-binding
example is swapped for the reference interpreter to keep this fast."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

README = Path(__file__).resolve().parents[1] / "README.md"


def _snippets() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_the_first_example_runs_and_computes_attention(capsys):
    code = next(s for s in _snippets() if 'bb.workload("attention"' in s)
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)
    q, k, v = (scope[n].astype(np.float64) for n in "qkv")
    s = q @ k.T / 8.0
    p = np.exp(s - s.max(axis=1, keepdims=True))
    want = p / p.sum(axis=1, keepdims=True) @ v
    got = scope["outputs"]["O"]
    assert got.shape == (1000, 64)
    assert np.max(np.abs(got - want)) / np.max(np.abs(want)) < 1e-5


def test_the_bind_example_runs_after_the_first(capsys):
    first = next(s for s in _snippets() if 'bb.workload("attention"' in s)
    code = next(s for s in _snippets() if ".bind(" in s)
    scope: dict = {}
    exec(compile(first.split("program = ")[0], "README.md", "exec"), scope)  # the imports
    exec(compile(code.replace('backend="numba"', 'backend="reference"'), "README.md", "exec"),
         scope)
    x, g = scope["x"].astype(np.float64), scope["g"].astype(np.float64)
    h = x / np.sqrt(np.mean(x * x, axis=1, keepdims=True) + 1e-6) * g
    a, b = h @ scope["w1"], h @ scope["w3"]
    want = (a / (1 + np.exp(-a)) * b) @ scope["w2"]
    assert np.max(np.abs(scope["y"] - want)) / np.max(np.abs(want)) < 1e-5


def test_the_block_program_example_is_a_whole_program_that_computes_attention():
    """Copied from the README into a .bbp file, the example runs (no elided `...`)."""
    import blockbuster as bb
    section = README.read_text().split("## Block programs", 1)[1]
    text = re.search(r"```\n(program .*?)```", section, flags=re.S).group(1)
    program = bb.parse_program(text)
    rng = np.random.default_rng(0)
    q, k, v = rng.standard_normal((3, 200, 64)).astype(np.float32)
    got = bb.compile(program, backend="reference")(Q=q, K=k, V=v)["O"]
    s = q.astype(np.float64) @ k.T.astype(np.float64) / 8.0
    p = np.exp(s - s.max(axis=1, keepdims=True))
    want = p / p.sum(axis=1, keepdims=True) @ v
    assert np.max(np.abs(got - want)) / np.max(np.abs(want)) < 1e-5
