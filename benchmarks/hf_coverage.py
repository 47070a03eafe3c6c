"""Which Hugging Face model families import whole: a coverage sweep, not a speed test.

Each model is built from its config class at a tiny size (random weights, no
download), called as users call it — ``model(input_ids=...)``, and with a
tokenizer's ``attention_mask`` (a padded batch of two: one sequence padded on the
left, one on the right) — imported with ``bb.from_torch`` and run unfused on the
reference backend against the model's own eager output in float64. Prints one line
per model and call: ``ok`` with the kernel count and the max error relative to the
output's magnitude, or the one-line import error (under ``torch.compile`` such an
operator stays in PyTorch instead).

    python benchmarks/hf_coverage.py [--only llama bert ...] [--no-mask]
"""

from __future__ import annotations

import argparse
import copy
import time
import warnings

import numpy as np
import torch

warnings.filterwarnings("ignore")

import blockbuster as bb  # noqa: E402

SMALL = dict(hidden_size=64, intermediate_size=96, num_attention_heads=4, num_hidden_layers=1,
             vocab_size=60, max_position_embeddings=64)

# name -> (config class name, extra config fields, model class name or None for AutoModel)
FAMILIES = {
    "llama": ("LlamaConfig", dict(num_key_value_heads=2), None),
    "mistral": ("MistralConfig", dict(num_key_value_heads=2), None),
    "qwen2": ("Qwen2Config", dict(num_key_value_heads=2), None),
    "qwen3": ("Qwen3Config", dict(num_key_value_heads=2, head_dim=16), None),
    "gemma": ("GemmaConfig", dict(num_key_value_heads=2, head_dim=16), None),
    "olmo": ("OlmoConfig", {}, None),
    "granite": ("GraniteConfig", {}, None),
    "starcoder2": ("Starcoder2Config", dict(num_key_value_heads=2), None),
    "phi": ("PhiConfig", {}, None),
    "cohere": ("CohereConfig", dict(num_key_value_heads=2), None),
    "gptj": ("GPTJConfig", dict(n_embd=64, n_head=4, n_layer=1, rotary_dim=8,
                                n_positions=64), None),
    "gpt2": ("GPT2Config", dict(n_embd=64, n_head=4, n_layer=1, n_positions=64), None),
    "gpt_bigcode": ("GPTBigCodeConfig", dict(n_embd=64, n_head=4, n_layer=1,
                                             n_positions=64), None),
    "opt": ("OPTConfig", dict(ffn_dim=96, word_embed_proj_dim=64), None),
    "bert": ("BertConfig", {}, None),
    "bert_classifier": ("BertConfig", dict(num_labels=3), "BertForSequenceClassification"),
    "roberta": ("RobertaConfig", {}, None),
    "xlm_roberta": ("XLMRobertaConfig", {}, None),
    "distilbert": ("DistilBertConfig", dict(dim=64, hidden_dim=96, n_heads=4, n_layers=1),
                   None),
    "electra": ("ElectraConfig", dict(embedding_size=64), None),
    "albert": ("AlbertConfig", dict(embedding_size=64), None),
    "t5_encoder": ("T5Config", dict(d_model=64, d_kv=16, d_ff=96, num_heads=4,
                                    num_layers=1), "T5EncoderModel"),
    "clip_text": ("CLIPTextConfig", {}, None),
}


def build(name: str):
    import transformers
    cfg_name, extra, model_name = FAMILIES[name]
    cfg = getattr(transformers, cfg_name)(**{**SMALL, **extra})
    cfg._attn_implementation = "sdpa"
    if model_name is None:
        return transformers.AutoModel.from_config(cfg)
    return getattr(transformers, model_name)(cfg)


class Call(torch.nn.Module):
    """``model(input_ids=ids[, attention_mask=mask])``, its first tensor output."""

    def __init__(self, model, masked: bool):
        super().__init__()
        self.model, self.masked = model, masked

    def forward(self, ids, mask=None):
        kw = {"attention_mask": mask} if self.masked else {}
        out = self.model(input_ids=ids, **kw)
        return out.logits if hasattr(out, "logits") else out.last_hidden_state


def inputs(masked: bool):
    ids = torch.randint(2, SMALL["vocab_size"], (2, 13))
    if not masked:
        return (ids,)
    mask = torch.ones(2, 13, dtype=torch.long)
    mask[0, :4] = 0
    mask[1, 9:] = 0
    return ids, mask


def check(name: str, masked: bool) -> str:
    torch.manual_seed(0)
    model = Call(build(name), masked).eval()
    args = inputs(masked)
    start = time.perf_counter()
    try:
        program = bb.from_torch(model, *args)
        feeds = {a: t.numpy() for a, t in zip(program.inputs, args)}
        got = bb.compile(program, backend="reference")(**feeds)[program.outputs[0]]
    except Exception as exc:        # noqa: BLE001 -- the sweep reports every failure
        return f"FAIL {type(exc).__name__}: {str(exc).splitlines()[0][:220]}"
    with torch.no_grad():
        want = copy.deepcopy(model).double()(*args).numpy()
    err = float(np.max(np.abs(got.reshape(want.shape) - want)) / max(1.0, np.abs(want).max()))
    verdict = "ok" if err < 1e-5 else "WRONG"
    return (f"{verdict:5s} {len(program.kernels):3d} kernels, max error {err:.1e}, "
            f"{time.perf_counter() - start:.1f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", choices=sorted(FAMILIES), default=None)
    parser.add_argument("--no-mask", action="store_true", help="skip the attention-mask calls")
    args = parser.parse_args()
    failures = 0
    for name in args.only or FAMILIES:
        for masked in (False,) if args.no_mask else (False, True):
            line = check(name, masked)
            failures += not line.startswith("ok")
            print(f"{name:16s} {'mask' if masked else 'ids ':4s}  {line}", flush=True)
    print(f"{failures} of the calls did not import whole")


if __name__ == "__main__":
    main()
