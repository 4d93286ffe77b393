"""predict says whether the job fits one device (needed vs available memory), so a time for a
job that cannot run on the part is never shown as if it could (issue #32, item 5)."""

from __future__ import annotations

from bertscope.analytic import MemoryEstimate, ops
from bertscope.cli import main
from bertscope.report.predict import memory_verdict


def test_the_verdict_turns_at_the_estimated_peak() -> None:
    table = ops("bert-tiny", batch=2, seq=16)
    peak = MemoryEstimate.of(table).peak
    assert peak > 0
    fits, line = memory_verdict(table, peak)
    assert fits and line.startswith("memory: fits")
    fits, line = memory_verdict(table, peak - 1)
    assert not fits and line.startswith("memory: does not fit")


def test_predict_says_llama2_70b_does_not_fit_an_a100_and_bert_base_does(capsys,
                                                                        monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "300")
    monkeypatch.setenv("BERTSCOPE_STORE", "off")
    # Llama-2-70B: ~69e9 parameters x (4 B fp32 weights + 4 B gradients + 8 B Adam moments)
    # ~ 1.1e12 B before any activation, against 80 GB on the A100 SXM4 80GB
    assert main(["predict", "llama2-70b", "--device", "a100", "--batch", "1", "--seq", "4096",
                 "--precision", "bf16"]) == 0
    out = capsys.readouterr().out
    assert "memory: does not fit one device" in out and "bertscope distributed" in out
    # BERT-base: 110e6 x 16 B ~ 1.8 GB plus activations of batch 8 x 128 tokens: far below 80 GB
    assert main(["predict", "bert-base", "--device", "a100"]) == 0
    assert "memory: fits" in capsys.readouterr().out
