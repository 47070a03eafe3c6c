"""Hugging Face layers imported unchanged: what fusion does to each.

For a GPT-2 block, a Llama decoder layer (with its rotary embedding) and a BERT
layer at small configurations (random weights; sequence lengths that are not
multiples of the block sizes), prints kernels before -> after (per call; weight
preparation apart), modeled global bytes before -> after against the compulsory
bytes, the import and fuse times, and the max error of the fused program on Numba
against the model's own eager output in float64 (and eager float32's, for scale).

    python benchmarks/hf_layers.py [--seq 100] [--hidden 256]
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "torch"))
warnings.filterwarnings("ignore")

import blockbuster as bb  # noqa: E402
from blockbuster.ir.prep import split_weight_prep  # noqa: E402


def models(hidden: int):
    from transformers import BertConfig, GPT2Config, LlamaConfig
    from transformers.models.bert.modeling_bert import BertLayer
    from transformers.models.gpt2.modeling_gpt2 import GPT2Block
    from test_hf_layers import FirstOutput, LlamaWithRope
    heads = max(2, hidden // 64)
    g = GPT2Config(n_embd=hidden, n_head=heads, n_layer=1, n_positions=1024)
    g._attn_implementation = "eager"
    lc = LlamaConfig(hidden_size=hidden, intermediate_size=hidden * 2,
                     num_attention_heads=heads, num_key_value_heads=max(1, heads // 2),
                     num_hidden_layers=1, max_position_embeddings=1024)
    lc._attn_implementation = "sdpa"
    bc = BertConfig(hidden_size=hidden, num_attention_heads=heads,
                    intermediate_size=hidden * 2)
    bc._attn_implementation = "eager"
    return {"GPT2Block": FirstOutput(GPT2Block(g)), "LlamaDecoderLayer": LlamaWithRope(lc),
            "BertLayer": FirstOutput(BertLayer(bc))}


def per_call(program) -> int:
    split = split_weight_prep(program)
    return len(split.per_call.kernels)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq", type=int, default=100)
    ap.add_argument("--hidden", type=int, default=256)
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    hw = bb.compile  # noqa: F841 (the import above is what matters)
    from blockbuster.backends.registry import get_backend
    numba = get_backend("numba")
    print(f"seq {args.seq}, hidden {args.hidden}, hardware {numba.hardware.summary()}")
    print(f"{'model':18} {'kernels':>9} {'per call':>9} {'global MB':>16} {'compulsory':>10} "
          f"{'import s':>8} {'fuse s':>7} {'max err':>9} {'eager f32':>9}")
    for name, model in models(args.hidden).items():
        model.eval()
        x = torch.randn(1, args.seq, args.hidden)
        t0 = time.perf_counter()
        p = bb.from_torch(model, x)
        t1 = time.perf_counter()
        fused = bb.fuse(p, hardware="numba").program
        t2 = time.perf_counter()
        c0, c1 = bb.cost(p, hardware="numba"), bb.cost(fused, hardware="numba")
        out = bb.compile(fused, backend="numba")(x=x.numpy())[p.outputs[0]]
        with torch.no_grad():
            want = copy.deepcopy(model).double()(x.double()).numpy()
            eager = model(x).numpy()
        scale = max(1.0, np.abs(want).max())
        err = np.abs(out.reshape(want.shape) - want).max() / scale
        err32 = np.abs(eager - want).max() / scale
        print(f"{name:18} {len(p.kernels):>3} -> {len(fused.kernels):<3} "
              f"{per_call(p):>3} -> {per_call(fused):<3} "
              f"{c0.global_bytes / 1e6:>7.2f} -> {c1.global_bytes / 1e6:<6.2f} "
              f"{c1.compulsory_bytes / 1e6:>10.2f} {t1 - t0:>8.2f} {t2 - t1:>7.2f} "
              f"{err:>9.1e} {err32:>9.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
