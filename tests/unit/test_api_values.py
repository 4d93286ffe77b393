"""The public API reads its arguments as the command line does (issue 33, item 5): the same
typed parsers (RunConfig's validation, the enum parser, the sweep axis parser); a string where
a list is expected is ONE value, a scalar is a one-value list, a bad name or value is a
`bertscope.Error` (the same class as `BertscopeError`) in one short line."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import bertscope
from bertscope import errors
from bertscope.analytic import MemoryEstimate
from bertscope.errors import BertscopeError, as_values
from bertscope.job import Layout
from bertscope.perf import load_profile, predict
from bertscope.presets import get_model
from bertscope.studies.study import StudyConfig
from bertscope.taxonomy import Category, Phase


def _one_line(e: pytest.ExceptionInfo[BaseException], limit: int = 300) -> str:
    text = str(e.value)
    assert "\n" not in text and len(text) < limit, text
    return text


def test_error_is_the_package_error() -> None:
    assert bertscope.Error is BertscopeError
    assert "Error" in bertscope.__all__ and "Error" in dir(bertscope)


def test_checkpoint_none_adds_no_recompute_rows() -> None:
    """none keeps every activation: no row reruns anything; full reruns each layer's
    forward (so the check below can fail)."""
    none = bertscope.ops("bert-tiny", checkpoint="none")
    full = bertscope.ops("bert-tiny", checkpoint="full")
    assert Phase.RECOMPUTE not in set(none.columns["phase"])
    assert Phase.RECOMPUTE in set(full.columns["phase"])


@pytest.mark.parametrize("old", ["checkpointing", "microbatches"])
def test_an_old_spelling_is_refused_naming_the_new_one(old) -> None:
    with pytest.raises(bertscope.Error) as e:
        bertscope.ops("bert-tiny", **{old: "none"})
    text = _one_line(e)
    assert repr(old) in text
    assert {"checkpointing": "'checkpoint'", "microbatches": "'micro_batches'"}[old] in text


@pytest.mark.parametrize("value", ["no", "off", "false", "False", 0, 1, None, "yes"])
def test_a_bool_setting_takes_a_bool_only(value) -> None:
    """A truthy string never keeps dropout on silently: anything but a bool is refused."""
    with pytest.raises(bertscope.Error) as e:
        bertscope.ops("bert-tiny", dropout=value)
    assert "dropout" in _one_line(e)


def test_dropout_false_drops_the_dropout_rows() -> None:
    off = bertscope.ops("bert-tiny", dropout=False)
    on = bertscope.ops("bert-tiny", dropout=True)
    assert Category.DROPOUT not in set(off.columns["category"])
    assert Category.DROPOUT in set(on.columns["category"])


def test_numpy_integers_are_integers() -> None:
    assert bertscope.ops("bert-tiny", batch=np.int64(4)).run.batch == 4
    assert type(bertscope.ops("bert-tiny", batch=np.int64(4)).run.batch) is int


@pytest.mark.parametrize("model", [5, None, ["bert-tiny"], b"bert-tiny", "x" * 100_000])
def test_a_model_that_is_no_name_or_path_is_refused(model) -> None:
    with pytest.raises(bertscope.Error) as e:
        bertscope.ops(model)
    _one_line(e)


def test_the_model_helpers_take_names() -> None:
    """parameter_count and memory_estimate take a preset name as ops does: the same
    figures as from the ModelConfig."""
    m = get_model("bert-tiny")
    assert bertscope.parameter_count("bert-tiny") == bertscope.parameter_count(m)
    est = bertscope.memory_estimate("bert-tiny", {"batch": 4})
    assert est == MemoryEstimate.of(bertscope.ops(m, batch=4))
    with pytest.raises(bertscope.Error):
        bertscope.memory_estimate("bert-tiny", {"batchsize": 4})


def test_a_string_is_one_model_and_one_device() -> None:
    one = bertscope.sweep("bert-tiny", "a100", batch=[4])
    listed = bertscope.sweep(["bert-tiny"], ["a100"], batch=[4])
    assert list(one.frame["model"]) == ["bert-tiny"] and one.evaluated == 1
    assert one.frame.equals(listed.frame)


def test_a_scalar_axis_is_one_value() -> None:
    """batch=8 evaluates the same point as batch=[8]; precision="bf16" is one precision,
    not the characters b, f, 1, 6."""
    scalar = bertscope.sweep(["bert-tiny"], batch=8, precision="bf16", dropout=False)
    listed = bertscope.sweep(["bert-tiny"], batch=[8], precision=["bf16"], dropout=[False])
    assert scalar.evaluated == 1 and scalar.frame.equals(listed.frame)
    assert list(scalar.frame["batch"]) == [8] and list(scalar.frame["precision"]) == ["bf16"]


def test_ranges_and_arrays_are_lists() -> None:
    r = bertscope.sweep(["bert-tiny"], batch=range(1, 4), seq=np.array([32, 64]))
    assert r.evaluated == 3 * 2
    assert sorted(set(r.frame["batch"])) == [1, 2, 3]


@pytest.mark.parametrize(("axes", "needle"), [
    ({"batch": {8: 1}}, "batch"),             # a mapping's keys are never taken silently
    ({"batch": "8"}, "batch"),                # one value, and not an integer
    ({"precision": "fp64"}, "fp64"),
    ({"dropout": "no"}, "dropout"),
    ({"checkpointing": "none"}, "checkpoint"),
    ({"zero": 5}, "zero"),
])
def test_a_bad_axis_is_one_line(axes, needle) -> None:
    with pytest.raises(bertscope.Error) as e:
        bertscope.sweep(["bert-tiny"], **axes)
    assert needle in _one_line(e)


@pytest.mark.parametrize("kw", [{"workers": 0}, {"max_configs": "many"}, {"progress": 5}])
def test_sweep_options_are_checked(kw) -> None:
    with pytest.raises(bertscope.Error):
        bertscope.sweep(["bert-tiny"], **kw)


def test_an_endless_iterable_is_refused(monkeypatch) -> None:
    monkeypatch.setattr(errors, "MAX_VALUES", 100)
    with pytest.raises(bertscope.Error, match="more than 100 values"):
        as_values(itertools.count(1), "batch")
    assert as_values(range(100), "batch") == tuple(range(100))


def test_study_lists_take_one_value() -> None:
    cfg = StudyConfig(precisions="fp32", models="bert-tiny", devices="a100")
    assert cfg.precisions == ("fp32",) and cfg.models == ("bert-tiny",)
    assert cfg.devices == ("a100",)


@pytest.mark.parametrize(("kw", "needle"), [
    ({"precisions": "fp64"}, "fp64"),
    ({"precisions": ["fp32", 16]}, "16"),
    ({"quick": "yes"}, "quick"),
    ({"models": []}, "models"),
])
def test_study_config_values_are_checked(kw, needle) -> None:
    with pytest.raises(bertscope.Error) as e:
        StudyConfig(**kw)
    assert needle in _one_line(e)


def test_study_refuses_bad_arguments_before_any_work(tmp_path) -> None:
    out = tmp_path / "s"
    with pytest.raises(bertscope.Error) as e:
        bertscope.study(output=out, precision="fp32")
    assert "'precisions'" in _one_line(e)
    with pytest.raises(bertscope.Error):
        bertscope.study(5)  # type: ignore[arg-type]
    assert not out.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("path", "kw"), [(5, {}), (b"t.json", {}), ("", {}),
                                          ("t.json", {"rank": -1}),
                                          ("t.json", {"rank": "0"}),
                                          ("t.json", {"patterns": 5})])
def test_read_trace_checks_its_arguments(path, kw) -> None:
    with pytest.raises(bertscope.Error) as e:
        bertscope.read_trace(path, **kw)
    _one_line(e)


def test_predict_takes_a_device_name_and_checks_its_arguments() -> None:
    table = bertscope.ops("bert-tiny")
    by_name = predict(table, "a100").columns["time_s"].sum()
    assert by_name == predict(table, load_profile("a100")).columns["time_s"].sum()
    for args in (("table", "a100"), (table, 5)):
        with pytest.raises(bertscope.Error):
            predict(*args)
    with pytest.raises(bertscope.Error):
        predict(table, "a100", knobs=2)


def test_layout_switch_takes_a_bool_only() -> None:
    with pytest.raises(bertscope.Error):
        Layout(tp=2, sequence_parallel="no")
    with pytest.raises(bertscope.Error):
        Layout.fill(4, tp=2, sequence_parallel="no")
    assert Layout(tp=2, sequence_parallel=np.bool_(True)).sequence_parallel is True


@pytest.mark.parametrize("change", [{"share_layers": "no"}, {"tie_word_embeddings": 0},
                                    {"gated_ffn": "false"}, {"position_offset": "2"},
                                    {"name": 5}])
def test_model_config_fields_take_their_types(change) -> None:
    import dataclasses

    with pytest.raises(bertscope.Error) as e:
        dataclasses.replace(get_model("albert-base-v2"), **change)
    _one_line(e)


@pytest.mark.parametrize("call", [
    lambda t: t.summary("bogus"), lambda t: t.summary(5), lambda t: t.top(-1),
    lambda t: t.top("5"), lambda t: t.top(5, by=["flops"]), lambda t: t.export(5),
])
def test_op_table_methods_check_their_arguments(call) -> None:
    with pytest.raises(bertscope.Error) as e:
        call(bertscope.ops("bert-tiny"))
    _one_line(e)


def test_a_column_name_is_one_grouping_key() -> None:
    t = bertscope.ops("bert-tiny")
    assert t.summary("phase").equals(t.summary(["phase"]))
    assert len(t.summary("phase")) == len(set(t.columns["phase"]))


def test_sweep_ranking_checks_its_arguments() -> None:
    r = bertscope.sweep("bert-tiny", batch=[2, 4, 8])
    assert len(r.ranked("tokens_per_s", 2)) == 2
    for sort, top in (("tokens_per_s", -1), ("tokens_per_s", "2"), (["tokens_per_s"], 2),
                      ("speed", 2)):
        with pytest.raises(bertscope.Error):
            r.ranked(sort, top)
