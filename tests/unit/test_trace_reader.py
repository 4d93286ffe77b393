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


def test_events_at_a_chunk_end_are_read_on_not_retried(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # an event cut by the buffer's end used to be decoded after a JSONDecodeError (which
    # counts the lines of the whole buffer); the reader now reads on first: no error at all
    # on a trace of many chunks, and the columns are those of a one-chunk read
    events = [{"ph": "X", "cat": "cpu_op", "name": f"aten::op{i % 7}", "pid": 1, "tid": 1,
               "ts": float(i), "dur": 0.5, "args": {"Sequence number": i}}
              for i in range(4000)]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}, indent=1))
    chunk = 1 << 14  # ~40 chunks; events end anywhere in them
    assert path.stat().st_size > 30 * chunk
    errors = []
    init = json.JSONDecodeError.__init__

    def counted(self: json.JSONDecodeError, *args: object) -> None:
        errors.append(args[0])
        init(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(json.JSONDecodeError, "__init__", counted)
    small = read_events(path, chunk=chunk)
    assert errors == []
    monkeypatch.undo()
    whole = read_events(path, chunk=1 << 24)
    assert len(small) == len(whole) == 4000
    for col in ("name", "ts", "seq"):
        assert np.array_equal(getattr(small, col), getattr(whole, col)), col


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


# --- the GEMM op registry (gemm_ops.py): one table for the reader and the attribution ------

# (op, recorded input shapes, (m, n, k, batch)) derived by hand; one row per registered op
GEMM_CASES = [
    # aten::mm (32,64) x (64,256): m 32, n 256, k 64
    ("aten::mm", [[32, 64], [64, 256]], (32, 256, 64, 1)),
    # aten::addmm bias (256), (32,64) x (64,256), scalars beta/alpha dropped: m 32, n 256, k 64
    ("aten::addmm", [[256], [32, 64], [64, 256], [], []], (32, 256, 64, 1)),
    # aten::_addmm_activation bias (768), (128,3072) x (3072,768): m 128, n 768, k 3072
    ("aten::_addmm_activation", [[768], [128, 3072], [3072, 768]], (128, 768, 3072, 1)),
    # aten::linear X (2,16,64), W (256,64), b (256): rows 2*16 = 32, n 256, k 64
    ("aten::linear", [[2, 16, 64], [256, 64], [256]], (32, 256, 64, 1)),
    # aten::bmm (8,128,64) x (8,64,128): batch 8, m 128, n 128, k 64
    ("aten::bmm", [[8, 128, 64], [8, 64, 128]], (128, 128, 64, 8)),
    # aten::baddbmm input (8,128,128), (8,128,64) x (8,64,128): batch 8, m 128, n 128, k 64
    ("aten::baddbmm", [[8, 128, 128], [8, 128, 64], [8, 64, 128], [], []], (128, 128, 64, 8)),
    # aten::matmul (2,4,16,8) x (2,4,8,16): batch 2*4 = 8, m 16, n 16, k 8
    ("aten::matmul", [[2, 4, 16, 8], [2, 4, 8, 16]], (16, 16, 8, 8)),
]


@pytest.mark.parametrize(("name", "shapes", "want"), GEMM_CASES, ids=[c[0] for c in GEMM_CASES])
def test_registry_shapes_by_hand(name: str, shapes: list, want: tuple) -> None:
    from bertscope.trace.gemm_ops import GEMM_OPS, gemm_shape

    assert GEMM_OPS[name]([s for s in shapes if s]) == want
    assert gemm_shape(name, shapes) == want
    # any namespace with the same op name (the reader has always matched "::mm" suffixes)
    assert gemm_shape("myops::" + name.partition("::")[2], shapes) == want


def test_every_registered_op_has_a_case() -> None:
    from bertscope.trace.gemm_ops import GEMM_OPS

    assert sorted(GEMM_OPS) == sorted(c[0] for c in GEMM_CASES)


def test_registry_edges() -> None:
    from bertscope.trace.gemm_ops import NO_GEMM, gemm_op, gemm_shape, has_gemm_shape

    # aten::matmul of 2-D (5,3) x (3,7): a plain GEMM; of 1-D (3) x (3,7): one row
    assert gemm_shape("aten::matmul", [[5, 3], [3, 7]]) == (5, 7, 3, 1)
    assert gemm_shape("aten::matmul", [[3], [3, 7]]) == (1, 7, 3, 1)
    # aten::matmul (4,16,8) x (8,16): batched over A's leading dimension 4
    assert gemm_shape("aten::matmul", [[4, 16, 8], [8, 16]]) == (16, 16, 8, 4)
    for name in ("aten::addmm_", "aten::add", "mm", "aten::mmx", "aten::_scaled_mm"):
        assert not has_gemm_shape(name), name
        assert gemm_shape(name, [[2, 3], [3, 4]]) == NO_GEMM
    assert gemm_shape("aten::mm", [[2, 3]]) == NO_GEMM  # an operand missing
    assert gemm_shape("aten::bmm", [[2, 3], "x"]) == NO_GEMM  # unreadable shapes
    with pytest.raises(ValueError, match="twice"):
        gemm_op("aten::mm")(lambda s: (1, 1, 1, 1))


def test_reader_and_attribution_share_the_registry() -> None:
    import inspect

    from bertscope.trace import attribute, gemm_ops, reader

    assert attribute.gemm_shape is gemm_ops.gemm_shape
    assert reader.gemm_like is gemm_ops.has_gemm_shape
    assert inspect.signature(read_events).parameters["keep_dims"].default \
        is gemm_ops.has_gemm_shape
    ev = read_events(CUDA)
    kept = {ev.names[ev.name[i]] for i in ev.dims}
    cpu_names = {ev.names[n] for n in ev.name[ev.kind == Kind.CPU_OP]}
    assert kept == {n for n in cpu_names if gemm_ops.has_gemm_shape(n)} <= set(gemm_ops.GEMM_OPS)
    assert kept  # the fixture has GEMM ops


# --- one decoder: odd spellings are rewritten into the plain form, not decoded twice ------


def test_odd_events_read_as_their_plain_form(tmp_path: Path) -> None:
    plain = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 2, "ts": 10.0,
         "dur": 6.0, "args": {"Sequence number": 5, "Input Dims": [[4, 8], [8, 16]]}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 2,
         "ts": 11.0, "dur": 1.0, "args": {"correlation": 3}},
        {"ph": "X", "cat": "kernel", "name": "ampere_sgemm_128x64_tn", "pid": 0, "tid": 9,
         "ts": 12.0, "dur": 4.0, "args": {"device": 0, "stream": 7, "correlation": 3}},
        {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 3, "pid": 1, "tid": 2, "ts": 11.0},
        {"ph": "X", "cat": "user_annotation", "name": "7", "pid": 1, "tid": 2, "ts": 9.0,
         "dur": 20.0},
    ]
    odd = [  # the same events: B/E pair, strings for numbers, floats for ids, other case
        {"ph": "B", "cat": "CPU_OP", "name": "aten::mm", "pid": 1, "tid": 2, "ts": "10",
         "args": {"Sequence number": 5.0, "Input Dims": [[4, 8], [8, 16]]}},
        {"ph": "E", "pid": 1, "tid": 2, "ts": 16},
        {"ph": "X", "cat": "CUDA_Runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 2,
         "ts": 11, "dur": "1", "args": {"correlation": "3"}},
        {"ph": "X", "cat": "Kernel", "name": "ampere_sgemm_128x64_tn", "pid": 0, "tid": 9,
         "ts": 12, "dur": 4, "args": {"device": 0, "stream": 7, "correlation": 3.0}},
        {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": "3", "pid": 1, "tid": 2, "ts": "11"},
        {"ph": "X", "cat": "user_annotation", "name": 7, "pid": 1, "tid": 2, "ts": 9,
         "dur": 20, "args": "none"},
    ]
    a, b = tmp_path / "plain.json", tmp_path / "odd.json"
    a.write_text(json.dumps({"traceEvents": plain}))
    b.write_text(json.dumps({"traceEvents": odd}))
    x, y = read_events(a), read_events(b)  # (the B/E pair is complete at its E: in place)
    for col in ("kind", "name", "pid", "tid", "ts", "dur", "corr", "seq", "numel"):
        got, want = getattr(y, col), getattr(x, col)
        assert np.array_equal(got, want) and got.dtype == want.dtype, col
    assert x.names == y.names and x.ids == y.ids
    assert x.dims == y.dims == {0: [[4, 8], [8, 16]]}
    for f, g in zip(x.flows, y.flows, strict=True):
        assert np.array_equal(f, g) and f.dtype == g.dtype


def test_events_columns_are_the_declared_ones() -> None:
    import dataclasses

    from bertscope.trace.events import COLUMNS, FLOW_COLUMNS, Events

    ev = read_events(CUDA)
    fields = [f.name for f in dataclasses.fields(Events)]
    assert [f for f in fields if f in COLUMNS] == list(COLUMNS)
    for col, (_, dtype) in COLUMNS.items():
        assert getattr(ev, col).dtype == dtype, col
    assert [a.dtype for a in ev.flows] == [np.dtype(d) for _, d in FLOW_COLUMNS]


_FRAMES = [  # python_function events: stack frames (dropped) and a module call (kept)
    '{"ph": "X", "cat": "python_function", "name": "a.py(1): f", "pid": 1, "tid": 1, '
    '"ts": 1.5, "dur": 2.0, "args": {"Python parent id": 0, "Python id": 1}}',
    '{\n "ph": "X", "cat": "python_function", "name": "b.py(2): g",\n "ts": 3e1, "dur": 0\n ,\n'
    ' "args": {}\n}',
    '{"ph": "X", "cat": "python_function", "name": "c\\u002epy(3): h", "ts": 4, "dur": 1, '
    '"args": {}}',  # an escaped name: a frame too, dropped
    '{"ph": "X", "cat": "python_function", "name": "nn.Module: Linear_0", "pid": 1, "tid": 1, '
    '"ts": 5.0, "dur": 1.0, "args": {"Python id": 2}}',  # a module call: kept
    '{"ph": "X", "cat": "python_function", "name": "d.py(4): k", "ts": 6, "dur": 1, '
    '"args": {"x": [1]}, "cat": "cpu_op"}',  # the last "cat" wins: a CPU op, kept
]
_OP = ('{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10.0, '
       '"dur": 1.0, "args": {}}')


@pytest.mark.parametrize("chunk", [16, 1 << 20])
def test_stack_frames_dropped_module_calls_kept(tmp_path: Path, chunk: int) -> None:
    # 5 python_function events + 1 CPU op; kept (by hand): the module call, the event whose
    # repeated "cat" makes it a CPU op (json keeps the last value), the CPU op = 3
    p = tmp_path / "t.json"
    p.write_text('{"traceEvents": [' + ",\n".join([*_FRAMES, _OP]) + "]}")
    ev = read_events(p, chunk=chunk)
    assert [ev.names[i] for i in ev.name] == ["nn.Module: Linear_0", "d.py(4): k", "aten::mm"]
    assert ev.kind.tolist() == [Kind.MODULE, Kind.CPU_OP, Kind.CPU_OP]
    assert ev.ts.tolist() == [5.0, 6.0, 10.0]


@pytest.mark.parametrize("bad", ['"dur": 1.2.3', '"dur": 01', '"dur": -', '"dur": 1,,'])
def test_a_malformed_stack_frame_is_still_refused(tmp_path: Path, bad: str) -> None:
    p = tmp_path / "t.json"
    p.write_text('{"traceEvents": [' + _FRAMES[0].replace('"dur": 2.0', bad) + ", " + _OP + "]}")
    with pytest.raises(BertscopeError, match="not valid JSON"):
        read_events(p)
