"""The streaming trace reader: columns equal to a whole-file parse at any chunk size, both
JSON forms, gzip or not, and one-line errors for bad files."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import numpy as np
import pytest

from bertscope.errors import BertscopeError
from bertscope.trace.reader import (
    Kind,
    rank_from_name,
    read_events,
    read_rank,
    trace_files,
)

DATA = Path(__file__).parents[1] / "data" / "traces"
CUDA = DATA / "cuda_bert_train.json.gz"


def _doc(path: Path) -> dict:
    with gzip.open(path, "rt") as f:
        return json.load(f)


def test_columns_match_a_whole_file_parse() -> None:
    doc = _doc(CUDA)
    ev = read_events(CUDA)
    kept = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") in (
        "cpu_op", "user_annotation", "cuda_runtime", "kernel", "gpu_memcpy", "gpu_memset")]
    flows = [e for e in doc["traceEvents"] if e.get("cat") == "ac2g"]
    assert len(ev) == len(kept)
    assert [ev.names[i] for i in ev.name] == [e["name"] for e in kept]
    assert np.array_equal(ev.ts, [e["ts"] for e in kept])
    assert np.array_equal(ev.dur, [e["dur"] for e in kept])
    starts = [(e["ts"], e["id"]) for e in flows if e["ph"] == "s"]
    assert list(zip(ev.flows[0].tolist(), ev.flows[1].tolist(), strict=True)) == starts
    assert len(ev.flows[2]) == len(starts)
    kernels = [e for e in kept if e["cat"] == "kernel"]
    got = ev.corr[ev.kind == Kind.KERNEL]
    assert got.tolist() == [e["args"]["correlation"] for e in kernels]
    # device events sit on (device, stream) from args; CPU events on (pid, tid)
    assert {ev.ids[t] for t in ev.tid[ev.kind == Kind.KERNEL]} == {7, 20}
    assert ev.header["distributedInfo"]["rank"] == 0 and ev.rank == 0
    assert "traceEvents" not in ev.header


@pytest.mark.parametrize("chunk", [7, 64, 1000])
def test_any_chunk_size_reads_the_same(tmp_path: Path, chunk: int) -> None:
    plain = tmp_path / "t.json"
    plain.write_text(gzip.decompress(CUDA.read_bytes()).decode())
    a, b = read_events(CUDA), read_events(plain, chunk=chunk)
    for col in ("kind", "name", "pid", "tid", "ts", "dur", "corr", "seq", "numel"):
        assert np.array_equal(getattr(a, col), getattr(b, col)), col
    for x, y in zip(a.flows, b.flows, strict=True):
        assert np.array_equal(x, y)
    assert a.names == b.names and a.dims == b.dims and a.header == b.header


def test_input_shapes_are_kept_for_gemm_ops_only() -> None:
    ev = read_events(CUDA)
    kept = {ev.names[ev.name[i]] for i in ev.dims}
    assert kept <= {"aten::linear", "aten::addmm", "aten::mm", "aten::bmm", "aten::matmul"}
    ln = ev.names.index("aten::native_layer_norm")
    # 1 x 8 x 64 = 512 elements, from [[1, 8, 64]]
    assert set(ev.numel[(ev.name == ln) & (ev.kind == Kind.CPU_OP)].tolist()) == {512}


def test_bare_array_and_begin_end_pairs(tmp_path: Path) -> None:
    f = tmp_path / "chrome.json"
    f.write_text(json.dumps([
        {"ph": "B", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 2, "ts": 10},
        {"ph": "E", "pid": 1, "tid": 2, "ts": 25.5},
        {"ph": "X", "cat": "Kernel", "name": "ampere_sgemm_128x64_tn", "pid": 0, "tid": 7,
         "ts": 12, "dur": 5, "args": {"correlation": 3}},
        {"ph": "C", "name": "memory", "pid": 1, "ts": 0, "args": {"bytes": 1}},
    ]))
    ev = read_events(f)
    assert [ev.names[i] for i in ev.name] == ["aten::mm", "ampere_sgemm_128x64_tn"]
    assert ev.dur.tolist() == [15.5, 5.0]
    assert ev.kind.tolist() == [Kind.CPU_OP, Kind.KERNEL]


def test_header_only_and_ranks(tmp_path: Path) -> None:
    assert read_rank(CUDA) == 0
    assert read_rank(DATA / "multirank" / "rank1.pt.trace.json.gz") is None
    assert rank_from_name(Path("rank1.pt.trace.json.gz")) == 1
    assert rank_from_name(Path("host_worker3.1700.pt.trace.json")) == 3
    assert rank_from_name(Path("trace.json")) is None
    assert [f.name for f in trace_files(DATA / "multirank")] == [
        "rank1.pt.trace.json.gz", "trace_a.json.gz"]


def _bad(tmp_path: Path, name: str, data: bytes) -> Path:
    f = tmp_path / name
    f.write_bytes(data)
    return f


_EVENTS = json.dumps({"traceEvents": [
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1, "dur": 2},
    {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 4, "dur": 2},
]}).encode()


@pytest.mark.parametrize(("name", "data", "needle"), [
    ("empty.json", b"", "empty file"),
    ("blank.json", b"  \n\n ", "empty file"),
    ("binary.json", b"\x00\x01\x02PK", "not JSON"),
    ("text.json", b"hello world", "not JSON"),
    ("cut.json", _EVENTS[:-40], "truncated"),
    ("cut_top.json", b'{"schemaVersion": 1, "traceEvents": [', "truncated"),
    ("cut_key.json", b'{"schemaVersion": 1, "trace', "truncated"),
    ("cut.json.gz", gzip.compress(_EVENTS)[:-12], "truncated or corrupt gzip"),
    ("broken.json", _EVENTS.replace(b'"dur": 2}', b'"dur": 2,,}', 1), "not valid JSON"),
    ("schema.json", b'{"foo": 1, "bar": [1, 2]}', "no traceEvents array (top-level keys: bar"),
    ("schema2.json", b'{"traceEvents": {"a": 1}}', "traceEvents is not an array"),
    ("schema3.json", b'{"traceEvents": [1, 2, 3]}', "not event objects"),
    ("schema4.json", b'[{"ph": "X", "cat": "cpu_op", "name": "a", "ts": "soon"}]',
     "non-numeric time"),
    ("none.json", b'{"traceEvents": []}', "the trace has no events"),
    ("meta.json", b'{"traceEvents": [{"ph": "M", "name": "process_name", "pid": 1}]}',
     "none of them CPU ops"),
])
def test_bad_files_give_one_line_errors(tmp_path: Path, name: str, data: bytes,
                                        needle: str) -> None:
    f = _bad(tmp_path, name, data)
    with pytest.raises(BertscopeError, match=re.escape(needle)) as e:
        read_events(f)
    msg = str(e.value)
    assert msg.startswith(f"{f}: ") and "\n" not in msg


def test_missing_paths(tmp_path: Path) -> None:
    with pytest.raises(BertscopeError, match="no such trace file"):
        read_events(tmp_path / "nope.json")
    with pytest.raises(BertscopeError, match=re.escape("no .json or .json.gz trace files")):
        trace_files(tmp_path)
    with pytest.raises(BertscopeError, match="no such trace file or folder"):
        trace_files(tmp_path / "nope")


def test_a_long_string_across_many_chunks(tmp_path: Path) -> None:
    name = "void at::native::elementwise_kernel<" + "x" * 5000 + ">"
    f = tmp_path / "long.json"
    f.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": 1, "dur": 2}]}))
    ev = read_events(f, chunk=16)
    assert ev.names == [name]


def test_fixtures_are_what_the_generator_writes(tmp_path: Path) -> None:
    from tests.data.traces import make_traces

    make_traces.main(tmp_path)
    for name in make_traces.FIXTURES:
        assert (tmp_path / name).read_bytes() == (DATA / name).read_bytes(), (
            f"{name}: run tests/data/traces/make_traces.py")
