"""Hugging Face layers, imported unchanged (small configs, random weights): GPT-2
block, Llama decoder layer (rotary embeddings, GQA, causal) and BERT layer. Each
imports, fuses and matches the model's own eager output in float64."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import blockbuster as bb

transformers = pytest.importorskip("transformers")
warnings.filterwarnings("ignore", category=FutureWarning)


class LayerWithRope(torch.nn.Module):
    """A decoder layer with its rotary embedding, as the model class calls it."""

    def __init__(self, layer, rope):
        super().__init__()
        self.layer, self.rope = layer, rope

    def forward(self, x):
        pos = torch.arange(x.shape[1]).unsqueeze(0)
        out = self.layer(x, position_embeddings=self.rope(x, pos), attention_mask=None)
        return out[0] if isinstance(out, tuple) else out


def LlamaWithRope(cfg):
    from transformers.models.llama.modeling_llama import (LlamaDecoderLayer,
                                                          LlamaRotaryEmbedding)
    return LayerWithRope(LlamaDecoderLayer(cfg, 0), LlamaRotaryEmbedding(cfg))


def PhiWithRope(cfg):
    """A Phi decoder layer (partial rotary embedding: each head's first columns
    rotate, the rest pass through)."""
    from transformers.models.phi.modeling_phi import PhiDecoderLayer, PhiRotaryEmbedding
    return LayerWithRope(PhiDecoderLayer(cfg, 0), PhiRotaryEmbedding(cfg))


class FirstOutput(torch.nn.Module):
    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def forward(self, x):
        out = self.layer(x)
        return out[0] if isinstance(out, tuple) else out


def gpt2(attn="eager"):
    from transformers import GPT2Config
    from transformers.models.gpt2.modeling_gpt2 import GPT2Block
    cfg = GPT2Config(n_embd=64, n_head=4, n_layer=1, n_positions=128)
    cfg._attn_implementation = attn
    return FirstOutput(GPT2Block(cfg))


def llama(attn="sdpa"):
    from transformers import LlamaConfig
    cfg = LlamaConfig(hidden_size=64, intermediate_size=96, num_attention_heads=4,
                      num_key_value_heads=2, num_hidden_layers=1,
                      max_position_embeddings=128)
    cfg._attn_implementation = attn
    return LlamaWithRope(cfg)


def phi(attn="sdpa"):
    from transformers import PhiConfig
    cfg = PhiConfig(hidden_size=64, intermediate_size=96, num_attention_heads=4,
                    num_key_value_heads=2, num_hidden_layers=1,
                    max_position_embeddings=128)
    cfg._attn_implementation = attn
    return PhiWithRope(cfg)


def bert(attn="eager"):
    from transformers import BertConfig
    from transformers.models.bert.modeling_bert import BertLayer
    cfg = BertConfig(hidden_size=64, num_attention_heads=4, intermediate_size=96)
    cfg._attn_implementation = attn
    return FirstOutput(BertLayer(cfg))


MODELS = {"gpt2": gpt2, "llama": llama, "bert": bert}


def _float64(model, x):
    import copy
    m = copy.deepcopy(model).double().eval()
    with torch.no_grad():
        return m(x.double()).numpy()


def _rel(got, want):
    return float(np.max(np.abs(got - want)) / max(1.0, np.max(np.abs(want))))


_IMPORTED: dict = {}


def imported(name):
    """(model, x, program, fused for numba) per model, built once per session: the
    import and the fusion are the slow part, the checks below share them. ``x`` has
    row means of 1e3 and a length (37) that is not a multiple of a block."""
    if name not in _IMPORTED:
        model = MODELS[name]().eval()
        x = torch.randn(1, 37, 64) * 3 + 1e3
        program = bb.from_torch(model, x)
        _IMPORTED[name] = (model, x, program, bb.fuse(program, hardware="numba").program)
    return _IMPORTED[name]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_imports_and_matches_eager_unfused(name):
    model, x, program, _ = imported(name)
    out = bb.compile(program)(x=x.numpy())[program.outputs[0]]
    assert _rel(out.reshape(1, 37, 64), _float64(model, x)) < 2e-5


@pytest.mark.parametrize("name", sorted(MODELS))
def test_fused_matches_eager_on_numba_with_large_row_means(name):
    model, x, program, fused = imported(name)
    assert len(fused.kernels) < len(program.kernels) // 2
    out = bb.compile(fused, backend="numba")(x=x.numpy())[program.outputs[0]]
    want = _float64(model, x)
    # no worse than eager float32 against the same float64 oracle (times a margin)
    with torch.no_grad():
        eager32 = model(x).numpy()
    assert _rel(out.reshape(1, 37, 64), want) <= max(4 * _rel(eager32, want), 1e-5)


def test_llama_attention_is_causal_and_reads_no_score_matrix():
    _, _, program, fused = imported("llama")
    t = next(d for d in program.dims if d.size == 37)
    inter = [a for a in fused.arrays if a.name not in fused.inputs + fused.outputs]
    assert not any(list(a.dims).count(t.name) >= 2 for a in inter)   # no T×T array
    assert "keep_ge" in bb.format_program(fused)


def _matches_eager(model, x, program=None, unfused=True):
    """The imported program (``program``, else imported here) matches eager float64
    within 1e-5: unfused on the reference interpreter (``unfused``), fused on Numba."""
    program = program or bb.from_torch(model, x)
    want = _float64(model, x)
    if unfused:
        out = bb.compile(program)(**{program.inputs[0]: x.numpy()})[program.outputs[0]]
        assert _rel(np.asarray(out).reshape(want.shape), want) < 1e-5
    fused = bb.fuse(program, hardware="numba").program
    got = bb.compile(fused, backend="numba")(**{program.inputs[0]: x.numpy()})
    assert _rel(np.asarray(got[program.outputs[0]]).reshape(want.shape), want) < 1e-5


def test_gpt2_block_with_a_batch_of_three():
    """GPT-2's Conv1D flattens batch and sequence (``x.view(-1, E)``) around its
    ``addmm``: a batch larger than one imports, fuses and matches eager."""
    torch.manual_seed(0)
    model, x = gpt2().eval(), torch.randn(3, 29, 64)
    _matches_eager(model, x, unfused=False)


def test_gpt2_block_on_one_token():
    """A single token ([1, 1, E]): the attention's head views keep its row."""
    torch.manual_seed(0)
    model, x = gpt2().eval(), torch.randn(1, 1, 64)
    _matches_eager(model, x, unfused=False)


def test_phi_partial_rotary_embedding_batch_two_odd_length():
    """Phi rotates the first 8 columns of each head of 16 and passes the other 8
    through (``cat(q_rot, q_pass)`` inside a head): the head is cut into two blocks,
    the concatenation is one kernel; unfused and fused match eager in float64."""
    torch.manual_seed(0)
    model, x = phi().eval(), torch.randn(2, 37, 64)
    program = bb.from_torch(model, x)
    assert any(k.name.startswith("concat") for k in program.kernels)
    _matches_eager(model, x, program)


def test_gpt2_block_on_one_token_with_a_batch_of_two():
    """[2, 1, E]: ``x.view(-1, E)`` merges the batch with the one-row axis (a row
    block is one sequence of one token) and ``view(2, 1, N)`` splits it back."""
    torch.manual_seed(0)
    model, x = gpt2().eval(), torch.randn(2, 1, 64)
    _matches_eager(model, x)


def test_phi_rotating_more_than_one_block_of_a_head_is_a_clear_error():
    """Three quarters of a head of 32 rotate (24 columns), the head's blocks are 8:
    the rotate-half would swap halves within each block (wrong numbers), so the
    import refuses it in one line, located at the model's line that slices."""
    from blockbuster.frontend.pytorch import ImportError_
    from transformers import PhiConfig
    cfg = PhiConfig(hidden_size=128, intermediate_size=96, num_attention_heads=4,
                    num_hidden_layers=1, max_position_embeddings=128,
                    partial_rotary_factor=0.75)
    cfg._attn_implementation = "sdpa"
    with pytest.raises(ImportError_, match=r"modeling_phi\.py:\d+: aten\.slice\.Tensor: "
                                           r".*split into blocks of 24 and of 8"):
        bb.from_torch(PhiWithRope(cfg).eval(), torch.randn(2, 13, 128))
