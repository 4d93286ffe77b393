"""Right on every device: a run is priced only at its own format's peak, or refused.

Over every catalog device file and every precision, the formats a device has are read from
its TOML's own `[peak_TFLOPS]` table (not through `select_peaks`): predict either prices the
run's GEMMs at that format or refuses in one line naming the device, the format and the
formats it has; sweep skips and counts the pair; distributed refuses like predict. The study
runs its 16-bit column in fp16 on a device without bf16 (V100) and says so."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from bertscope.analytic import build
from bertscope.cli import main
from bertscope.config import Precision, RunConfig
from bertscope.errors import BertscopeError
from bertscope.parallel import Cluster, Layout, Workload, evaluate
from bertscope.perf import Prediction, load_profile, predict
from bertscope.presets import get_model
from bertscope.studies import sections as s
from bertscope.studies.study import DEVICES, PHASES, StudyConfig
from bertscope.sweep import sweep

CATALOG = sorted((Path(__file__).resolve().parents[2] / "src" / "bertscope" / "data"
                  / "devices").glob("*.toml"))
FORMAT = {"fp32": "fp32", "tf32": "tf32", "bf16": "bf16", "fp16": "fp16", "fp8": "fp8"}
"""Precision -> the number format its GEMMs run in (tf32: fp32 training with TF32 matmuls;
fp8: the linear layers' GEMMs)."""
FLOATS = ("fp32", "tf32", "bf16", "fp16", "fp8")


def _file(path: Path) -> tuple[str, set[str]]:
    """A device file's name and the formats its peak table lists."""
    doc = tomllib.loads(path.read_text())
    return doc["name"], set(doc["peak_TFLOPS"])


def test_the_catalog_is_all_here() -> None:
    assert len(CATALOG) >= 15 and {_file(p)[0] for p in CATALOG} >= {
        "v100-sxm2-32gb", "a100-sxm4-80gb", "tpu-v4", "mi50-32gb", "tpu-v1"}


@pytest.mark.parametrize("path", CATALOG, ids=lambda p: p.stem)
@pytest.mark.parametrize("precision", list(FORMAT))
def test_predict_prices_the_runs_own_format_or_refuses(path, precision) -> None:
    name, has = _file(path)
    table = build(get_model("bert-tiny"), RunConfig(batch=1, seq=8, precision=precision))
    fmt = FORMAT[precision]
    if fmt in has:
        got = Prediction.of(predict(table, load_profile(path)))
        assert got.gemm_format.value == fmt
        assert not any("GEMMs at" in n for n in got.notes)
        return
    with pytest.raises(BertscopeError) as e:
        predict(table, load_profile(path))
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{name} has no ")
    if has & set(FLOATS):  # names the formats it has and a precision it can run
        assert f"has no {fmt} (it has " in msg
        for f in has:
            assert f in msg
        suggested = msg.rsplit("--precision ", 1)[1]
        assert suggested in has and suggested != fmt
    else:  # TPU v1: no floating-point format at all
        assert "cannot run training" in msg


def test_the_cli_refuses_in_one_line(capsys) -> None:
    assert main(["predict", "bert-tiny", "--device", "v100", "--precision", "bf16",
                 "--seq", "16", "--no-store"]) == 2
    out, err = capsys.readouterr()
    assert err.strip() == ("bertscope: error: v100-sxm2-32gb has no bf16 (it has fp32, fp16); "
                           "pass --precision fp16")
    assert "predicted iteration" not in out


def test_sweep_skips_and_counts_the_pairs_a_device_cannot_run() -> None:
    res = sweep(["bert-tiny"], ["v100", "a100", "tpu-v4"], batch=[1], seq=[8],
                precision=["fp32", "bf16", "fp16"])
    ran = {(r["device"], r["precision"]) for r in res.frame.to_dict(orient="records")}
    # v100: fp32, fp16 (no bf16); a100: all three; tpu-v4: bf16 only
    assert ran == {("v100-sxm2-32gb", "fp32"), ("v100-sxm2-32gb", "fp16"),
                   ("a100-sxm4-80gb", "fp32"), ("a100-sxm4-80gb", "bf16"),
                   ("a100-sxm4-80gb", "fp16"), ("tpu-v4", "bf16")}
    assert res.grid_size == 9 and res.evaluated == 6 and res.skipped == 3


def test_distributed_refuses_like_predict() -> None:
    work = Workload(model=get_model("bert-tiny"), run=RunConfig(batch=1, seq=8,
                                                                precision="bf16"),
                    global_batch=16)
    with pytest.raises(BertscopeError, match=r"^v100-sxm2-32gb has no bf16 \(it has fp32, "
                                             r"fp16\); pass --precision fp16$"):
        evaluate(work.job(Layout(dp=2), 1), Cluster.build("v100", 2))


@pytest.fixture(scope="module")
def study_sections() -> list[s.Section]:
    """The default study's devices and precisions, on a tiny model (its predicted sections
    that compare devices; the single-device ones use the A100)."""
    cfg = StudyConfig(output="unused", models=("bert-tiny",), measure=False)
    assert cfg.devices == DEVICES and "v100" in cfg.devices
    ctx = s.Ctx(models=[get_model(m) for m in cfg.models],
                devices=[load_profile(d) for d in cfg.devices],
                precisions=[Precision(p) for p in cfg.precisions], phases=list(PHASES))
    return [s.where_time_goes(ctx), s.bound_share(ctx), s.mixed_precision(ctx),
            s.checkpointing(ctx, sweep), s.distributed(ctx), s.implications(ctx, sweep),
            s.recipe_stacks(ctx)]


def test_the_default_studys_v100_columns_run_fp16(study_sections) -> None:
    shares = study_sections[0].tables["shares"]
    v100 = shares[(shares["device"] == "v100-sxm2-32gb") & (shares["source"] == "predicted")]
    assert set(v100["format"]) == {"fp32", "fp16"}
    assert set(v100[v100["precision"] == "16-bit"]["format"]) == {"fp16"}
    a100 = shares[shares["device"] == "a100-sxm4-80gb"]
    assert set(a100[a100["precision"] == "16-bit"]["format"]) == {"bf16"}
    # the numbers are fp16's: equal to predict with precision fp16 on the V100
    t = predict(build(get_model("bert-tiny"), RunConfig(batch=PHASES[0].batch,
                                                        seq=PHASES[0].seq, precision="fp16",
                                                        optimizer="lamb")), "v100").df
    want = t.groupby(t["category"].astype(str))["time_s"].sum() / t["time_s"].sum()
    got = v100[(v100["precision"] == "16-bit") & (v100["by"] == "category")
               & (v100["phase"] == PHASES[0].name)].set_index("key")["share"]
    for cat, share in want.items():
        assert got[cat] == pytest.approx(share, rel=1e-12)


def test_no_table_prices_a_format_a_device_lacks(study_sections) -> None:
    formats = dict(_file(p) for p in CATALOG)
    checked = 0
    for sec in study_sections:
        for name, df in sec.tables.items():
            if not {"device", "format"} <= set(df.columns):
                continue
            pred = df[df["source"] == "predicted"] if "source" in df.columns else df
            for dev, fmt in zip(pred["device"].astype(str), pred["format"], strict=True):
                assert fmt in formats[dev], (sec.key, name, dev, fmt)
                checked += 1
    assert checked > 100
    # the TPUs have no fp32 peak: their fp32 column is skipped, and a note says so
    prec = study_sections[2]
    df = prec.tables["precision_shares"]
    assert set(df[df["device"] == "tpu-v4"]["precision"]) == {"16-bit"}
    assert any(n.startswith("tpu-v4: no fp32") for n in prec.notes)
    assert any(n.startswith("v100-sxm2-32gb: its 16-bit column runs fp16") for n in prec.notes)


def test_no_finding_says_bf16_about_the_v100(study_sections) -> None:
    findings = [f for sec in study_sections for f in sec.findings]
    assert any("v100" in f for f in findings)
    for f in findings:
        assert not ("v100" in f and "bf16" in f), f


@pytest.mark.parametrize(("devices", "precisions", "message"), [
    (("tpu-v1",), ("fp32", "bf16"), "tpu-v1 runs none of the studied precisions (fp32, bf16; "
                                     "it has int8)"),
    (("tpu-v4",), ("fp32",), "tpu-v4 runs none of the studied precisions (fp32; it has bf16, "
                             "int8)"),
    (("a100", "tpu-v4"), ("fp8", "bf16"), "no studied device runs fp8"),
])
def test_a_study_no_device_can_run_is_refused_before_any_work(devices, precisions, message,
                                                              tmp_path) -> None:
    from bertscope.studies.study import study

    with pytest.raises(BertscopeError) as e:
        study(StudyConfig(output=tmp_path / "out", models=("bert-tiny",), devices=devices,
                          precisions=precisions, measure=False))
    assert str(e.value).startswith(message) and "\n" not in str(e.value)
    assert list(tmp_path.iterdir()) == []  # nothing written
