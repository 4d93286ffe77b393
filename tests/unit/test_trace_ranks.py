"""Cross-rank analyses (`bertscope.trace.ranks`, `trace --by rank`) on small rank folders
written here, every expected figure worked out by hand from the event times below.

The folder `_write_folder` writes (4 ranks, one GPU each; times in us, as Kineto writes them):

    stream 7 (compute)                          launched by (runtime call, start, dur)
      K1 sgemm    [1000, 1100]                  cudaLaunchKernel   990, 5  -> delay 1000-995  =   5
      K2 sgemm    [1110, 1130]                  cudaLaunchKernel  1090, 5  -> delay 1110-1095 =  15
      K3 sgemm    [1260, 1300]                  cudaLaunchKernel  1200, 5  -> delay 1260-1205 =  55
      K4 sgemm    [1400, 1420]                  cudaLaunchKernel  1250, 5  -> delay 1400-1255 = 145
      memcpy HtoD [1440, 1460]                  cudaMemcpyAsync   1430, 4  -> delay 1440-1434 =   6
    stream 13 (communication)
      AllReduce#0 [1060, 1160]                  cudaLaunchKernel  1040, 5  -> delay 1060-1045 =  15
      AllReduce#1 [1500, 1900] (rank 2: [1800, 1900], 300 us late)
                                                cudaLaunchKernel  1140, 5  -> delay 1500-1145 = 355
                                                                     (rank 2: 1800-1145 = 655)
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from bertscope.cli import trace as cli_trace
from bertscope.errors import BertscopeError
from bertscope.trace import analyze_trace
from bertscope.trace.ranks import MEMORY_POINTS, collective_kind, cross_rank

SGEMM = "ampere_sgemm_128x64_tn"
AR = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
AR_OLD = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"
SENDRECV = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"
H2D = "Memcpy HtoD (Pageable -> Device)"
US = 1e-6


class _Rank:
    """Kineto-style events of one rank: runtime calls on a CPU thread, device events with the
    same correlation id, `[memory]` instants."""

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.events: list[dict[str, Any]] = []
        self.corr = 0

    def launch(self, name: str, rt_ts: float, ts: float, dur: float, *, stream: int = 7,
               cat: str = "kernel", runtime: str = "cudaLaunchKernel", rt_dur: float = 5.0
               ) -> None:
        self.corr += 1
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": runtime, "pid": 1,
                            "tid": 1, "ts": rt_ts, "dur": rt_dur,
                            "args": {"correlation": self.corr}})
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream,
                            "ts": ts, "dur": dur, "args": {"correlation": self.corr,
                                                           "device": 0, "stream": stream}})

    def memory(self, ts: float, device: int, total: int) -> None:
        self.events.append({"ph": "i", "cat": "cpu_instant_event", "name": "[memory]",
                            "pid": 1, "tid": 1, "ts": ts, "s": "t",
                            "args": {"Device Type": 1 if device >= 0 else 0,
                                     "Device Id": device, "Total Allocated": total,
                                     "Bytes": 0, "Addr": 0, "Total Reserved": 0}})

    def write(self, folder: Path) -> None:
        doc = {"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": self.rank,
                                                      "world_size": 4},
               "traceEvents": self.events}
        (folder / f"rank{self.rank}.json").write_text(json.dumps(doc))


def _rank(r: int, *, late: float = 300.0, straggler: int = 2, second: bool = True) -> _Rank:
    t = _Rank(r)
    t.launch(SGEMM, 990, 1000, 100)
    t.launch(AR, 1040, 1060, 100, stream=13)
    t.launch(SGEMM, 1090, 1110, 20)
    if second:
        at = 1500 + (late if r == straggler else 0.0)
        t.launch(AR, 1140, at, 1900 - at, stream=13)
    t.launch(SGEMM, 1200, 1260, 40)
    t.launch(SGEMM, 1250, 1400, 20)
    t.launch(H2D, 1430, 1440, 20, cat="gpu_memcpy", runtime="cudaMemcpyAsync", rt_dur=4)
    return t


def _write_folder(folder: Path, **kw: Any) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for r in range(4):
        _rank(r, **kw).write(folder)
    return folder


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return analyze_trace(_write_folder(tmp_path_factory.mktemp("ranks") / "run")).cross_rank()


def test_straggler_and_waits(report: Any) -> None:
    # AllReduce #1: ranks 0, 1, 3 arrive at 1500, rank 2 at 1800: rank 2 is the straggler,
    # each other rank waits 1800 - 1500 = 300 us; max 300 us, sum 3 x 300 = 900 us
    worst = report.stragglers(1)[0]
    assert (worst.kind, worst.index, worst.straggler) == ("AllReduce", 1, 2)
    assert worst.max_wait_s == pytest.approx(300 * US)
    assert worst.sum_wait_s == pytest.approx(900 * US)
    # AllReduce #0: everyone at 1060, nobody waits
    first = next(c for c in report.collectives if c.index == 0)
    assert first.max_wait_s == 0.0 and first.sum_wait_s == 0.0
    rows = {r["rank"]: r for r in report.rank_records()}
    # inside the collective before the straggler came: min(300, own duration 400) = 300 us
    for r in (0, 1, 3):
        assert rows[r]["collective_wait_s"] == pytest.approx(300 * US)
        assert rows[r]["straggler_count"] == 0
    assert rows[2]["collective_wait_s"] == 0.0
    assert rows[2]["straggler_count"] == 1
    assert rows[2]["caused_wait_s"] == pytest.approx(900 * US)
    assert report.notes == ()


def test_time_split_and_overlap(report: Any) -> None:
    rows = {r["rank"]: r for r in report.rank_records()}
    r0 = rows[0]
    # window: 1000 .. 1900 = 900 us
    assert r0["window_s"] == pytest.approx(900 * US)
    # compute: 100 + 20 + 40 + 20 = 180 us; copies 20 us
    assert r0["compute_s"] == pytest.approx(180 * US)
    assert r0["copy_s"] == pytest.approx(20 * US)
    # comm: 100 + 400 = 500 us; under compute: AllReduce#0 [1060,1160] meets K1 over
    # [1060,1100] = 40 and K2 over [1110,1130] = 20: 60 us -> 60 / 500 = 12 %
    assert r0["comm_s"] == pytest.approx(500 * US)
    assert r0["overlap_share"] == pytest.approx(60 / 500)
    # busy: [1000,1160] 160 + [1260,1300] 40 + [1400,1420] 20 + [1440,1460] 20 + [1500,1900]
    # 400 = 640 us -> idle 260 us; shares 180, 500-60 = 440, 20, 260 of 900
    assert r0["idle_s"] == pytest.approx(260 * US)
    for key, us in (("compute", 180), ("comm", 440), ("copy", 20), ("idle", 260)):
        assert r0[f"{key}_share"] == pytest.approx(us / 900), key
    # rank 2: comm 100 + 100 = 200 us, 60 under compute -> 30 %
    assert rows[2]["overlap_share"] == pytest.approx(60 / 200)


def test_idle_by_cause(report: Any) -> None:
    rows = {r["rank"]: r for r in report.rank_records()}
    # stream 7: before K2 a 10 us gap, its launch (1090) before K1's end (1100): kernel wait;
    # before K3 130 us, launched at 1200 after K2's end (1130): host wait; before K4 100 us,
    # launched (1250) before K3's end (1300) and >= 30 us: other; before the memcpy 20 us,
    # launched at 1430 after K4's end (1420): host wait.
    # stream 13: 1500 - 1160 = 340 us, launched (1140) before 1160: other (rank 2: 640 us)
    assert rows[0]["host_wait_s"] == pytest.approx((130 + 20) * US)
    assert rows[0]["kernel_wait_s"] == pytest.approx(10 * US)
    assert rows[0]["other_s"] == pytest.approx((100 + 340) * US)
    assert rows[2]["other_s"] == pytest.approx((100 + 640) * US)
    idle = report.idle_frame()
    s13 = idle[(idle["rank"] == 2) & (idle["stream"] == "13")].iloc[0]
    assert s13["other"] == pytest.approx(640 * US)
    assert rows[0]["bubble_s"] == 0.0  # no idle gap ends with a send/recv


def test_launch_delays(report: Any) -> None:
    rows = {r["rank"]: r for r in report.rank_records()}
    # rank 0 delays, sorted: 5, 6, 15, 15, 55, 145, 355; mean 596 / 7; median the 4th: 15;
    # p95 (linear): position 0.95 x 6 = 5.7 -> 145 + 0.7 x (355 - 145) = 292; max 355
    r0 = rows[0]
    assert r0["launches"] == 7
    assert r0["launch_mean_us"] == pytest.approx(596 / 7)
    assert r0["launch_p50_us"] == pytest.approx(15)
    assert r0["launch_p95_us"] == pytest.approx(292)
    assert r0["launch_max_us"] == pytest.approx(355)
    assert rows[2]["launch_max_us"] == pytest.approx(655)  # 1800 - 1145


def test_overlap_sixty_percent(tmp_path: Path) -> None:
    # without AllReduce #1: comm is AllReduce#0 alone, 100 us, 60 of it under compute: 60 %
    rep = analyze_trace(_write_folder(tmp_path / "one", second=False)).cross_rank()
    assert [r["overlap_share"] for r in rep.rank_records()] == [pytest.approx(0.6)] * 4


def test_memory_timeline(tmp_path: Path) -> None:
    folder = tmp_path / "mem"
    folder.mkdir()
    r0 = _rank(0)
    for ts, dev, total in ((1000, 0, 1000), (1050, -1, 99_999), (1100, 0, 5000),
                           (1200, 0, 3000)):
        r0.memory(ts, dev, total)
    r1 = _rank(1)
    for i in range(1000):  # 1,000 samples, one spike: downsampled, the spike kept
        r1.memory(1000 + i * 0.5, 0, 7_000_000 if i == 517 else i)
    r0.write(folder)
    r1.write(folder)
    rep = analyze_trace(folder).cross_rank()
    rows = {r["rank"]: r for r in rep.rank_records()}
    assert rows[0]["peak_bytes"] == 5000  # the GPU's largest total; the CPU's 99,999 apart
    assert rows[1]["peak_bytes"] == 7_000_000
    series = {(m.device): m for m in rep.ranks[1].memory}
    assert len(series[0].bytes) == MEMORY_POINTS and max(series[0].bytes) == 7_000_000
    frame = rep.memory_frame()
    g0 = frame[(frame["rank"] == 0) & (frame["device"] == 0)]
    assert g0["bytes"].tolist() == [1000, 5000, 3000]
    # times from the earliest device event of any rank (1000 us)
    assert g0["time_s"].tolist() == pytest.approx([0.0, 100 * US, 200 * US])


def test_pipeline_bubble(tmp_path: Path) -> None:
    folder = tmp_path / "pp"
    folder.mkdir()
    for r in range(2):
        t = _Rank(r)
        t.launch(SGEMM, 0, 10, 10)                  # [10, 20]
        t.launch(SENDRECV, 5, 60, 10, stream=13)    # [60, 70]: idle 20..60 ends with a recv
        t.launch(SGEMM, 15, 70, 10)                 # [70, 80]
        t.launch(SGEMM, 65, 100, 10)                # [100, 110]: idle 80..100 ends in compute
        t.write(folder)
    rep = analyze_trace(folder).cross_rank()
    assert [r["bubble_s"] for r in rep.rank_records()] == [pytest.approx(40 * US)] * 2


def test_one_rank_says_so(tmp_path: Path) -> None:
    folder = tmp_path / "solo"
    folder.mkdir()
    _rank(0).write(folder)
    rep = analyze_trace(folder).cross_rank()
    assert rep.collectives == ()
    assert len(rep.notes) == 1 and "no collectives to compare" in rep.notes[0]
    assert len(rep.rank_records()) == 1  # the rank's own figures are still there


def test_mismatched_counts_use_the_common_prefix(tmp_path: Path) -> None:
    folder = _write_folder(tmp_path / "odd")
    extra = _rank(3)
    extra.launch(AR, 1950, 2000, 50, stream=13)  # a third AllReduce on rank 3 only
    extra.write(folder)
    rep = analyze_trace(folder).cross_rank()
    assert len(rep.notes) == 1 and "AllReduce" in rep.notes[0] and "first 2" in rep.notes[0]
    assert [(c.kind, c.index) for c in rep.collectives] == [("AllReduce", 0), ("AllReduce", 1)]
    assert rep.stragglers(1)[0].straggler == 2


def test_cpu_only_rank_is_left_out(tmp_path: Path) -> None:
    rep = cross_rank({0: None, 1: None})
    assert rep.ranks == {}
    assert rep.notes[0].startswith("rank 0: no device events")


def test_timeline_is_small_and_picklable(tmp_path: Path) -> None:
    result = analyze_trace(_write_folder(tmp_path / "p"))
    tl = result.ranks[0].timeline
    back = pickle.loads(pickle.dumps(tl))
    assert back.collective_kinds == ("AllReduce", "AllReduce")
    assert back.collective_start_us.tolist() == [1060.0, 1500.0]
    # the cross-rank part is a function of the gathered timelines alone
    again = cross_rank({r: pickle.loads(pickle.dumps(b.timeline))
                        for r, b in result.ranks.items()})
    assert again.rank_records() == result.cross_rank().rank_records()


def test_collective_kind_spellings() -> None:
    assert collective_kind(AR) == collective_kind(AR_OLD) == "AllReduce"
    assert collective_kind("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(x)") == "ReduceScatter"
    assert collective_kind("ncclDevKernel_SendRecv(x)") == "SendRecv"
    assert collective_kind("c10d_custom_allreduce(float*)") == "c10d_custom_allreduce"


# --- the command -------------------------------------------------------------------------------

def _run(*args: str) -> str:
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)

    @app.callback()
    def _root() -> None:
        """bertscope"""

    cli_trace.register(app)
    r = CliRunner().invoke(app, ["trace", *args, "--no-store"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return r.output


def test_cli_by_rank(tmp_path: Path) -> None:
    folder = _write_folder(tmp_path / "cli")
    plot = tmp_path / "heat.svg"
    out = _run(str(folder), "--by", "rank", "--plot", str(plot))
    assert "Top 1 stragglers" in out and "AllReduce #1" in out and "rank 2" in out
    assert "300 µs" in out and "900 µs" in out
    assert plot.read_text().lstrip().startswith("<?xml")


def test_cli_by_rank_one_rank(tmp_path: Path) -> None:
    folder = tmp_path / "one"
    folder.mkdir()
    _rank(0).write(folder)
    out = _run(str(folder), "--by", "rank")
    assert "note: 1 rank(s) with device events: no collectives to compare" in out


def test_cli_plot_needs_by_rank(tmp_path: Path) -> None:
    folder = _write_folder(tmp_path / "x")
    with pytest.raises(BertscopeError, match="--by rank"):
        _run(str(folder), "--plot", str(tmp_path / "h.svg"))
    with pytest.raises(BertscopeError, match=r"\.png or \.svg"):
        _run(str(folder), "--by", "rank", "--plot", str(tmp_path / "h.pdf"))
    assert not (tmp_path / "h.svg").exists() and not (tmp_path / "h.pdf").exists()


def _sized_folder(folder: Path) -> Path:
    """The 4-rank folder with message args (torch >= 2.1 writes them on NCCL kernels) on the
    AllReduces: #0 1,048,576 BFloat16 elements on every rank; #1 1,000 Float elements on
    ranks 0-2 as numbers, on rank 3 as strings; a kernel with a dtype no table knows."""
    folder.mkdir(parents=True, exist_ok=True)
    for r in range(4):
        t = _rank(r)
        ars = [e for e in t.events if e["name"] == AR]
        ars[0]["args"].update({"In msg nelems": 1048576, "Out msg nelems": 1048576,
                               "Group size": 4, "dtype": "BFloat16"})
        n = "1000" if r == 3 else 1000
        ars[1]["args"].update({"In msg nelems": n, "Out msg nelems": n, "Group size": 4,
                               "dtype": "Float"})
        t.write(folder)
    return folder


def test_message_sizes_per_collective(tmp_path: Path) -> None:
    rep = analyze_trace(_sized_folder(tmp_path / "sized")).cross_rank()
    by = {c.index: c.message_bytes for c in rep.collectives}
    assert by == {0: 1048576 * 2, 1: 1000 * 4}  # BFloat16 2 bytes, Float 4 bytes
    # one kind: 2 collectives, both sized; per rank 2,097,152 + 4,000 = 2,101,152 bytes
    assert rep.message_records() == [{
        "kind": "AllReduce", "count": 2, "sized": 2, "min_bytes": 4000.0,
        "median_bytes": (2097152 + 4000) / 2, "max_bytes": 2097152.0,
        "bytes_per_rank": 2101152.0}]
    frame = rep.collectives_frame()
    assert frame["message_bytes"].tolist() == [2097152.0, 4000.0]
    out = _run(str(tmp_path / "sized"), "--by", "rank")
    assert "input message sizes" in out and "2.1 MB" in out and "4 kB" in out


def test_no_message_args_no_sizes(report: Any) -> None:
    assert report.message_records() == []
    assert all(c.message_bytes != c.message_bytes for c in report.collectives)  # NaN


def test_unknown_dtype_is_unsized(tmp_path: Path) -> None:
    folder = tmp_path / "odd"
    folder.mkdir()
    for r in range(2):
        t = _rank(r, straggler=9)
        for e in t.events:
            if e["name"] == AR:
                e["args"].update({"In msg nelems": 10, "dtype": "Float4_e2m1fn_x2"})
        t.write(folder)
    rep = analyze_trace(folder).cross_rank()
    assert [c.message_bytes != c.message_bytes for c in rep.collectives] == [True, True]
    assert rep.message_records() == []
