"""`bertscope profile --nproc 2`: real DistributedDataParallel training under torchrun with
gloo on this CPU, every rank captured, all-reduce measured and predicted.

The gradient volume is checked against the parameter count (fp32 gradients of every
parameter: 4 x 4,433,468 bytes for bert-tiny), which `analytic.parameter_count` derives from
the model sizes, independently of what DDP records."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from bertscope.analytic import parameter_count
from bertscope.cli import main
from bertscope.presets import get_model
from bertscope.taxonomy import Category, Phase

torch = pytest.importorskip("torch")
if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

pytestmark = pytest.mark.slow


def test_profile_nproc_2_measures_and_predicts_the_all_reduce(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    scratch = tmp_path / "tmp"  # the machine's temporary folder, for this run
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    out = tmp_path / "ddp.json"
    rc = main(["profile", "bert-tiny", "--nproc", "2", "--batch", "2", "--seq", "16",
               "--iters", "2", "--warmup", "1", "--top", "0", "--output", str(out),
               "--statistic", "median"])
    printed = capsys.readouterr().out
    assert rc == 0, printed
    doc = json.loads(out.read_text())
    ddp = doc["meta"]["ddp"]
    assert ddp["world_size"] == 2 and ddp["backend"] == "gloo"
    grads = 4 * parameter_count(get_model("bert-tiny"))
    assert grads == 4 * 4_433_468
    assert len(ddp["ranks"]) == 2
    for rank in ddp["ranks"]:
        assert rank["all_reduce_s"] > 0  # measured on both ranks
        assert 0 <= rank["overlap_s"] <= rank["all_reduce_s"]
        assert rank["exposed_s"] == pytest.approx(rank["all_reduce_s"] - rank["overlap_s"])
        assert rank["calls"] >= 1
        assert rank["bytes"] == grads  # every fp32 gradient, once per iteration
        assert 0 < rank["share"] < 1
        assert 0 <= rank["peer_wait_s"] <= rank["all_reduce_s"]
    pred = ddp["predicted"]
    assert pred["bytes"] == grads and pred["all_reduce_s"] > 0
    assert 0 <= pred["overlap_s"] <= pred["all_reduce_s"]
    # the op table has the collectives as communication, and both ranks' iterations
    comm = [r for r in doc["rows"] if r["category"] == Category.COMMUNICATION]
    assert comm and all(r["phase"] == Phase.COMMUNICATION for r in comm)
    assert len(doc["meta"]["iteration_times_s"]) == 4
    assert doc["meta"]["statistic"] == "median"  # passed through to every rank
    # the printed table shows measured and predicted shares side by side
    assert "measured" in printed and "predicted" in printed
    # nothing left in the temporary folder: the launch folder went, and torchrun's
    # torchelastic_* log folder (which torchrun itself never removes) went with it
    assert list(scratch.iterdir()) == []
    line = next(ln for ln in printed.splitlines() if "all-reduce share of iteration" in ln)
    assert line.count("%") == 2
    assert "prediction assumed" in printed
    # recorded in the runs store like a single-process profile: the rank-mean op table with
    # its collectives, the world size and both all-reduce figures
    from bertscope.store import Store

    st = Store.open(Path(os.environ["BERTSCOPE_STORE"]))
    (run,) = st.list(kind="profile")
    got = st.get(run["id"])
    assert got["inputs"]["nproc"] == 2
    assert got["summary"]["ddp"]["predicted"]["bytes"] == grads
    assert got["summary"]["ddp"]["measured"]["all_reduce_s"] > 0
    ops = st.ops(run["id"])
    assert len(ops) == len(doc["rows"])
    assert (ops["category"] == Category.COMMUNICATION).sum() == len(comm)
    st.close()


def test_a_failing_rank_is_one_line_and_exit_2(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    from bertscope.measure import ddp

    monkeypatch.setattr(ddp, "WORKER", "bertscope.no_such_worker")
    out = tmp_path / "unused.json"
    rc = main(["profile", "bert-tiny", "--nproc", "2", "--batch", "2", "--seq", "16",
               "--iters", "1", "--warmup", "0", "--output", str(out)])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.startswith("bertscope: error: distributed run failed") and err.count("\n") == 1
    assert not out.exists()


def test_interrupt_ends_the_whole_process_group() -> None:
    from bertscope.measure.ddp import _kill_group

    code = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', " \
           "'import time; time.sleep(60)']); time.sleep(60)"
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    time.sleep(0.5)
    t0 = time.perf_counter()
    _kill_group(proc)
    assert proc.poll() is not None and time.perf_counter() - t0 < 5
    for _ in range(50):  # the child in the same group is gone too (once reaped)
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail("a process of the group survived")
