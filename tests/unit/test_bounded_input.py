"""Bounded parsing (issue #33, item 3): every JSON/TOML reader refuses a document nested deeper
than `MAX_DEPTH` or a number longer than `MAX_NUMBER_CHARS` in one line naming the file and
the limit (never a RecursionError, never a read to the end of a huge number), device figures
beyond float range are one line, and the trace reader attributes ops nested 1,200 deep."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

import bertscope
from bertscope.bounded import MAX_DEPTH, MAX_NUMBER_CHARS, check_value, loads_json, loads_toml
from bertscope.cli import main
from bertscope.errors import BertscopeError, expect, is_positive_number
from bertscope.hardware import load_device
from bertscope.perf import default_profile
from bertscope.trace import analyze_trace
from bertscope.trace import reader as trace_reader
from bertscope.trace.reader import read_events

ROOT = Path(__file__).resolve().parents[2]
DEVICE = ROOT / "src" / "bertscope" / "data" / "devices" / "a100-sxm4-80gb.toml"
DEEP = 100_000
"""The issue's nesting: far beyond what Python's recursive parsers take."""

_BERT = {"model_type": "bert", "hidden_size": 64, "num_hidden_layers": 2,
         "num_attention_heads": 2, "intermediate_size": 128, "vocab_size": 100,
         "max_position_embeddings": 64}
_OP = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 10, "pid": 1, "tid": 1,
       "args": {"correlation": 1}}


def _nested(n: int) -> str:
    """A JSON list nested `n` levels deep (the outer list is level 1)."""
    return "[" * n + "]" * n


def _with(doc_text: str, key: str, value_text: str) -> str:
    """A JSON object's text with one more key whose value is given as text."""
    return doc_text[:-1] + f', "{key}": {value_text}}}'


def _device_toml(key: str, value: str) -> str:
    """The A100 catalog file with the top-level line `key = ...` replaced (not [sources])."""
    lines = DEVICE.read_text().splitlines()
    first = next(i for i, ln in enumerate(lines) if ln.split("=")[0].strip() == key)
    lines[first] = f"{key} = {value}"
    return "\n".join(lines) + "\n"


def _profile_text() -> str:
    return json.dumps(default_profile(load_device("a100")).to_dict())


# -- the reader itself -------------------------------------------------------------------------

@pytest.mark.parametrize("depth, ok", [(MAX_DEPTH, True), (MAX_DEPTH + 1, False), (DEEP, False)])
def test_depth_limit_is_exact_in_json_and_toml(depth: int, ok: bool) -> None:
    # a TOML document is a table: the table is level 1, its value's lists the rest
    for parse, text in ((loads_json, _nested(depth)), (loads_toml, f"a = {_nested(depth - 1)}")):
        if ok:
            parse(text, "f")
        else:
            with pytest.raises(BertscopeError, match=f"^f: nested deeper than {MAX_DEPTH} "):
                parse(text, "f")


def test_depth_of_objects_and_tables_counts_too() -> None:
    deep_objects = '{"a": ' * (MAX_DEPTH + 1) + "1" + "}" * (MAX_DEPTH + 1)
    with pytest.raises(BertscopeError, match="nested deeper"):
        loads_json(deep_objects, "f")
    # TOML's dotted table names build the nesting without any recursion in the parser
    with pytest.raises(BertscopeError, match="nested deeper"):
        loads_toml("[" + ".".join(["t"] * (MAX_DEPTH + 5)) + "]\nx = 1\n", "f")
    assert check_value({"a": [{"b": [1]}]}, "f") == {"a": [{"b": [1]}]}


@pytest.mark.parametrize("number", ["1" * (MAX_NUMBER_CHARS + 1), "0." + "5" * MAX_NUMBER_CHARS,
                                    "-" + "9" * MAX_NUMBER_CHARS, "1" * 5000])
def test_a_number_longer_than_the_limit_is_refused(number: str) -> None:
    with pytest.raises(BertscopeError, match=f"^f: a number longer than {MAX_NUMBER_CHARS} "):
        loads_json(f'{{"x": {number}}}', "f")
    if not number.startswith("-"):  # TOML: floats by the hook, ints by value / Python's limit
        with pytest.raises(BertscopeError, match="a number longer than"):
            loads_toml(f"x = {number}", "f")


def test_a_number_at_the_limit_is_read() -> None:
    hundred = "9" * MAX_NUMBER_CHARS
    assert loads_json(f"[{hundred}]", "f") == [10**MAX_NUMBER_CHARS - 1]
    assert loads_toml(f"x = {hundred}", "f") == {"x": 10**MAX_NUMBER_CHARS - 1}
    assert loads_json("[1e400]", "f") == [float("inf")]  # short: the typed loaders refuse it


def test_expect_and_positive_number_take_ints_beyond_float_range() -> None:
    assert not is_positive_number(10**400)
    with pytest.raises(BertscopeError, match="memory_GB: expected a number"):
        expect({"memory_GB": 10**400}, "memory_GB", float, "dev")


# -- every loader, through the command line ------------------------------------------------------

def _files(d: Path) -> dict[str, str]:
    trace = json.dumps({"traceEvents": [_OP]})
    return {
        "deep_config.json": _with(json.dumps(_BERT), "x", _nested(DEEP)),
        "deep_device.json": _with(json.dumps({"name": "x"}), "x", _nested(DEEP)),
        "deep_device.toml": _device_toml("memory_GB", _nested(DEEP)),
        "long_device.toml": _device_toml("memory_GB", "1" + "0" * 400),
        "range_device.toml": _device_toml("memory_GB", "1e300"),
        "deep_profile.json": _with(_profile_text(), "x", _nested(DEEP)),
        "number_profile.json": _profile_text().replace('"device": {', '"device": 5, "d": {', 1),
        "deep_header.json": trace.replace('{"traceEvents"', '{"x": ' + _nested(DEEP)
                                          + ', "traceEvents"'),
        "deep_args.json": trace.replace('"correlation": 1', '"y": ' + _nested(DEEP)),
        "deep_patterns.toml": "[[pattern]]\nregex = 'x'\ncategory = 'gemm'\nz = "
                              + _nested(DEEP) + "\n",
        "deep_result.json": _with('{"meta": {}}', "rows", _nested(DEEP)),
    }


BAD = {
    "config": (("ops", "{d}/deep_config.json"), "nested deeper than 100"),
    "device-json": (("predict", "bert-tiny", "--device", "{d}/deep_device.json"),
                    "nested deeper than 100"),
    "device-toml": (("predict", "bert-tiny", "--device", "{d}/deep_device.toml"),
                    "nested deeper than 100"),
    "device-10**400": (("predict", "bert-tiny", "--device", "{d}/long_device.toml"),
                       "a number longer than 100"),
    "device-1e300-GB": (("predict", "bert-tiny", "--device", "{d}/range_device.toml"),
                        "beyond float range"),
    "profile-deep": (("predict", "bert-tiny", "--device", "{d}/deep_profile.json"),
                     "nested deeper than 100"),
    "profile-device-number": (("predict", "bert-tiny", "--device", "{d}/number_profile.json"),
                              "device: expected an object, got 5"),
    "trace-header": (("trace", "{d}/deep_header.json"), "nested deeper than 100"),
    "trace-args": (("trace", "{d}/deep_args.json"), "nested deeper than 100"),
    "patterns": (("trace", "{d}/deep_header.json", "--patterns", "{d}/deep_patterns.toml"),
                 "nested deeper than 100"),
    "saved-result": (("calibrate", "--from", "{d}/deep_result.json", "--output", "{d}/p.json"),
                     "nested deeper than 100"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_every_loader_refuses_in_one_line(case: str, tmp_path: Path, capsys) -> None:
    for name, text in _files(tmp_path).items():
        (tmp_path / name).write_text(text)
    before = set(tmp_path.iterdir())
    argv, says = BAD[case]
    rc = main([a.replace("{d}", str(tmp_path)) for a in argv])
    out, err = capsys.readouterr()
    assert rc == 2, (out[-300:], err)
    assert err.startswith("bertscope: error: ") and len(err.strip().splitlines()) == 1, err
    assert says in err and str(tmp_path) in err, err  # the limit and the file
    assert "Traceback" not in out + err
    assert set(tmp_path.iterdir()) == before


def test_read_trace_api_raises_the_one_line_error(tmp_path: Path) -> None:
    p = tmp_path / "t.json"
    p.write_text(_files(tmp_path)["deep_header.json"])
    with pytest.raises(bertscope.BertscopeError, match=r"t\.json: nested deeper than 100"):
        bertscope.read_trace(p)


# -- numbers in traces ---------------------------------------------------------------------------

def test_a_huge_header_number_is_refused_after_one_chunk(tmp_path: Path, monkeypatch) -> None:
    # 4 Mi digits in a gzipped header, read in 64 Ki chunks: reading it through would take 64
    # chunks; it is refused once the first chunk shows it longer than the limit
    p = tmp_path / "t.json.gz"
    with gzip.open(p, "wt", compresslevel=1) as f:
        f.write('{"distributedInfo": {"rank": ')
        for _ in range(64):
            f.write("1" * (1 << 16))
        f.write("}, " + json.dumps({"traceEvents": [_OP]})[1:])
    reads = []
    more = trace_reader._Stream.more
    monkeypatch.setattr(trace_reader._Stream, "more",
                        lambda self, size=None: reads.append(size) or more(self, size))
    with pytest.raises(BertscopeError, match=r"t\.json\.gz: a number longer than 100"):
        read_events(p, chunk=1 << 16)
    assert len(reads) <= 3


@pytest.mark.parametrize("value, says", [
    ("1" * 5000, "a number longer than 100"),  # beyond Python's own int digit limit
    ("2." + "1" * 5000, "a number longer than 100"),  # a float: refused before conversion
    ("1" * 300, r"beyond 1e\+18 us"),  # an int within Python's limit: the time check
])
def test_a_long_number_in_an_event_is_one_line(value: str, says: str, tmp_path: Path) -> None:
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": [_OP, {**_OP, "ts": 1}]}).replace(
        '"ts": 1,', f'"ts": {value},'))
    with pytest.raises(BertscopeError, match=says):
        read_events(p)


def test_input_dims_nested_too_deep_are_refused(tmp_path: Path) -> None:
    p = tmp_path / "t.json"
    op = {**_OP, "args": {"Input Dims": json.loads(_nested(MAX_DEPTH + 20))}}
    p.write_text(json.dumps({"traceEvents": [op]}))
    with pytest.raises(BertscopeError, match="Input Dims: nested deeper than 100"):
        read_events(p)


# -- deep but legitimate nesting --------------------------------------------------------------

NEST = 1_200


def _nested_trace(cat: str, name: str) -> dict:
    """`NEST` events of `cat` nested inside each other on one thread (event i spans
    [i, 10000 - i] us), an aten::mm inside the innermost launching one 4 us kernel."""
    events = [{"ph": "X", "cat": cat, "name": name.format(i=i), "ts": i, "dur": 10_000 - 2 * i,
               "pid": 1, "tid": 1, "args": {}} for i in range(NEST)]
    events += [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": NEST, "dur": 5, "pid": 1,
         "tid": 1, "args": {"Input Dims": [[4, 8], [8, 16]]}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": NEST + 1,
         "dur": 2, "pid": 1, "tid": 1, "args": {"correlation": 7}},
        {"ph": "X", "cat": "kernel", "name": "sgemm_kernel", "ts": NEST + 3, "dur": 4,
         "pid": 0, "tid": 7, "args": {"stream": 7, "correlation": 7, "device": 0}}]
    return {"traceEvents": events}


@pytest.mark.parametrize("cat, name, sep", [
    ("user_annotation", "block{i}", "/"),
    ("python_function", "nn.Module: Layer_{i}", "/"),
])
def test_scopes_nested_1200_deep_are_attributed(cat: str, name: str, sep: str,
                                                tmp_path: Path) -> None:
    p = tmp_path / "t.json"
    p.write_text(json.dumps(_nested_trace(cat, name)))
    df = analyze_trace(p).table.df
    kernel = df[df["name"] == "sgemm_kernel"]
    assert len(kernel) == 1
    # the kernel's module path is every enclosing scope, outermost first
    path = sep.join(name.format(i=i).removeprefix("nn.Module: ") for i in range(NEST))
    assert kernel["module"].iloc[0] == path
    assert kernel["time_s"].iloc[0] == pytest.approx(4e-6)


def test_cpu_ops_nested_1200_deep_are_one_op(tmp_path: Path) -> None:
    # a CPU-only trace: an op's time includes what it calls, so the outermost op is the row
    doc = _nested_trace("cpu_op", "aten::linear")
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e["cat"] == "cpu_op"]
    p = tmp_path / "t.json"
    p.write_text(json.dumps(doc))
    df = analyze_trace(p).table.df
    assert df["name"].tolist() == ["aten::linear"]
    assert df["time_s"].iloc[0] == pytest.approx(10_000e-6)
    assert df["count"].iloc[0] == 1
