"""Hugging Face models built from their config classes (tiny sizes, random weights,
no downloads), imported whole: what a user brings. Each matches the model's own
eager output in float64 (unfused, on the reference backend: the import is what is
checked here; fusion of such layers is checked in test_hf_layers.py)."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch

import blockbuster as bb
from blockbuster.frontend.pytorch import lower_module

from helpers_torch import max_rel_error, run_imported

transformers = pytest.importorskip("transformers")
warnings.filterwarnings("ignore", category=FutureWarning)


class LastHidden(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids):
        return self.model(input_ids=ids).last_hidden_state


class FalconWithRope(torch.nn.Module):
    """A Falcon decoder layer with its rotary embedding, as FalconModel calls it."""

    def __init__(self, cfg):
        super().__init__()
        from transformers.models.falcon.modeling_falcon import (FalconDecoderLayer,
                                                                FalconRotaryEmbedding)
        self.layer = FalconDecoderLayer(cfg, 0)
        self.rope = FalconRotaryEmbedding(cfg)

    def forward(self, x):
        pos = torch.arange(x.shape[1]).unsqueeze(0)
        out = self.layer(x, alibi=None, attention_mask=None, position_ids=pos,
                         position_embeddings=self.rope(x, pos))
        return out[0] if isinstance(out, tuple) else out


def _check(model, x, tol=2e-5):
    """The imported program (unfused, reference backend) against the model in
    float64 (token ids stay integers)."""
    import copy
    model.eval()
    got, _, _ = run_imported(model, x)
    with torch.no_grad():
        want = copy.deepcopy(model).double()(x if not x.is_floating_point() else x.double())
    assert max_rel_error(got[0], want.numpy()) < tol


def test_phi3_model_with_its_empty_cache_and_a_sliding_window():
    """A whole model called as users call it: ``use_cache`` defaults to True, so the
    keys are concatenated to an empty cache (a constant with no elements); the
    rotary embedding covers the whole head, so its pass-through slice is empty; a
    window shorter than the sequence makes the boolean mask non-causal."""
    from transformers import Phi3Config, Phi3Model
    cfg = Phi3Config(hidden_size=32, intermediate_size=48, num_attention_heads=2,
                     num_key_value_heads=1, num_hidden_layers=1, vocab_size=50,
                     pad_token_id=0, sliding_window=5, max_position_embeddings=64)
    cfg._attn_implementation = "sdpa"
    _check(LastHidden(Phi3Model(cfg)), torch.randint(0, 50, (1, 13)))


def test_falcon_layer_multi_query():
    """One key/value head picked out of the fused projection by list indexing
    (``qkv[..., [-2], :]``): a size-1 slice, broadcast over the query heads."""
    from transformers import FalconConfig
    cfg = FalconConfig(hidden_size=32, num_attention_heads=2, num_hidden_layers=1,
                       vocab_size=50, max_position_embeddings=64)
    cfg._attn_implementation = "sdpa"
    assert cfg.multi_query
    _check(FalconWithRope(cfg), torch.randn(1, 13, 32) * 3)


def test_gpt_neox_layer_under_torch_compile_compiles_whole(monkeypatch, tmp_path):
    """A partial rotary embedding (a quarter of each head rotated: 4 of 16 columns,
    the rest passed through) runs in the compiled region: its pieces go through
    selection matrices (it used to be left to PyTorch with a warning)."""
    from transformers import GPTNeoXConfig
    from transformers.models.gpt_neox.modeling_gpt_neox import (GPTNeoXLayer,
                                                                GPTNeoXRotaryEmbedding)
    from blockbuster.frontend.pytorch.dynamo import FallbackWarning
    monkeypatch.setenv("BLOCKBUSTER_CACHE", str(tmp_path))
    cfg = GPTNeoXConfig(hidden_size=64, intermediate_size=96, num_attention_heads=4,
                        num_hidden_layers=1, vocab_size=50, max_position_embeddings=64)
    cfg._attn_implementation = "sdpa"

    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer, self.rope = GPTNeoXLayer(cfg, 0), GPTNeoXRotaryEmbedding(cfg)

        def forward(self, x):
            pos = torch.arange(x.shape[1]).unsqueeze(0)
            out = self.layer(x, position_embeddings=self.rope(x, pos))
            return out[0] if isinstance(out, tuple) else out
    model = Layer().eval()
    x = torch.randn(1, 13, 64)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="blockbuster",
                             options={"backend": "reference", "tune": "off"})
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("error", FallbackWarning)
        got = compiled(x)
    with torch.no_grad():
        assert max_rel_error(got.numpy(), model(x).numpy()) < 1e-5
    torch._dynamo.reset()


def test_falcon_new_decoder_architecture_grouped_qkv():
    """The fused projection viewed as (key/value groups, queries per group + 2, head
    size): split twice, the group's last two heads its key and value."""
    from transformers import FalconConfig
    cfg = FalconConfig(hidden_size=64, num_attention_heads=4, num_kv_heads=2,
                       new_decoder_architecture=True, num_hidden_layers=1,
                       vocab_size=50, max_position_embeddings=64)
    cfg._attn_implementation = "sdpa"
    _check(FalconWithRope(cfg), torch.randn(1, 13, 64) * 3)


def test_roberta_model_numbers_positions_past_its_padding():
    """RoBERTa (and XLM-R, CamemBERT...) computes position ids from the token ids —
    a running count (``cumsum``) of the tokens that are not padding — and picks its
    token-type buffer with ``gather``: a padded batch of two matches eager."""
    from transformers import RobertaConfig, RobertaModel
    cfg = RobertaConfig(hidden_size=32, intermediate_size=48, num_attention_heads=2,
                        num_hidden_layers=1, vocab_size=50, max_position_embeddings=40)
    cfg._attn_implementation = "sdpa"
    ids = torch.randint(2, 50, (2, 13))
    ids[1, 9:] = cfg.pad_token_id
    _check(LastHidden(RobertaModel(cfg)), ids)


class WithMask(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids, mask):
        return self.model(input_ids=ids, attention_mask=mask).last_hidden_state


def _padded(batch: int, length: int, vocab: int):
    """Token ids and a tokenizer's attention mask: the first sequence padded on the
    left (as for generation), the second on the right."""
    ids = torch.randint(2, vocab, (batch, length))
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[0, :4] = 0
    mask[1, length - 5:] = 0
    return ids, mask


def _check_padded_unfused_and_fused(model) -> None:
    """``model(ids, mask)`` on a padded batch, imported once and run unfused and
    fused (reference backend) against the model in float64."""
    ids, mask = _padded(2, 13, 50)
    with torch.no_grad():
        want = copy.deepcopy(model).double()(ids, mask).numpy()
    low = lower_module(model, ids, mask)
    for program in (low.program, bb.fuse(low.program).program):
        got = bb.compile(program, backend="reference")(ids=ids.numpy(), mask=mask.numpy(),
                                                       **low.weights)
        assert max_rel_error(got[program.outputs[0]].reshape(want.shape), want) < 2e-5


def test_llama_model_with_a_tokenizers_padding_mask():
    """``attention_mask`` as a tokenizer returns it: Hugging Face builds the 4-D mask
    by indexing the padding mask with ``arange`` tensors; left-padded queries attend
    no key under the causal mask, and PyTorch gives them 0, not the NaN of a
    softmax over nothing (which would reach every row of a next layer through
    0 · NaN in P·V); fused too."""
    from transformers import LlamaConfig, LlamaModel
    cfg = LlamaConfig(hidden_size=32, intermediate_size=48, num_attention_heads=2,
                      num_key_value_heads=1, num_hidden_layers=1, vocab_size=50,
                      max_position_embeddings=64)
    cfg._attn_implementation = "sdpa"
    model = WithMask(LlamaModel(cfg)).eval()
    _check_padded_unfused_and_fused(model)


def test_bert_model_with_a_tokenizers_padding_mask():
    from transformers import BertConfig, BertModel
    cfg = BertConfig(hidden_size=32, intermediate_size=48, num_attention_heads=2,
                     num_hidden_layers=1, vocab_size=50, max_position_embeddings=64)
    cfg._attn_implementation = "sdpa"
    model = WithMask(BertModel(cfg)).eval()
    ids, mask = _padded(2, 13, 50)
    got, _, _ = run_imported(model, ids, mask)
    with torch.no_grad():
        want = copy.deepcopy(model).double()(ids, mask).numpy()
    assert max_rel_error(got[0], want) < 2e-5


def test_bert_sequence_classification_pools_the_first_token():
    """The classifier reads the pooler's ``tanh(W·h[:, 0])``: one element of the tiled
    sequence axis per sequence, and a linear layer whose rows are the batch."""
    from transformers import BertConfig, BertForSequenceClassification
    cfg = BertConfig(hidden_size=32, intermediate_size=48, num_attention_heads=2,
                     num_hidden_layers=1, vocab_size=50, max_position_embeddings=64,
                     num_labels=3)
    cfg._attn_implementation = "sdpa"

    class Logits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = BertForSequenceClassification(cfg)

        def forward(self, ids, mask):
            return self.model(input_ids=ids, attention_mask=mask).logits
    model = Logits().eval()
    _check_padded_unfused_and_fused(model)


def _tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(hidden_size=32, intermediate_size=48, num_attention_heads=2,
                      num_key_value_heads=1, num_hidden_layers=1, vocab_size=50,
                      max_position_embeddings=64)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg).eval()


def test_a_decoder_passed_as_it_is_imports_without_its_key_value_cache():
    """``bb.from_torch(model, ids)`` on a Hugging Face decoder as users have it: its
    call returns a key/value cache object torch.export cannot return; the import
    calls it without the cache (``use_cache=False``), whose logits are the same,
    and leaves the model as it found it."""
    model = _tiny_llama()
    ids = torch.randint(0, 50, (1, 13))
    low = lower_module(model, ids)
    assert "forward" not in model.__dict__          # the call is restored
    assert len(low.outputs) == 1                    # the logits; no cache
    run = bb.compile(low.program, backend="reference")
    out = run(**{low.inputs[0].name: ids.numpy().reshape(13)}, **low.weights)
    with torch.no_grad():
        want = copy.deepcopy(model).double()(ids).logits.numpy()
    got = out[low.outputs[0].name].reshape(want.shape)
    assert max_rel_error(got, want) < 2e-5
    # a call that asks for the cache itself still gets torch.export's refusal, as a
    # one-line import error
    with pytest.raises(bb.frontend.pytorch.ImportError_, match="could not capture"):
        lower_module(model, ids, None, None, None, None, True)


def test_cli_runs_a_decoder_from_a_factory_with_a_tokenizers_dict(tmp_path, monkeypatch,
                                                                  capsys):
    """``run model.py:factory`` with the factory returning a decoder and a
    tokenizer's output (a dict): validated against eager PyTorch in float64."""
    import json
    import textwrap

    from blockbuster import cli
    monkeypatch.setenv("BLOCKBUSTER_CACHE", str(tmp_path / "cache"))
    (tmp_path / "decoder.py").write_text(textwrap.dedent("""
        import torch
        from transformers import GPT2Config, GPT2LMHeadModel

        def factory():
            torch.manual_seed(0)
            model = GPT2LMHeadModel(GPT2Config(n_embd=32, n_layer=1, n_head=2,
                                               vocab_size=50, n_positions=64))
            mask = torch.ones(2, 11, dtype=torch.long)
            mask[1, 8:] = 0
            return model, {"input_ids": torch.randint(0, 50, (2, 11)),
                           "attention_mask": mask}
    """))
    status = cli.main(["run", f"{tmp_path / 'decoder.py'}:factory", "--backend",
                       "reference", "--json"])
    out = capsys.readouterr()
    assert status == 0, out.err
    assert json.loads(out.out)["validation"]["passed"]


def test_gpt_neox_partial_rotary_narrower_than_a_block():
    """GPT-NeoX rotates a quarter of each head: 4 of 16 columns at this size, fewer
    than a block may hold; the rotated and passed parts are taken through selection
    matrices (before: "slicing at 4 an axis tiled in blocks of 16")."""
    from transformers import GPTNeoXConfig, GPTNeoXModel
    cfg = GPTNeoXConfig(hidden_size=64, intermediate_size=96, num_attention_heads=4,
                        num_hidden_layers=1, vocab_size=50, max_position_embeddings=64)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    _check(LastHidden(GPTNeoXModel(cfg)), torch.randint(0, 50, (2, 13)))


def test_decoder_sequence_classification_picks_each_last_real_token():
    """``LlamaForSequenceClassification`` finds each sequence's last token that is
    not padding with ``argmax`` over positions and picks its logits with
    ``logits[arange(B), last]``: an index computed from the input ids (a one-hot of
    it, summed over the sequence)."""
    from transformers import LlamaConfig, LlamaForSequenceClassification
    cfg = LlamaConfig(hidden_size=32, intermediate_size=48, num_attention_heads=2,
                      num_key_value_heads=1, num_hidden_layers=1, vocab_size=50,
                      max_position_embeddings=64, pad_token_id=0, num_labels=3)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = LlamaForSequenceClassification(cfg).eval()
    ids = torch.randint(1, 50, (2, 13))
    ids[1, 9:] = 0                                   # padded at the end
    low = lower_module(model, ids)
    out = bb.compile(low.program, backend="reference")(
        **{low.inputs[0].name: ids.numpy()}, **low.weights)
    with torch.no_grad():
        want = copy.deepcopy(model).double()(ids).logits.numpy()
    got = out[low.outputs[0].name]
    assert got.shape == want.shape == (2, 3)
    assert max_rel_error(got, want) < 2e-5


def test_bloom_model_with_a_tokenizers_padding_mask():
    """Bloom adds its ALiBi bias ``[B, H, S]``, viewed as ``[B·H, 1, S]``, to scores
    whose batch and heads are merged: the bias's heads are iterated one index at a
    time like the scores' (before: "cannot arrange axes (0, 2) as (2,)")."""
    from transformers import BloomConfig, BloomModel
    cfg = BloomConfig(hidden_size=32, n_layer=1, n_head=2, vocab_size=50)
    torch.manual_seed(0)
    model = WithMask(BloomModel(cfg)).eval()
    ids, mask = _padded(2, 13, 50)
    mask[0] = 1          # right padding only: Bloom's eager softmax gives NaN for a
    #                      query that may attend no key (left padding's first rows)
    with torch.no_grad():
        want = copy.deepcopy(model).double()(ids, mask).numpy()
    got, _, _ = run_imported(model, ids, mask)
    assert max_rel_error(got[0], want) < 2e-5


@pytest.mark.parametrize("family", ["ViT", "CLIPVision", "SiglipVision"])
def test_vision_transformer_from_pixels(family):
    """ViT's image classifier and CLIP's and SigLIP's vision towers from pixels: the
    patch embedding (a convolution in 8x8 windows of a 40x40 image), the class token
    before the patches (not SigLIP's), position embeddings, pooling (SigLIP's an
    attention head over the patches)."""
    kw = dict(hidden_size=32, intermediate_size=48, num_attention_heads=2,
              num_hidden_layers=1, image_size=40, patch_size=8, num_channels=3)
    if family == "ViT":
        cfg = transformers.ViTConfig(num_labels=3, **kw)
        net = transformers.ViTForImageClassification(cfg)
    else:
        cfg = getattr(transformers, family + "Config")(**kw)
        net = getattr(transformers, family + "Model")(cfg)
    cfg._attn_implementation = "sdpa"

    class FromPixels(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = net

        def forward(self, pixels):
            out = self.net(pixel_values=pixels)
            return out.logits if family == "ViT" else out.pooler_output
    torch.manual_seed(0)
    model = FromPixels().eval()
    pixels = torch.randn(2, 3, 40, 40) * 30
    got, _, _ = run_imported(model, pixels)
    with torch.no_grad():
        want = copy.deepcopy(model).double()(pixels.double()).numpy()
    assert max_rel_error(got[0].reshape(want.shape), want) < 2e-5


def test_gemma2_sequence_classification_with_a_mask_fuses():
    """Gemma2's mask turned to ``bool`` feeds only what becomes the attention's
    causal range: a kernel nothing reads, which the import drops (fusion met a piece
    with no outputs: "program candidate has no outputs")."""
    cfg = transformers.Gemma2Config(hidden_size=32, intermediate_size=48, num_attention_heads=2,
                                    num_key_value_heads=1, head_dim=16, num_hidden_layers=1,
                                    vocab_size=50, max_position_embeddings=64, pad_token_id=0,
                                    num_labels=3, query_pre_attn_scalar=16)

    class Logits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = transformers.Gemma2ForSequenceClassification(cfg)

        def forward(self, ids, mask):
            return self.model(input_ids=ids, attention_mask=mask).logits
    torch.manual_seed(0)
    model = Logits().eval()
    ids = torch.randint(1, 50, (2, 13))
    mask = torch.ones(2, 13, dtype=torch.long)
    ids[1, 9:], mask[1, 9:] = 0, 0
    low = lower_module(model, ids, mask)
    read = set().union(*(k.reads() for k in low.program.kernels))
    outputs = {b.name for b in low.outputs}
    assert all(set(k.writes()) & (read | outputs) for k in low.program.kernels)
    fused = bb.fuse(low.program).program
    out = bb.compile(fused, backend="reference")(
        **{low.inputs[0].name: ids.numpy(), low.inputs[1].name: mask.numpy()}, **low.weights)
    with torch.no_grad():
        want = copy.deepcopy(model).double()(ids, mask).numpy()
    assert max_rel_error(out[low.outputs[0].name].reshape(want.shape), want) < 2e-5


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_one_token_of_one_sequence(arch):
    """Batch 1, one token (the first step of decoding): the query and key lengths are
    both 1, and met as one axis that the batch iterates; its scores are the thin
    product of one query and one key (GPT-2's causal SDPA: nothing to mask). Was
    "a matrix axis of 1 is also a batch axis"."""
    torch.manual_seed(0)
    if arch == "gpt2":
        from transformers import GPT2Config, GPT2Model
        model = GPT2Model(GPT2Config(n_embd=32, n_head=4, n_layer=1, n_positions=16,
                                     vocab_size=50))
    else:
        from transformers import LlamaConfig, LlamaModel
        model = LlamaModel(LlamaConfig(hidden_size=32, intermediate_size=48,
                                       num_attention_heads=4, num_key_value_heads=2,
                                       num_hidden_layers=1, vocab_size=50))
    _check(LastHidden(model), torch.randint(0, 50, (1, 1)))
