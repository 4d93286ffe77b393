"""A corpus of bad inputs, at least one per mechanism of issue #11 (A output paths, B markup,
C types, D huge numbers, E unbounded work, F bad values) on each command that reads that kind
of input (G signals and H stray output: tests/integration/test_profile.py). Every bad case
must: exit 2, print exactly one line on stderr, no traceback, leave no file behind, and leave
a pre-existing output file as it was. Markup cases (B) must succeed and print the string as
written."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from bertscope.analytic import build
from bertscope.cli import main
from bertscope.config import RunConfig
from bertscope.hardware import load_device
from bertscope.perf import default_profile
from bertscope.presets import get_model

ROOT = Path(__file__).resolve().parents[2]
DEVICE = ROOT / "src" / "bertscope" / "data" / "devices" / "a100-sxm4-80gb.toml"
TRACE = ROOT / "tests" / "data" / "traces" / "cuda_bert_train.json.gz"
KEEP = "old contents\n"

_BERT = {"model_type": "bert", "hidden_size": 64, "num_hidden_layers": 2,
         "num_attention_heads": 2, "intermediate_size": 128, "vocab_size": 100,
         "max_position_embeddings": 64}


def _device(**changes: str) -> str:
    """The A100 catalog file with some `key = value` lines replaced."""
    lines = DEVICE.read_text().splitlines()
    for key, value in changes.items():
        lines = [f"{key} = {value}" if ln.split("=")[0].strip() == key else ln for ln in lines]
    return "\n".join(lines) + "\n"


def _trace(*events: dict) -> str:
    return json.dumps({"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 10, "pid": 1,
         "tid": 1, "args": {"correlation": 1}}, *events]})


def _kernel(**kw: object) -> dict:
    e = {"ph": "X", "cat": "kernel", "name": "k", "ts": 2, "dur": 5, "pid": 0, "tid": 7,
         "args": {"stream": 7, "correlation": 1, "device": 0}}
    e.update(kw)
    return e


def _profile(part: str, **changes: object) -> str:
    """The A100's default device profile JSON with one efficiency model's fields changed."""
    doc = default_profile(load_device("a100")).to_dict()
    doc[part] = {**doc[part], **changes}
    return json.dumps(doc)


def _result(meta: dict | None = None, row: dict | None = None) -> str:
    """A saved profile result (the shape `profile --output` writes) of bert-tiny, every row
    taking 10 us, with some meta fields and the first row's fields changed."""
    t = build(get_model("bert-tiny"), RunConfig(batch=1, seq=8))
    rows = json.loads(t.df.assign(time_s=1e-5).to_json(orient="records"))
    rows[0].update(row or {})
    doc = {"meta": {**t.export_meta(), "iteration_s": 0.01, "iteration_times_s": [0.01],
                    **(meta or {})}, "rows": rows}
    return json.dumps(doc).replace("Infinity", "1e400")


# name -> file content (str); written into the test's folder before each case
FILES: dict[str, str] = {
    "list_type.json": json.dumps({**_BERT, "model_type": ["bert"]}),
    "pad_str.json": json.dumps({**_BERT, "model_type": "roberta", "pad_token_id": "1"}),
    "pad_range.json": json.dumps({**_BERT, "model_type": "roberta", "pad_token_id": 100}),
    "emb_bool.json": json.dumps({**_BERT, "model_type": "albert", "embedding_size": True}),
    "decoder.json": json.dumps({**_BERT, "is_decoder": True}),
    "layers.json": json.dumps({**_BERT, "num_hidden_layers": 10**6}),
    "markup.json": json.dumps({**_BERT, "_name_or_path": "[/x]"}),
    "mem_str.toml": _device(memory_GB='"80"'),
    "mem_huge.toml": _device(memory_GB="1e400"),
    "peak_list.toml": _device(fp32="[1]"),
    "markup.toml": _device(name='"[/x]"', sku='"[/y] sku"'),
    "model_list.json": _profile("gemm", model=["GemmEfficiency"]),
    "per_phase_list.json": _profile("gemm", per_phase=[1, 2]),
    "per_category_list.json": _profile("bandwidth", model="CategoryBandwidthEfficiency",
                                       per_category=[1]),
    "regex_int.toml": '[[pattern]]\nregex = 5\ncategory = "gemm"\n',
    "stream_list.json": _trace(_kernel(args={"stream": [7], "correlation": 1, "device": 0})),
    "ts_huge.json": _trace(_kernel(ts=1e300)),
    "dur_negative.json": _trace(_kernel(dur=-105)),
    "corr_huge.json": _trace(_kernel(args={"stream": 7, "correlation": 2**70, "device": 0})),
    "markup_trace.json": _trace(_kernel(name="[/x] kernel")),
    "dims_huge.json": _trace(_kernel()).replace('"correlation": 1}', '"correlation": 1, '
                                                '"Input Dims": [[1e10, 1e10], [1e10, 1e10]]}',
                                                1),
    "iter_huge.json": _result(meta={"iteration_s": float("inf")}),
    "time_negative.json": _result(row={"time_s": -1.0}),
    "partial.json": _result(meta={"partial": True, "iters": 1}),
    "bad_result.json": json.dumps({"meta": {"model": {"name": "x"}}, "rows": [
        {"name": "a", "layer": 0, "sublayer": "qkv", "category": "gemm", "phase": "forward",
         "time_s": "fast"}]}),
    # parse helper (#33): nesting and number limits
    "deep_config.json": json.dumps(_BERT)[:-1] + ', "x": ' + "[" * 100_000 + "]" * 100_000 + "}",
    "deep_header.json": _trace().replace('{"traceEvents"', '{"x": ' + "[" * 100_000
                                         + "]" * 100_000 + ', "traceEvents"', 1),
    "long_device.toml": _device(memory_GB="1" + "0" * 400),
}
TINY = ("bert-tiny", "--seq", "16")
DIST = ("distributed", "bert-tiny", "--seq", "16", "--devices", "2", "--global-batch", "4")
PRED = ("predict", *TINY)

BAD: dict[str, tuple[str, ...]] = {
    # A. output paths: an existing folder, a place where no file can be made
    "A-ops-folder": ("ops", *TINY, "--output", "{d}/folder.csv"),
    "A-ops-proc": ("ops", *TINY, "--output", "/proc/x.csv"),
    "A-predict-folder": (*PRED, "--device", "a100", "--output", "{d}/folder.csv"),
    "A-predict-plot-folder": (*PRED, "--device", "a100", "--plot", "{d}/folder.png"),
    "A-predict-timeline-folder": (*PRED, "--device", "a100", "--timeline", "{d}/folder.json"),
    "A-predict-timeline-proc": (*PRED, "--device", "a100", "--timeline", "/proc/t.json"),
    "A-distributed-folder": (*DIST, "--device", "a100", "--search", "--output",
                             "{d}/folder.csv"),
    "A-distributed-timeline-folder": (*DIST, "--device", "a100", "--timeline",
                                      "{d}/folder.json"),
    "A-distributed-timeline-proc": (*DIST, "--device", "a100", "--timeline", "/proc/t.json"),
    "A-distributed-timeline-suffix": (*DIST, "--device", "a100", "--timeline",
                                      "{d}/t.csv"),
    "A-trace-folder": ("trace", str(TRACE), "--output", "{d}/folder"),
    "A-profile-folder": ("profile", *TINY, "--output", "{d}/folder.json"),
    "A-profile-trace-folder": ("profile", *TINY, "--trace-out", "{d}/folder"),
    "A-calibrate-proc": ("calibrate", "--output", "/proc/x.json"),
    "A-validate-folder": ("validate", "--output", "{d}/folder"),
    "A-validate-results-proc": ("validate", "--results", "/proc/x"),
    "A-sweep-folder": ("sweep", "bert-tiny", "--output", "{d}/folder.csv"),
    "A-study-existing-file": ("study", "--output", "{d}/keep.csv", "--no-measure"),
    "A-study-proc": ("study", "--output", "/proc/study", "--no-measure"),
    "A-sweep-suffix": ("sweep", "bert-tiny", "--output", "{d}/out.xlsx"),
    "A-sweep-format-suffix": ("sweep", "bert-tiny", "--format", "jsonl", "--output",
                              "{d}/out.parquet"),
    "A-sweep-csv-stdout": ("sweep", "bert-tiny", "--format", "csv"),
    "A-trace-format-suffix": ("trace", str(TRACE), "--format", "csv", "--output",
                              "{d}/out.txt"),
    "A-ops-parquet-stdout": ("ops", *TINY, "--format", "parquet"),
    # C. loaders that check types
    "C-ops-model-type-list": ("ops", "{d}/list_type.json"),
    "C-ops-pad-string": ("ops", "{d}/pad_str.json", "--output", "{d}/keep.csv"),
    "C-profile-pad-string": ("profile", "{d}/pad_str.json", "--seq", "16"),
    "C-predict-memory-string": (*PRED, "--device", "{d}/mem_str.toml"),
    "C-predict-model-list": (*PRED, "--device", "{d}/model_list.json"),
    "C-predict-per-phase-list": (*PRED, "--device", "{d}/per_phase_list.json", "--output",
                                 "{d}/keep.csv"),
    "C-distributed-per-category-list": (*DIST, "--device", "{d}/per_category_list.json"),
    "C-distributed-peak-list": (*DIST, "--device", "{d}/peak_list.toml"),
    "C-trace-regex-int": ("trace", str(TRACE), "--patterns", "{d}/regex_int.toml"),
    "C-trace-stream-list": ("trace", "{d}/stream_list.json", "--output", "{d}/keep.csv"),
    "C-calibrate-time-string": ("calibrate", "--from", "{d}/bad_result.json", "--output",
                                "{d}/keep.json"),
    "C-validate-batch-text": ("validate", "--validate", "bert-tiny:x:16"),
    "C-sweep-batch-text": ("sweep", "bert-tiny", "--batch", "8,x"),
    "C-study-device-file": ("study", "--output", "{d}/s", "--device", "{d}/mem_str.toml",
                            "--no-measure"),
    "C-study-model-file": ("study", "--output", "{d}/s", "--models", "{d}/list_type.json",
                           "--no-measure"),
    "C-sweep-knob-text": ("sweep", "bert-tiny", "--bandwidth", "fast"),
    "C-sweep-device-file": ("sweep", "bert-tiny", "--device", "{d}/mem_str.toml"),
    "C-sweep-model-file": ("sweep", "{d}/list_type.json", "--output", "{d}/keep.csv"),
    # D. huge numbers
    "D-predict-memory-inf": (*PRED, "--device", "{d}/mem_huge.toml"),
    "D-ops-batch": ("ops", "bert-tiny", "--batch", str(10**20)),
    "D-distributed-global-batch": (*DIST[:-1], str(10**15), "--device", "a100"),
    "D-trace-ts": ("trace", "{d}/ts_huge.json"),
    "D-trace-correlation": ("trace", "{d}/corr_huge.json"),
    "D-trace-input-dims": ("trace", "{d}/dims_huge.json", "--output", "{d}/keep.csv"),
    "D-profile-batch": ("profile", "bert-tiny", "--batch", str(10**20)),
    "D-calibrate-iteration-inf": ("calibrate", "--from", "{d}/iter_huge.json"),
    "D-validate-batch": ("validate", "--validate", f"bert-tiny:{10**20}:16"),
    "D-sweep-batch": ("sweep", "bert-tiny", "--batch", str(10**20)),
    "D-sweep-knob-inf": ("sweep", "bert-tiny", "--gemm-peak", "1e400"),
    # E. unbounded work and reads
    "E-ops-dev-zero": ("ops", "/dev/zero"),
    "E-trace-patterns-dev-zero": ("trace", str(TRACE), "--patterns", "/dev/zero"),
    "E-ops-million-layers": ("ops", "{d}/layers.json"),
    "E-predict-million-layers": ("predict", "{d}/layers.json", "--device", "a100"),
    "E-profile-dev-zero": ("profile", "/dev/zero"),
    "E-calibrate-dev-zero": ("calibrate", "--from", "/dev/zero"),
    "E-sweep-grid-too-large": ("sweep", "bert-tiny", "--batch", "1..100000", "--seq",
                               "1..100", "--output", "{d}/keep.csv"),
    "E-sweep-range-too-long": ("sweep", "bert-tiny", "--batch", "1..100000000000"),
    "E-sweep-dev-zero": ("sweep", "/dev/zero"),
    "E-study-dev-zero": ("study", "--output", "{d}/s", "--models", "/dev/zero", "--no-measure"),
    "E-study-trace-dev-zero": ("study", "--output", "{d}/s", "--from-trace", "/dev/zero"),
    "E-distributed-million-layers": (*DIST[:1], "{d}/layers.json", *DIST[2:], "--device",
                                     "a100"),
    # F. bad values accepted silently before
    "F-ops-embedding-true": ("ops", "{d}/emb_bool.json"),
    "F-ops-pad-range": ("ops", "{d}/pad_range.json"),
    "F-ops-decoder": ("ops", "{d}/decoder.json", "--output", "{d}/keep.csv"),
    "F-ops-top": ("ops", *TINY, "--top", "-1"),
    "F-profile-selective": ("profile", *TINY, "--checkpoint", "selective"),
    "F-profile-fusion": ("profile", *TINY, "--fusion"),
    "F-predict-checkpoint-word": (*PRED, "--device", "a100", "--checkpoint", "some"),
    "F-distributed-micro-batches": (*DIST, "--device", "a100", "--micro-batches", "0"),
    "F-trace-rank": ("trace", str(TRACE), "--rank", "-1"),
    "F-trace-dur": ("trace", "{d}/dur_negative.json"),
    "F-trace-scheduler-blank": ("trace", str(TRACE), "--scheduler", " ", "--output",
                                "{d}/keep.csv"),
    "F-sweep-scheduler-space": ("sweep", "bert-tiny", "--scheduler", "tcp://a b:8786",
                                "--output", "{d}/keep.csv"),
    "F-profile-top": ("profile", *TINY, "--top", "-3"),
    "F-ops-xlnet-no-target": ("ops", "xlnet-base", "--seq", "5"),  # seq // 6 = 0 predicted
    "F-profile-xlnet-sdpa": ("profile", "xlnet-base", "--seq", "12", "--attention", "sdpa"),
    "F-profile-nproc": ("profile", *TINY, "--nproc", str(64 * (os.cpu_count() or 1))),
    "F-validate-held-out-first": ("validate", "--validate", "bert-nope:1:16"),
    "F-validate-seq-beyond-positions": ("validate", "--validate", "bert-tiny:2:100000"),
    "F-validate-rounds": ("validate", "--rounds", "0"),
    "F-sweep-empty-range": ("sweep", "bert-tiny", "--batch", "5..1"),
    "F-study-precision": ("study", "--output", "{d}/s", "--precision", "fp64", "--no-measure"),
    "F-study-empty-devices": ("study", "--output", "{d}/s", "--device", "a100,,h100",
                              "--no-measure"),
    "F-study-unknown-device": ("study", "--output", "{d}/s", "--device", "nope",
                               "--no-measure"),
    "F-sweep-empty-list": ("sweep", "bert-tiny", "--seq", "16,,32"),
    "F-sweep-knob-zero": ("sweep", "bert-tiny", "--overhead", "0"),
    "F-sweep-knob-negative": ("sweep", "bert-tiny", "--memory", "-2"),
    "F-sweep-unknown-device": ("sweep", "bert-tiny", "--device", "a100,nope"),
    "F-sweep-sort": ("sweep", "bert-tiny", "--sort", "speed", "--output", "{d}/keep.csv"),
    "F-sweep-checkpoint-word": ("sweep", "bert-tiny", "--checkpoint", "some"),
    "F-sweep-dropout-word": ("sweep", "bert-tiny", "--dropout", "maybe"),
    "F-calibrate-negative-time": ("calibrate", "--from", "{d}/time_negative.json", "--output",
                                  "{d}/keep.json"),
    # a partial result (a stopped measurement) is never taken as complete
    "F-calibrate-partial-result": ("calibrate", "--quick", "--from", "{d}/partial.json",
                                   "--output", "{d}/new-profile.json"),
    # api helper (#33): empty results, an option given two values, odd names
    "F-sweep-all-skipped": ("sweep", "bert-tiny", "--seq", "1024", "--output", "{d}/keep.csv"),
    "F-sweep-all-skipped-new-output": ("sweep", "bert-tiny", "--heads", "3", "--output",
                                       "{d}/new.csv"),
    "F-ops-option-twice": ("ops", *TINY, "--batch", "2", "--batch", "4", "--output",
                           "{d}/keep.csv"),
    "F-predict-switch-both-ways": (*PRED, "--device", "a100", "--dropout", "--no-dropout"),
    "F-sweep-axis-twice": ("sweep", "bert-tiny", "--seq", "16", "--seq=32"),
    "F-ops-old-checkpointing": ("ops", *TINY, "--checkpoint", "none", "--checkpointing"),
    "F-ops-model-name-too-long": ("ops", "x" * 100_000),
    # store (issue #33): ids, kinds, names; read-only commands never create a store
    "S-runs-show-long-id": ("runs", "show", "x" * 100_000, "--store", "{d}/missing.sqlite"),
    "S-runs-rm-missing-store": ("runs", "rm", "abcd1234", "--store", "{d}/missing.sqlite"),
    "S-runs-list-missing-store": ("runs", "list", "--kind", "predcit", "--store",
                                  "{d}/sub/missing.sqlite"),
    "S-runs-export-missing-store": ("runs", "export", "abcd1234", "{d}/out.csv", "--store",
                                    "{d}/missing.sqlite"),
    "S-runs-list-folder-store": ("runs", "list", "--store", "{d}/folder"),
    "S-runs-show-bad-id": ("runs", "show", "ab\x1b[2J;drop", "--store", "{d}/missing.sqlite"),
    "S-predict-blank-store": (*PRED, "--device", "a100", "--store", " "),
    "S-predict-store-in-folder-store": (*PRED, "--device", "a100", "--store", "{d}/folder"),
    "S-predict-store-under-file": (*PRED, "--device", "a100", "--store",
                                   "{d}/keep.csv/runs.sqlite"),
    "S-runs-list-store-dev-zero": ("runs", "list", "--store", "/dev/zero"),
    # parse helper (#33): nesting and number limits; outputs that clobber inputs or each other
    "D-ops-deep-config": ("ops", "{d}/deep_config.json", "--output", "{d}/keep.csv"),
    "D-trace-deep-header": ("trace", "{d}/deep_header.json", "--output", "{d}/keep.json"),
    "D-predict-memory-10-400": (*PRED, "--device", "{d}/long_device.toml"),
    "A-trace-output-is-input": ("trace", "{d}/stream_list.json", "--output",
                                "{d}/stream_list.json", "--format", "json"),
    "A-predict-output-is-timeline": (*PRED, "--device", "a100", "--output", "{d}/keep.json",
                                     "--timeline", "{d}/keep.json"),
}


def _setup(d: Path) -> set[str]:
    for name, text in FILES.items():
        (d / name).write_text(text)
    for name in ("folder", "folder.png", "folder.csv", "folder.json"):
        (d / name).mkdir()
    for name in ("keep.csv", "keep.json"):
        (d / name).write_text(KEEP)
    return set(os.listdir(d))


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_is_one_line_exit_2_and_writes_nothing(case: str, tmp_path: Path,
                                                           monkeypatch, capsys) -> None:
    before = _setup(tmp_path)
    monkeypatch.chdir(tmp_path)
    argv = [a.replace("{d}", str(tmp_path)) for a in BAD[case]]
    rc = main(argv)
    out, err = capsys.readouterr()
    assert rc == 2, (case, out[-500:], err)
    assert err.startswith("bertscope: error: "), err
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err + out
    assert set(os.listdir(tmp_path)) == before, case  # nothing left behind
    for name in ("keep.csv", "keep.json"):
        assert (tmp_path / name).read_text() == KEEP
    for name in ("folder", "folder.png", "folder.csv", "folder.json"):
        assert not any((tmp_path / name).iterdir())


MARKUP: dict[str, tuple[tuple[str, ...], str]] = {
    "B-ops-model-name": (("ops", "{d}/markup.json", "--seq", "16"), "[/x]"),
    "B-predict-device-name": ((*PRED, "--device", "{d}/markup.toml"), "[/y] sku"),
    "B-distributed-device-name": ((*DIST, "--device", "{d}/markup.toml"), "[/y] sku"),
    "B-trace-kernel-name": (("trace", "{d}/markup_trace.json"), "[/x] kernel"),
    "B-sweep-model-name": (("sweep", "{d}/markup.json", "--seq", "16"), "[/x]"),
    "B-sweep-device-name": (("sweep", "bert-tiny", "--device", "{d}/markup.toml"), "[/x]"),
    "B-profile-model-name": (("profile", "{d}/markup.json", "--seq", "8", "--batch", "1",
                              "--iters", "1", "--warmup", "0"), "[/x]"),
}


@pytest.mark.parametrize("case", sorted(MARKUP))
def test_input_strings_are_printed_as_written(case: str, tmp_path: Path, monkeypatch,
                                              capsys) -> None:
    _setup(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "200")
    argv, shown = MARKUP[case]
    rc = main([a.replace("{d}", str(tmp_path)) for a in argv])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert shown in out


def test_help_shows_bracketed_text(capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["trace", "--help"]) == 0
    assert "[[pattern]]" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [
    ("ops", *TINY, "--output", "{d}/" + "a" * 100_000 + ".csv"),
    ("ops", "m" * 100_000),
    ("predict", *TINY, "--device", "d" * 100_000),
], ids=["long-output-path", "long-model-name", "long-device-name"])
def test_an_error_line_stays_short_whatever_it_quotes(argv, tmp_path: Path, monkeypatch,
                                                     capsys) -> None:
    # a 100,000-character argument quoted in the message: the one line keeps its start and
    # end (what is wrong, how to fix it) around " ... ", 400 characters at most plus the
    # 18-character "bertscope: error: " prefix and the newline
    monkeypatch.chdir(tmp_path)
    rc = main([a.replace("{d}", str(tmp_path)) for a in argv])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("bertscope: error: ")
    assert len(err.splitlines()) == 1 and len(err) <= 18 + 400 + 1, err[:200]
