"""The README's model-family examples, run through the command line (smaller shapes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bertscope.cli import main

CONFIGS = Path(__file__).resolve().parents[2] / "examples" / "configs"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    assert rc == 0, err
    return out


@pytest.mark.parametrize("argv", [
    ("ops", "gpt2", "--seq", "64", "--batch", "2"),
    ("ops", "llama3-8b", "--seq", "256", "--batch", "1", "--precision", "bf16",
     "--attention", "sdpa"),
    ("predict", "gpt2", "--seq", "64", "--device", "a100", "--precision", "bf16"),
    ("predict", "llama2-7b", "--seq", "128", "--batch", "1", "--device", "h100",
     "--precision", "bf16"),
    ("distributed", "gpt3-175b", "--seq", "2048", "--precision", "bf16", "--devices", "1024",
     "--device", "a100", "--global-batch", "1536", "--tp", "8", "--pp", "16", "--dp", "8",
     "--micro-batches", "192", "--checkpoint", "full"),
    ("distributed", "llama2-70b", "--seq", "4096", "--precision", "bf16", "--devices", "64",
     "--device", "h100", "--global-batch", "64", "--search", "--top", "3"),
], ids=lambda a: f"{a[0]}-{a[1]}")
def test_family_examples_run(capsys, argv) -> None:
    out = run(capsys, *argv)
    assert argv[1] in out


@pytest.mark.parametrize("config", ["tiny-gpt2.json", "tiny-llama.json"])
@pytest.mark.parametrize("hf", [False, True])
def test_profile_examples_run(capsys, config: str, hf: bool) -> None:
    pytest.importorskip("torch")
    if hf:
        pytest.importorskip("transformers")
    out = run(capsys, "profile", str(CONFIGS / config), "--batch", "1", "--seq", "16",
              "--iters", "1", "--warmup", "0", "--no-store", *(["--hf"] if hf else []))
    assert "unattributed" in out
