"""torch.compile(model, backend="blockbuster"): registered by entry point, matches
eager, leaves unsupported operators to PyTorch, recompiles for new sizes and for
changed parameters, and caches fused programs across processes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch
import torch.nn.functional as F

from blockbuster.errors import UsageError


class Block(torch.nn.Module):
    def __init__(self, e=48, f=72):
        super().__init__()
        self.ln = torch.nn.LayerNorm(e)
        self.up = torch.nn.Linear(e, f)
        self.down = torch.nn.Linear(f, e)

    def forward(self, x):
        return x + self.down(F.silu(self.up(self.ln(x))))


class WithCumprod(torch.nn.Module):
    """An operator Blockbuster does not lower, between two it does."""

    def __init__(self, e=40):
        super().__init__()
        self.a = torch.nn.Linear(e, e)
        self.b = torch.nn.Linear(e, e)

    def forward(self, x):
        return self.b(torch.cumprod(torch.sigmoid(self.a(x)), dim=-1))


def _close(a, b, tol=1e-5):
    return float((a - b).abs().max() / max(1.0, float(b.abs().max()))) < tol


@pytest.fixture(scope="module")
def _module_cache(tmp_path_factory):
    """One cache for this module's tests (not the developer's): the tests below that
    compile the same model at the same size share its fused program, fused once."""
    return tmp_path_factory.mktemp("torch-compile-cache")


@pytest.fixture(autouse=True)
def _fresh_dynamo(_module_cache, monkeypatch):
    monkeypatch.setenv("BLOCKBUSTER_CACHE", str(_module_cache))
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_entry_point_registers_the_backend():
    from torch._dynamo import list_backends
    assert "blockbuster" in list_backends(exclude_tags=())


@pytest.mark.parametrize("backend", ["reference", "numba"])
def test_compiled_module_matches_eager(backend):
    model = Block().eval()
    x = torch.randn(2, 37, 48) * 5
    compiled = torch.compile(model, backend="blockbuster", options={"backend": backend})
    with torch.no_grad():
        assert _close(compiled(x), model(x))
        assert _close(compiled(x * 1e3), model(x * 1e3), 1e-4)   # same program, again


def test_unsupported_operators_stay_in_eager():
    model = WithCumprod().eval()
    x = torch.randn(3, 29, 40)
    compiled = torch.compile(model, backend="blockbuster", options={"backend": "reference"})
    with torch.no_grad():
        assert _close(compiled(x), model(x))


def test_new_input_size_recompiles():
    model = Block().eval()
    compiled = torch.compile(model, backend="blockbuster", options={"backend": "reference"})
    with torch.no_grad():
        for b, t in ((2, 37), (1, 20)):     # (2, 37) as above: its fused program is cached
            x = torch.randn(b, t, 48)
            assert _close(compiled(x), model(x))


def test_changed_parameters_are_seen():
    model = Block().eval()
    x = torch.randn(2, 37, 48)                     # the size above: a cached fused program
    compiled = torch.compile(model, backend="blockbuster", options={"backend": "reference"})
    with torch.no_grad():
        before = compiled(x)
        model.up.weight.mul_(-2.0)                 # in place: the _version moves
        after = compiled(x)
        assert _close(after, model(x))
        assert not _close(after, before)
        model.up.bias.data = torch.randn(model.up.bias.shape)   # a new tensor, no _version
        assert _close(compiled(x), model(x))


def test_weight_preparation_runs_once_not_on_every_call(monkeypatch):
    """LayerNorm's gain folds into the next weight matrix: a kernel of the weights
    alone. It runs when the region is built; a call runs the rest."""
    from blockbuster.frontend.pytorch import dynamo
    from blockbuster.ir.prep import weight_derived_kernels
    regions = []
    real = dynamo.CompiledRegion._build
    monkeypatch.setattr(dynamo.CompiledRegion, "_build",
                        lambda self, inputs: (regions.append(self), real(self, inputs)))
    model = Block().eval()
    x = torch.randn(2, 37, 48) * 3 + 1e3            # the size above: a cached fused program
    compiled = torch.compile(model, backend="blockbuster", options={"backend": "reference"})
    with torch.no_grad():
        assert _close(compiled(x), model(x))
        assert _close(compiled(x), model(x))
    (region,) = regions
    assert weight_derived_kernels(region.program)       # the fused program prepares weights
    assert not weight_derived_kernels(region.compiled.program)  # a call does not


def test_an_unsound_rule_file_is_refused_unless_trusted(tmp_path):
    """The ``rules`` option's own rules are checked, as blockbuster.fuse checks them."""
    from blockbuster.errors import UntrustedRulesError
    path = tmp_path / "mine.bbr"
    path.write_text('include "default.bbr"\n'
                    "rule silu_is_x: silu(x) => x\nphase mine: silu_is_x\n"
                    "schedule: mine, fuse, algebra, safety, merge, cancel, hold, interchange,"
                    " remerge, prepare\n")
    model, x = Block().eval(), torch.randn(1, 5, 48)
    compiled = torch.compile(model, backend="blockbuster",
                             options={"backend": "reference", "rules": str(path)})
    with pytest.raises(Exception) as err:
        compiled(x)
    assert "silu_is_x: UNSOUND" in str(err.value) and "'trust_rules': True" in str(err.value)
    assert isinstance(err.value, UntrustedRulesError) or "UntrustedRulesError" in repr(err.value)
    from blockbuster.frontend.pytorch.dynamo import CompileOptions
    trusted = CompileOptions.parse({"backend": "reference", "rules": str(path),
                                    "trust_rules": True})
    assert "silu_is_x" in trusted.rules.rules
    with pytest.raises(UsageError, match="'trust_rules' must be True or False"):
        CompileOptions.parse({"rules": str(path), "trust_rules": "yes"})


def test_an_internal_error_leaves_the_graph_to_pytorch_and_says_so(monkeypatch):
    from blockbuster import fusion_cache
    from blockbuster.errors import IRError
    from blockbuster.frontend.pytorch.dynamo import FallbackWarning

    def broken(*args, **kwargs):
        raise IRError("kernel 'k': a bug")
    monkeypatch.setattr(fusion_cache, "cached_fuse", broken)
    model = Block().eval()
    x = torch.randn(2, 37, 48)
    compiled = torch.compile(model, backend="blockbuster",
                             options={"backend": "reference", "tune": "off"})
    with torch.no_grad(), pytest.warns(FallbackWarning, match="internal error: IRError"):
        assert _close(compiled(x), model(x))


def test_unknown_option_is_a_clear_error():
    compiled = torch.compile(Block().eval(), backend="blockbuster", options={"blokcs": {}})
    with pytest.raises(Exception) as err:
        compiled(torch.randn(1, 5, 48))
    assert "unknown option 'blokcs'" in str(err.value)
    assert isinstance(err.value, UsageError) or "UsageError" in repr(err.value)


def test_fused_programs_are_cached_across_processes(tmp_path, monkeypatch):
    """This process fuses into an empty cache; a fresh process reads the entry back
    (one process start, not two: the writer needs no process of its own)."""
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent("""
        import sys, torch
        sys.path.insert(0, %r)
        from test_torch_compile import Block
        torch.manual_seed(0)
        m = Block().eval()
        f = torch.compile(m, backend="blockbuster", options={"backend": "reference"})
        with torch.no_grad():
            x = torch.randn(1, 19, 48)
            print(float((f(x) - m(x)).abs().max()))
    """ % os.path.dirname(__file__)))
    monkeypatch.setenv("BLOCKBUSTER_CACHE", str(tmp_path / "cache"))
    torch.manual_seed(0)
    model = Block().eval()
    compiled = torch.compile(model, backend="blockbuster", options={"backend": "reference"})
    with torch.no_grad():
        x = torch.randn(1, 19, 48)
        assert _close(compiled(x), model(x))
    entries = sorted((tmp_path / "cache" / "fusion").glob("*.bbp"))
    assert entries, "the fused program was not cached"
    stamps = [p.stat().st_mtime_ns for p in entries]
    env = {**os.environ, "BLOCKBUSTER_CACHE": str(tmp_path / "cache")}
    second = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                            text=True, timeout=300)
    assert second.returncode == 0, second.stderr[-2000:]
    assert float(second.stdout.split()[-1]) < 1e-4
    assert [p.stat().st_mtime_ns for p in entries] == stamps     # read, not rewritten


class PositionsAroundABreak(torch.nn.Module):
    """Two regions around an operator left to PyTorch; the first reads position
    ids computed outside it (a new tensor with the same values on every call)."""

    def __init__(self, e=24):
        super().__init__()
        self.gate = torch.nn.Linear(e, e)
        self.lin = torch.nn.Linear(e, e)

    def forward(self, x):
        pos = torch.arange(x.shape[1])[None, :, None].float()
        freqs = torch.cumprod(pos * torch.sigmoid(self.gate(x)), dim=-1)  # in PyTorch
        return self.lin(x) * torch.sigmoid(freqs)


def _record_region_builds(monkeypatch) -> list:
    """The names of the compiled regions, one entry each time a region is built."""
    from blockbuster.frontend.pytorch import dynamo
    builds = []
    real = dynamo.CompiledRegion._build
    monkeypatch.setattr(dynamo.CompiledRegion, "_build",
                        lambda self, inputs: (builds.append(self._name), real(self, inputs)))
    return builds


def test_regions_keep_their_own_inputs_when_called_again(monkeypatch):
    builds = _record_region_builds(monkeypatch)
    model = PositionsAroundABreak().eval()
    x = torch.randn(1, 19, 24)
    compiled = torch.compile(model, backend="blockbuster",
                             options={"backend": "reference", "tune": "off"})
    with torch.no_grad():
        for _ in range(3):
            assert _close(compiled(x), model(x))
    assert len(builds) == len(set(builds)) >= 2    # each region built once


class SkipAroundABreak(torch.nn.Module):
    """The second region reads the first one's output directly and through an
    operator left to PyTorch (the regions are joined by the partitioner's own
    getitem nodes)."""

    def __init__(self, e=24):
        super().__init__()
        self.a = torch.nn.Linear(e, e)
        self.b = torch.nn.Linear(e, e)

    def forward(self, x):
        h = torch.tanh(self.a(x))
        return self.b(h) * torch.cumprod(h, dim=-1)


def test_a_region_reads_another_regions_output(monkeypatch):
    """... as data: called again with new values, no region is built again (the
    other region's output is not a constant of the region, folded at import)."""
    builds = _record_region_builds(monkeypatch)
    model = SkipAroundABreak().eval()
    compiled = torch.compile(model, backend="blockbuster",
                             options={"backend": "reference", "tune": "off"})
    with torch.no_grad():
        for _ in range(2):
            x = torch.randn(2, 19, 24)
            assert _close(compiled(x), model(x))
    assert len(builds) == len(set(builds)) >= 2


class HeadsAroundABreak(torch.nn.Module):
    """The first region returns a transposed head view; the second merges the heads
    back with a ``view``, traced for the strides of that transpose."""

    def __init__(self, e=24, h=3):
        super().__init__()
        self.h = h
        self.a = torch.nn.Linear(e, e)
        self.b = torch.nn.Linear(e, e)

    def forward(self, x):
        b, t, e = x.shape
        q = self.a(x).view(b, t, self.h, e // self.h).transpose(1, 2)
        return self.b((q * torch.cumprod(q, -1)).transpose(1, 2).reshape(b, t, e))


def test_region_outputs_keep_their_traced_strides():
    """A region's output has the strides PyTorch gave it, so the second region can be
    rebuilt from the inputs of a call (a changed parameter) and its ``view`` holds."""
    model = HeadsAroundABreak().eval()
    x = torch.randn(2, 19, 24)
    compiled = torch.compile(model, backend="blockbuster",
                             options={"backend": "reference", "tune": "off"})
    with torch.no_grad():
        assert _close(compiled(x), model(x))
        model.b.weight.mul_(-2.0)
        assert _close(compiled(x), model(x))


class PatchEmbed(torch.nn.Module):
    """A ViT patch embedding (a convolution in 4x4 windows), a flatten and a
    projection; with ``overlap``, a 3x3 convolution (left to PyTorch) instead."""

    def __init__(self, e=24, overlap=False):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, e, kernel_size=3, padding=1) if overlap else \
            torch.nn.Conv2d(3, e, kernel_size=4, stride=4)
        self.proj = torch.nn.Linear(e, e)

    def forward(self, x):
        return self.proj(torch.tanh(self.conv(x).flatten(2).transpose(1, 2)))


@pytest.mark.parametrize("overlap", [False, True])
def test_patch_embedding_compiles_and_an_overlapping_convolution_falls_back(overlap):
    from blockbuster.frontend.pytorch.dynamo import FallbackWarning
    torch.manual_seed(0)
    model = PatchEmbed(overlap=overlap).eval()
    x = torch.randn(1, 3, 20, 24)
    compiled = torch.compile(model, backend="blockbuster",
                             options={"backend": "reference", "tune": "off"})
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always", FallbackWarning)
        assert _close(compiled(x), model(x))
    fell_back = [str(w.message) for w in caught if issubclass(w.category, FallbackWarning)]
    assert bool(fell_back) == overlap
    assert all("aten.convolution" in m for m in fell_back)


class RotaryTable(torch.nn.Module):
    """A rotary embedding's tables from its ``inv_freq`` buffer (an input under
    TorchDynamo, like a parameter): state, evaluated once at import."""

    def __init__(self, e=24):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / 1e4 ** (torch.arange(0, e, 2) / e))
        self.lin = torch.nn.Linear(e, e)

    def forward(self, x):
        pos = torch.arange(x.shape[1])[:, None].float()
        freqs = pos * self.inv_freq
        emb = torch.cat([freqs, freqs], dim=-1)      # not a rotate-half: must fold
        return self.lin(x) * emb.cos() + x * emb.sin()


def test_buffers_are_state_and_fold_at_import(monkeypatch):
    import warnings
    from blockbuster.frontend.pytorch import dynamo
    builds = _record_region_builds(monkeypatch)
    model = RotaryTable().eval()
    x = torch.randn(2, 19, 24)
    compiled = torch.compile(model, backend="blockbuster",
                             options={"backend": "reference", "tune": "off"})
    with warnings.catch_warnings():
        warnings.simplefilter("error", dynamo.FallbackWarning)
        with torch.no_grad():
            assert _close(compiled(x), model(x))
            model.inv_freq.mul_(0.5)                    # changed state: recompiled
            assert _close(compiled(x), model(x))
    assert builds == ["torch_graph", "torch_graph"]


def test_buffers_stay_state_when_a_new_size_recompiles_with_dynamic_shapes():
    """A second sequence length makes TorchDynamo recompile with symbolic sizes; the
    graph then reaches the backend, and the placeholders' sources are gone by the
    time a concrete size is compiled. The buffer used to become a caller's input
    there: the cos/sin tables did not fold and their `cat` was left to PyTorch."""
    import warnings
    from blockbuster.frontend.pytorch import dynamo
    model = RotaryTable().eval()
    compiled = torch.compile(model, backend="blockbuster",
                             options={"backend": "reference", "tune": "off"})
    with warnings.catch_warnings():
        warnings.simplefilter("error", dynamo.FallbackWarning)
        with torch.no_grad():
            for t in (19, 11, 7):
                x = torch.randn(2, t, 24)
                assert _close(compiled(x), model(x))


@pytest.mark.parametrize("blocks", [{"N48": 0}, {"N48": -2}, {"N48": 2.5}, {"N48": "16"},
                                    [("N48", 16)]])
def test_bad_block_sizes_are_a_clear_error(blocks):
    """A block of 0 was silently the default; 2.5, "16" or a list raised TypeErrors
    from deep inside the importer."""
    import blockbuster as bb
    compiled = torch.compile(Block().eval(), backend="blockbuster", options={"blocks": blocks})
    with pytest.raises(Exception) as err:
        compiled(torch.randn(1, 5, 48))
    assert "UsageError" in repr(err.value) and "blocks" in str(err.value)
    with pytest.raises(UsageError, match="blocks"):
        bb.from_torch(Block().eval(), torch.randn(1, 5, 48), blocks=blocks)


def test_transformer_encoder_fast_path_falls_back_naming_the_module():
    """Under ``no_grad`` ``nn.TransformerEncoderLayer`` runs its fused fast path (one
    ATen operator): the whole graph stays in PyTorch, and the warning names the
    module (torch's own code has no line of the model's: it said '<unknown source>')."""
    from blockbuster.frontend.pytorch.dynamo import FallbackWarning
    layer = torch.nn.TransformerEncoderLayer(24, 2, 40, dropout=0.0, batch_first=True).eval()
    x = torch.randn(2, 7, 24)
    compiled = torch.compile(layer, backend="blockbuster",
                             options={"backend": "reference", "tune": "off"})
    with pytest.warns(FallbackWarning, match=r"module TransformerEncoderLayer: unsupported "
                                             r"operator aten\._transformer_encoder_layer_fwd"), \
            torch.no_grad():
        assert _close(compiled(x), layer(x))


class WithLength(torch.nn.Module):
    """Returns a size computed from the input next to a tensor."""

    def __init__(self):
        super().__init__()
        self.block = Block()

    def forward(self, x):
        return self.block(x), x.shape[1] * 2


def test_a_graph_returning_a_size_under_dynamic_shapes():
    """A second sequence length makes TorchDynamo recompile with symbolic sizes;
    the graph then returns the size (an int) next to the tensor. Lowering the whole
    graph read the int as a node (AttributeError out of torch.compile); it is left
    to PyTorch and the tensor's region compiled."""
    model = WithLength().eval()
    compiled = torch.compile(model, backend="blockbuster",
                             options={"backend": "reference", "tune": "off"})
    with torch.no_grad():
        for t in (19, 11, 7):
            x = torch.randn(2, t, 48)
            got, n = compiled(x)
            assert n == 2 * t and _close(got, model(x)[0])


def test_generate_with_a_compiled_forward_and_a_key_value_cache():
    """``model.generate`` on a compiled ``forward``: the decoding steps' graphs read a
    key/value cache, whose sizes TorchDynamo guards with its own sources; those
    guards reached torch.export's retrace as Python that failed ("name 'L' is not
    defined") and left whole graphs to PyTorch. Greedy tokens match eager."""
    transformers = pytest.importorskip("transformers")
    from blockbuster.frontend.pytorch.dynamo import FallbackWarning
    cfg = transformers.LlamaConfig(hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=1,
                                   vocab_size=50, max_position_embeddings=64)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).eval()
    ids = torch.randint(2, 50, (2, 9))
    mask = torch.ones(2, 9, dtype=torch.long)
    mask[0, :3] = 0                                  # left padding, as for generation
    kw = dict(input_ids=ids, attention_mask=mask, max_new_tokens=2, do_sample=False,
              pad_token_id=0)
    with torch.no_grad():
        want = model.generate(**kw)
        model.forward = torch.compile(model.forward, backend="blockbuster",
                                      options={"backend": "reference", "tune": "off"})
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", FallbackWarning)
            got = model.generate(**kw)
    assert torch.equal(got, want)
    whole = [str(w.message) for w in caught if "whole graph" in str(w.message)]
    assert not whole, whole


class _WritesInPlace(torch.nn.Module):
    """An input scaled in place, a running mean kept in a buffer, a static cache
    written at a position: what the next call (or the caller) reads."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(48, 48)
        self.register_buffer("ema", torch.zeros(48))
        self.register_buffer("cache", torch.zeros(2, 12, 48))

    def forward(self, x, start: int):
        x.mul_(2.0)
        y = self.fc(x)
        self.ema.mul_(0.9).add_(0.1 * y.mean((0, 1)))
        self.cache[:, start:start + x.shape[1]] = y
        return y - self.ema + self.cache[:, :start + x.shape[1]].sum(1, keepdim=True)


def test_in_place_writes_to_inputs_and_buffers_stay_in_pytorch():
    """Programs compute outputs only: a graph that writes an input or a buffer in
    place is left to PyTorch (it returned the write as its output, the input and
    buffers untouched), with a warning that says why."""
    import copy

    from blockbuster.frontend.pytorch import ImportError_, lower_module
    torch.manual_seed(0)
    eager = _WritesInPlace().eval()
    model = copy.deepcopy(eager)
    compiled = torch.compile(model, backend="blockbuster", options={"backend": "reference"})
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for start in (0, 4):
            x = torch.randn(2, 4, 48)
            xa, xb = x.clone(), x.clone()
            assert _close(compiled(xb, start), eager(xa, start))
            assert torch.equal(xa, xb)                        # doubled in both
    assert torch.allclose(model.ema, eager.ema) and torch.allclose(model.cache, eager.cache)
    assert any("in place" in str(w.message) for w in caught)
    with pytest.raises(ImportError_, match="updates .*buffer 'ema'.* in place"):
        lower_module(_WritesInPlace().eval(), torch.randn(2, 4, 48), 0)


def test_a_changed_python_number_attribute_stays_compiled():
    """A sampling temperature changed between calls: TorchDynamo makes the number an
    input, a 0-d tensor read with ``.item()``, which torch.export cannot capture, so
    the whole graph went back to PyTorch. The 0-d tensor is used as it is now: one
    program for every temperature, each call matching eager."""
    from blockbuster.frontend.pytorch.dynamo import FallbackWarning

    class Sampler(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc, self.temperature = torch.nn.Linear(48, 101), 1.0

        def forward(self, x):
            return (self.fc(x) / self.temperature).softmax(-1)

    torch.manual_seed(0)
    model, x = Sampler().eval(), torch.randn(2, 37, 48)
    compiled = torch.compile(model, backend="blockbuster", options={"backend": "reference"})
    for t in (1.0, 0.7, 1.3):
        model.temperature = t
        with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = compiled(x)
        assert _close(got, model(x))
        assert not [w for w in caught if issubclass(w.category, FallbackWarning)]


def test_random_draws_in_forward_are_not_frozen_into_constants():
    """``torch.rand`` in ``forward`` does not depend on the inputs, so it was folded
    at import like a rotary table: every compiled call returned the same "random"
    mask. Random operators are computed anew on every call now: left to PyTorch
    under torch.compile, and an unsupported operator for ``run``."""
    from blockbuster.frontend.pytorch import ImportError_, lower_module
    from blockbuster.frontend.pytorch.dynamo import FallbackWarning

    class Noisy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(48, 48)

        def forward(self, x):
            return self.fc(x) * (torch.rand(x.shape[0], x.shape[1])[..., None] > 0.5)

    torch.manual_seed(0)
    model, x = Noisy().eval(), torch.randn(2, 37, 48)
    with pytest.raises(ImportError_, match="unsupported operator aten.rand"):
        lower_module(model, x)
    compiled = torch.compile(model, backend="blockbuster", options={"backend": "reference"})
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first, second = compiled(x), compiled(x)
    assert not torch.equal(first, second)
    assert any("aten.rand" in str(w.message) for w in caught
               if issubclass(w.category, FallbackWarning))


class _PaddedSelfAttention(torch.nn.Module):
    """Self-attention under a padding mask of one row per sequence ([B, 1, 1, T])."""

    def __init__(self, e=40, heads=4):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(e, 3 * e)
        self.o = torch.nn.Linear(e, e)

    def forward(self, h, keep):
        b, t, e = h.shape
        q, k, v = self.qkv(h).view(b, t, 3, self.heads, e // self.heads).permute(2, 0, 3, 1, 4)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :].bool())
        return self.o(o.transpose(1, 2).reshape(b, t, e))


def test_a_sequence_that_is_all_padding_attends_nothing_and_gives_zeros_not_nan():
    """A boolean padding mask that masks every key of one sequence: PyTorch's SDPA
    gives 0 for its queries (a softmax of only -inf would be 0/0), and so must the
    compiled region: a NaN there reached the output projection of every row of that
    sequence. The other sequences (logits ~1e4) keep float32 eager's accuracy."""
    import copy
    torch.manual_seed(0)
    model = _PaddedSelfAttention().eval()
    h = torch.randn(3, 13, 40) * 100.0
    keep = torch.ones(3, 13, dtype=torch.long)
    keep[0] = 0                              # nothing to attend in sequence 0
    keep[2, 9:] = 0                          # right padding in sequence 2
    compiled = torch.compile(model, backend="blockbuster", options={"tune": "off"})
    with torch.no_grad():
        got, eager = compiled(h, keep), model(h, keep)
        exact = copy.deepcopy(model).double()(h.double(), keep)
    assert not eager.isnan().any() and not got.isnan().any()
    scale = float(exact.abs().max())
    eager_error = float((eager.double() - exact).abs().max()) / scale
    assert float((got.double() - exact).abs().max()) / scale <= 4 * eager_error + 1e-6
    # Sequence 0's attention is all zeros: what remains is the output bias.
    assert torch.allclose(got[0], model.o.bias.expand(13, 40), atol=1e-5)


def test_a_block_name_no_region_has_is_said_not_ignored():
    """``options={"blocks": {...}}`` names dimensions of the regions (``N64``); a name
    none of them has (a typo) was ignored silently. It is said once, with the
    dimensions there are; a name that exists is used."""
    from blockbuster.frontend.pytorch.dynamo import FallbackWarning
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.GELU()).eval()
    compiled = torch.compile(model, backend="blockbuster",
                             options={"backend": "reference", "blocks": {"ZZZ": 16, "N64": 32}})
    x = torch.randn(5, 64)
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always", FallbackWarning)
        got = compiled(x)
    said = [str(w.message) for w in caught if "blocks:" in str(w.message)]
    assert len(said) == 1 and "no dimension ZZZ" in said[0] and "N64" in said[0], said
    assert "N64," not in said[0].split("no dimension")[1].split("(")[0]
    assert _close(got, model(x))


def test_a_number_argument_that_changes_between_calls_says_how_to_keep_it_compiled():
    """eps= of layer_norm changed between calls: TorchDynamo passes it as a runtime
    value, read back with .item(), which no program expresses. The graph runs in
    PyTorch (correct results) and the warning says why and what to do."""
    from blockbuster.frontend.pytorch.dynamo import FallbackWarning
    w = torch.randn(24, 24)

    def fn(x, eps):
        return torch.nn.functional.layer_norm(x, (24,), eps=eps) @ w
    compiled = torch.compile(fn, backend="blockbuster",
                             options={"backend": "reference", "tune": "off"})
    x = torch.randn(7, 24) * 1e3
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always", FallbackWarning)
        for eps in (1e-5, 1e3):                     # the second value matters
            assert _close(compiled(x, eps), fn(x, eps))
    messages = [str(c.message) for c in caught if issubclass(c.category, FallbackWarning)]
    assert messages and all("specialize_float" in m and "eps=" in m for m in messages)
