"""Record the small CPU training-step traces of Hugging Face models in `hf/` (run it to
regenerate them; needs torch and transformers, which the tests do not).

    .venv/bin/python tests/data/traces/record_hf.py

Each is one AdamW training step (forward, loss, backward, optimizer) of a 2-layer model of
tiny width (BERT, GPT-2, Llama, T5, ViT, XLNet with a 4-position memory), recorded by
torch.profiler on CPU with shapes, modules and stacks, as a user would record one
(`with_modules=True, with_stack=True`). To keep the files small, the Python frame events
(python_function events other than `nn.Module: ...`) are dropped: the trace reader drops
them too; everything else is as torch wrote it.
"""

from __future__ import annotations

import gzip
import json
import sys
import tempfile
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, schedule

HERE = Path(__file__).parent / "hf"


def _models() -> dict[str, tuple[torch.nn.Module, dict[str, torch.Tensor]]]:
    import transformers as tf

    torch.manual_seed(0)
    ids = torch.randint(0, 64, (2, 8))
    bert = tf.BertForMaskedLM(tf.BertConfig(
        vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=16, attn_implementation="eager"))
    gpt2 = tf.GPT2LMHeadModel(tf.GPT2Config(
        vocab_size=64, n_embd=16, n_layer=2, n_head=2, n_positions=16,
        attn_implementation="eager"))
    t5 = tf.T5ForConditionalGeneration(tf.T5Config(
        vocab_size=64, d_model=16, d_kv=8, d_ff=32, num_layers=2, num_decoder_layers=2,
        num_heads=2, decoder_start_token_id=0, attn_implementation="eager"))
    vit = tf.ViTForImageClassification(tf.ViTConfig(
        image_size=16, patch_size=8, num_channels=3, hidden_size=16, num_hidden_layers=2,
        num_attention_heads=2, intermediate_size=32, num_labels=4, attn_implementation="eager"))
    llama = tf.LlamaForCausalLM(tf.LlamaConfig(
        vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=16,
        attn_implementation="eager"))
    xlnet = tf.XLNetLMHeadModel(tf.XLNetConfig(
        vocab_size=64, d_model=16, n_layer=2, n_head=2, d_inner=32, mem_len=4))
    perm = torch.zeros(2, 8, 8)
    perm[:, :, -2:] = 1.0  # the last two positions are predicted, seen by no one
    mapping = torch.zeros(2, 2, 8)
    mapping[:, 0, 6] = mapping[:, 1, 7] = 1.0
    xlnet_batch = {"input_ids": ids, "perm_mask": perm, "target_mapping": mapping,
                   "token_type_ids": (torch.arange(8) >= 4).long().expand(2, 8),
                   "mems": [torch.randn(4, 2, 16) for _ in range(2)], "use_mems": True,
                   "labels": ids[:, -2:].contiguous()}
    return {
        "bert": (bert, {"input_ids": ids, "labels": ids}),
        "xlnet": (xlnet, xlnet_batch),
        "llama": (llama, {"input_ids": ids, "labels": ids}),
        "gpt2": (gpt2, {"input_ids": ids, "labels": ids}),
        "t5": (t5, {"input_ids": ids, "labels": ids[:, :4].contiguous()}),
        "vit": (vit, {"pixel_values": torch.randn(2, 3, 16, 16), "labels": torch.tensor([1, 3])}),
    }


def profile_steps(model: torch.nn.Module, batch: dict[str, torch.Tensor], raw: Path,
                  steps: int = 1) -> None:
    """Record `steps` AdamW training steps of `model` (after one warm-up step) on CPU with
    shapes, modules and stacks, as torch.profiler's Chrome trace JSON at `raw` (also used by
    bench/bench_trace.py --recorded)."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model.train()
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_modules=True,
                 with_stack=True, schedule=schedule(wait=0, warmup=1, active=steps),
                 on_trace_ready=lambda p: p.export_chrome_trace(str(raw))) as prof:
        for _ in range(steps + 1):
            model(**batch).loss.backward()
            opt.step()
            opt.zero_grad()
            prof.step()


def record(name: str, model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> Path:
    """One training step of `model` recorded into hf/<name>_cpu_train.json.gz."""
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "trace.json"
        profile_steps(model, batch, raw)
        doc = json.loads(raw.read_text())
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") != "python_function"
                          or str(e.get("name", "")).startswith("nn.Module: ")]
    out = HERE / f"{name}_cpu_train.json.gz"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(gzip.compress(json.dumps(doc).encode(), compresslevel=9, mtime=0))
    return out


def main() -> None:
    """Record every model's trace (or those named on the command line)."""
    wanted = set(sys.argv[1:])
    for name, (model, batch) in _models().items():
        if not wanted or name in wanted:
            print(record(name, model, batch))


if __name__ == "__main__":
    main()
