"""The recipe as a job field: its defaults fill what the user leaves unset, an explicit
option wins (CLI and API), layout defaults apply only where they apply, a bad recipe file is
one line and exit 2, the default recipe is today's model, and a sweep takes recipes as an
axis. Expected values come from the recipe files' cited choices (data/recipes/*.toml)."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

import bertscope.config as config
import bertscope.job as job_mod
import bertscope.recipes as recipes
from bertscope.cli import main
from bertscope.config import Attention, RunConfig, WeightCast
from bertscope.errors import BertscopeError
from bertscope.job import Job, Schedule, ZeroStage
from bertscope.presets import get_model
from bertscope.recipes import Recipe

TINY = get_model("bert-tiny")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


# -- the run's fields -----------------------------------------------------------------------
def test_every_recipe_file_loads_and_sets_every_recipe_field() -> None:
    for r in Recipe:
        assert set(config.recipe_run(r)) == set(config.recipe_fields())
        job_mod.recipe_layout(r)  # checks the [layout] table


def test_a_recipe_fills_the_unset_fields_and_the_default_is_eager() -> None:
    # eager.toml: eager attention, no fusion, autocast's per-micro-batch casts, unfused adds
    plain = RunConfig()
    assert (plain.recipe, plain.attention, plain.fusion, plain.weight_cast,
            plain.fused_accumulation) == (Recipe.EAGER, Attention.EAGER, False,
                                          WeightCast.PER_MICRO_BATCH, False)
    assert RunConfig(recipe="eager") == plain
    # megatron.toml: flash attention (sdpa), fusions, kept 16-bit weights, fused adds
    meg = RunConfig(recipe="megatron")
    assert (meg.attention, meg.fusion, meg.weight_cast, meg.fused_accumulation) == (
        Attention.SDPA, True, WeightCast.KEPT, True)
    # fused.toml: DeepLearningExamples BERT: eager softmax, fused kernels, apex O2 per step
    fused = RunConfig(recipe="fused")
    assert (fused.attention, fused.fusion, fused.weight_cast, fused.fused_accumulation) == (
        Attention.EAGER, True, WeightCast.PER_STEP, False)
    # ... whose fused kernels are the named ones (layer norm, bias-GELU, FusedLAMB): its
    # eager model's elementwise chains stay apart (modeling.py runs scale, mask add, softmax
    # and dropout as separate ops); megatron fuses them; eager's --fusion means a compiler's
    assert (fused.chain_fusion, meg.chain_fusion, plain.chain_fusion) == (False, True, True)
    assert RunConfig(recipe="fused", chain_fusion=True).chain_fusion is True


def test_an_explicit_field_overrides_the_recipe_in_the_api() -> None:
    r = RunConfig(recipe="megatron", attention="eager", fused_accumulation=False)
    assert r.attention is Attention.EAGER and r.fused_accumulation is False
    assert r.weight_cast is WeightCast.KEPT  # the rest still the recipe's


def test_an_explicit_option_overrides_the_recipe_on_the_command_line(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = tmp_path / "ops.json"
    rc, _, err = run(capsys, "ops", "bert-tiny", "--recipe", "megatron", "--attention",
                     "eager", "--no-fusion", "--precision", "bf16", "--output", str(out))
    assert rc == 0, err
    saved = json.loads(out.read_text())["meta"]["run"]
    assert (saved["recipe"], saved["attention"], saved["fusion"], saved["weight_cast"],
            saved["fused_accumulation"]) == ("megatron", "eager", False, "kept", True)


# -- the layout's fields --------------------------------------------------------------------
def test_layout_defaults_apply_where_they_apply() -> None:
    gpt = get_model("gpt2-medium")  # 24 layers, 16 heads
    j = Job.build(gpt, {"recipe": "megatron", "batch": 4, "micro_batches": 8},
                  {"tp": 4, "pp": 2}, devices=64)
    lay = j.layout
    assert (lay.dp, lay.sequence_parallel, lay.zero, lay.schedule, lay.virtual_stages) == (
        8, True, ZeroStage.OPTIMIZER, Schedule.INTERLEAVED, 2)
    # tp = 1: no sequence parallelism; dp = 1: no ZeRO; pp = 1: no interleaving. Skipped,
    # the job still valid
    one = Job.build(gpt, {"recipe": "megatron"}).layout
    assert (one.sequence_parallel, one.zero, one.schedule) == (
        False, ZeroStage.NONE, Schedule.ONE_F_ONE_B)
    # 3 micro-batches are no multiple of pp = 2: the interleaved schedule does not apply
    odd = Job.build(gpt, {"recipe": "megatron", "micro_batches": 3}, {"pp": 2}).layout
    assert odd.schedule is Schedule.ONE_F_ONE_B
    # the eager recipe sets no layout
    assert Job.build(gpt, {}, {"tp": 4}, devices=8).layout.sequence_parallel is False


def test_explicit_layout_fields_win_and_one_that_does_not_apply_is_an_error() -> None:
    gpt = get_model("gpt2-medium")
    kept = Job.build(gpt, {"recipe": "megatron"}, {"tp": 4, "sequence_parallel": False,
                                                   "zero": 0}, devices=8).layout
    assert kept.sequence_parallel is False and kept.zero is ZeroStage.NONE
    with pytest.raises(BertscopeError, match="tp > 1"):
        Job.build(gpt, {"recipe": "megatron"}, {"tp": 1, "sequence_parallel": True})


def test_distributed_takes_the_recipe_layout(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run(capsys, "distributed", "gpt2-medium", "--devices", "64", "--device",
                       "a100-sxm4-80gb", "--global-batch", "512", "--tp", "4", "--pp", "2",
                       "--micro-batches", "8", "--precision", "bf16", "--recipe", "megatron")
    assert rc == 0, err
    # megatron.toml: sequence parallel, interleaved v2, ZeRO-1 and the three overlaps
    assert "dp8 tp4 sp pp2 interleaved v2 overlap-tp+grad+param m8 zero1" in out


# -- a bad file -------------------------------------------------------------------------------
@pytest.fixture
def recipe_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """A copy of the recipe files the test may break (caches cleared before and after)."""
    src = Path(str(recipes._ROOT))
    for f in src.glob("*.toml"):
        shutil.copy(f, tmp_path / f.name)
    monkeypatch.setattr(recipes, "_ROOT", tmp_path)

    def clear() -> None:
        for cached in (recipes.load, recipes.defaults, job_mod.recipe_layout):
            cached.cache_clear()

    clear()
    yield tmp_path
    clear()


@pytest.mark.parametrize(("section", "line", "says"), [
    ("run", 'flash = true', "[run] flash: not a run setting"),
    ("run", None, "[run] weight_cast: missing"),
    ("run", 'fusion = "yes"', "[run] fusion: must be true or false"),
    ("layout", "zero = 7", "[layout] zero: ZeRO stage must be 0, 1, 2 or 3"),
    ("layout", "sequence_paralel = true", "did you mean 'sequence_parallel'"),
])
def test_a_bad_recipe_file_is_one_line_and_exit_2(
        recipe_dir: Path, capsys: pytest.CaptureFixture[str], section: str,
        line: str | None, says: str) -> None:
    path = recipe_dir / "megatron.toml"
    text = path.read_text()
    if line is None:  # drop a run key
        text = "\n".join(x for x in text.splitlines() if not x.startswith("weight_cast"))
    else:
        key = line.split(" = ")[0]
        text = "\n".join(x for x in text.splitlines() if not x.startswith(f"{key} ="))
        text = text.replace(f"[{section}]\n", f"[{section}]\n{line}\n")
    path.write_text(text)
    rc, _out, err = run(capsys, "distributed", "gpt2-medium", "--devices", "8", "--device",
                       "a100-sxm4-80gb", "--global-batch", "64", "--tp", "2",
                       "--recipe", "megatron")
    assert rc == 2
    lines = [x for x in err.strip().splitlines() if x.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert "megatron.toml" in lines[0] and says in lines[0], lines[0]


# -- the default is today's model; a sweep axis ------------------------------------------------
def test_the_default_recipe_leaves_predict_unchanged(capsys: pytest.CaptureFixture[str]
                                                     ) -> None:
    args = ["predict", "bert-tiny", "--batch", "4", "--seq", "64", "--precision", "bf16",
            "--micro-batches", "2", "--device", "a100-sxm4-80gb", "--no-store"]
    rc0, without, err0 = run(capsys, *args)
    rc1, with_eager, err1 = run(capsys, *args, "--recipe", "eager")
    rc2, megatron, _ = run(capsys, *args, "--recipe", "megatron")
    assert rc0 == rc1 == rc2 == 0, err0 + err1
    assert with_eager == without
    assert megatron != without  # the recipe reaches the prediction


def test_a_sweep_takes_recipes_as_an_axis(capsys: pytest.CaptureFixture[str],
                                          tmp_path: Path) -> None:
    out = tmp_path / "sweep.csv"
    rc, _, err = run(capsys, "sweep", "bert-tiny", "--recipe", "eager,fused,megatron",
                     "--precision", "bf16", "--device", "a100-sxm4-80gb", "--output",
                     str(out), "--no-store")
    assert rc == 0, err
    rows = {r["recipe"]: r for r in csv.DictReader(out.open())}
    assert set(rows) == {"eager", "fused", "megatron"}
    # each row took its recipe's cited defaults
    assert [rows[r]["weight_cast"] for r in ("eager", "fused", "megatron")] == [
        "per_micro_batch", "per_step", "kept"]
    assert [rows[r]["attention"] for r in ("eager", "fused", "megatron")] == [
        "eager", "eager", "sdpa"]


def test_a_sweep_s_layouts_take_the_recipe_s_zero_unless_given(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    def zeros(*extra: str) -> dict[tuple[str, int], int]:
        out = tmp_path / "multi.csv"
        rc, _, err = run(capsys, "sweep", "bert-tiny", "--recipe", "eager,megatron", "--dp",
                         "4", "--tp", "1,2", "--precision", "bf16", "--device",
                         "a100-sxm4-80gb", "--output", str(out), "--no-store", *extra)
        assert rc == 0, err
        return {(r["recipe"], int(float(r["tp"]))): int(float(r["zero"]))
                for r in csv.DictReader(out.open())}

    # megatron.toml: the distributed optimizer (ZeRO 1) where dp > 1; eager sets none
    assert zeros() == {("eager", 1): 0, ("eager", 2): 0, ("megatron", 1): 1, ("megatron", 2): 1}
    assert set(zeros("--zero", "0").values()) == {0}  # given: kept


@pytest.mark.parametrize(("argv", "named"), [
    (("--recipe", "megatron"), "--recipe megatron"),
    (("--precision", "bf16", "--weight-cast", "kept"), "--weight-cast kept"),
    (("--precision", "bf16", "--fused-accumulation"), "--fused-accumulation")])
def test_profile_refuses_what_it_does_not_measure(capsys: pytest.CaptureFixture[str],
                                                  argv: tuple[str, ...], named: str) -> None:
    # the profiler measures the eager recipe only (Hugging Face-style eager PyTorch)
    rc, _, err = run(capsys, "profile", "bert-tiny", *argv, "--no-store")
    assert rc == 2
    assert len(err.strip().splitlines()) == 1 and f"{named} is not measured" in err, err
