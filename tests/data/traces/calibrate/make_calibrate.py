"""Write the small GPU-style traces `calibrate --from-trace` is tested on (run to regenerate).

    .venv/bin/python tests/data/traces/calibrate/make_calibrate.py

Laid out as torch.profiler writes them with record_shapes=True: CPU ops with "Input Dims" and
"Input type", runtime launches, kernels on a stream, `ac2g` flows. Every kernel duration is
written from a chosen rate, so the fits' expected values follow by hand (tests/unit/
test_calibrate_trace.py):

- nvidia_train.json: an A100 ("NVIDIA A100-SXM4-80GB"), fp32, one FFN-like layer trained one
  step: three forward linears (aten::linear -> aten::addmm -> ampere_sgemm_128x64_tn) at
  0.5 x 19.5 TFLOP/s, their six backward GEMMs (AddmmBackward0 -> aten::mm, data and weight
  gradients) at 0.4 x 19.5 TFLOP/s, a gelu and an add at 0.8 x 2039 GB/s. Launches carry
  `correlation` args.
- amd_infer.json: an MI300X ("AMD Instinct MI300X"), bf16 inference: three linears on
  Tensile kernels (Cijk_Alik_Bljk_BBS_BH_...) at 0.3 x 1307.4 TFLOP/s, a gelu and an add at
  0.5 x 5.3 TB/s; hipLaunchKernel; no correlation args (only ac2g flows link launches).
- no_shapes.json: nvidia_train.json without "Input Dims" / "Input type" (record_shapes off).
- no_gemm.json: only the elementwise ops of nvidia_train.json.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parents[3]))  # the repository root: run as a script
from tests.data.traces.make_traces import ADD, GELU, SGEMM  # noqa: E402  (real kernel names)

BASE = 1_700_000_000_000.0
TENSILE = "Cijk_Alik_Bljk_BBS_BH_MT128x128x64_MI16x16x16x1_SN_1LDSB1_GRVW8_K1_WG32_8_1"

A100_FP32 = 19.5e12
A100_BW = 2039e9
MI300X_BF16 = 1307.4e12
MI300X_BW = 5.3e12


class Trace:
    """Events of one trace, laid out in time on a forward thread, a backward thread and a
    stream."""

    def __init__(self, launch: str, correlation: bool) -> None:
        self.events: list[dict[str, Any]] = []
        self.t = BASE
        self.gpu_t = BASE + 50.0
        self.corr = 1000
        self.ext = 1
        self.launch, self.correlation = launch, correlation

    def op(self, name: str, dims: list[Any], types: list[str], tid: int = 1,
           seq: int | None = None, children: Any = None) -> None:
        """A CPU op (dur covers its children), its children written by `children()`."""
        start = self.t
        self.t += 1.0
        args: dict[str, Any] = {"External id": self.ext, "Input Dims": dims, "Input type": types}
        if seq is not None:
            args["Sequence number"] = seq
        self.ext += 1
        event = {"ph": "X", "cat": "cpu_op", "name": name, "pid": 100, "tid": tid, "ts": start,
                 "args": args}
        self.events.append(event)
        if children is not None:
            children()
        self.t += 1.0
        event["dur"] = self.t - start

    def kernel(self, name: str, dur_us: float, tid: int = 1) -> None:
        """A runtime launch at the current CPU time and its kernel on stream 7."""
        self.corr += 1
        rt_args = {"correlation": self.corr} if self.correlation else {}
        k_args: dict[str, Any] = {"device": 0, "stream": 7}
        if self.correlation:
            k_args["correlation"] = self.corr
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": self.launch, "pid": 100,
                            "tid": tid, "ts": self.t, "dur": 4.0, "args": rt_args})
        start = max(self.gpu_t, self.t + 5.0)
        self.events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7,
                            "ts": start, "dur": round(dur_us, 3), "args": k_args})
        self.events.append({"ph": "s", "cat": "ac2g", "id": self.corr, "pid": 100, "tid": tid,
                            "ts": self.t, "name": "ac2g"})
        self.events.append({"ph": "f", "cat": "ac2g", "id": self.corr, "pid": 0, "tid": 7,
                            "ts": start, "name": "ac2g", "bp": "e"})
        self.gpu_t = start + round(dur_us, 3)
        self.t += 5.0

    def linear(self, x: list[int], w: list[int], dtype: str, kernel: str, rate: float,
               seq: int) -> None:
        """aten::linear(X, W, b) -> aten::addmm(b, X2d, W^T) -> one GEMM kernel at `rate`."""
        m, k, n = x[0] * x[1], x[2], w[0]
        us = 2.0 * m * n * k / rate * 1e6
        self.op("aten::linear", [x, w, [n]], [dtype] * 3, seq=seq, children=lambda: self.op(
            "aten::addmm", [[n], [m, k], [k, n], [], []], [dtype] * 3 + ["Scalar"] * 2,
            seq=seq, children=lambda: self.kernel(kernel, us)))

    def mm(self, a: list[int], b: list[int], rate: float, tid: int) -> None:
        """aten::mm(A[M, K], B[K, N]) -> one GEMM kernel at `rate`."""
        us = 2.0 * a[0] * b[1] * a[1] / rate * 1e6
        self.op("aten::mm", [a, b], ["float", "float"], tid=tid,
                children=lambda: self.kernel(SGEMM, us, tid))

    def linear_backward(self, x: list[int], w: list[int], seq: int, rate: float) -> None:
        """AddmmBackward0 of linear(X[b, s, K], W[N, K]): dX = dY W, dW = dY^T X."""
        m, k, n = x[0] * x[1], x[2], w[0]
        node = "AddmmBackward0"

        def body() -> None:
            self.mm([m, n], [n, k], rate, 2)  # data gradient dY[M, N] @ W[N, K]
            self.mm([n, m], [m, k], rate, 2)  # weight gradient dY^T[N, M] @ X[M, K]

        self.op(f"autograd::engine::evaluate_function: {node}", [], [], tid=2, seq=seq,
                children=lambda: self.op(node, [], [], tid=2, seq=seq, children=body))

    def elementwise(self, name: str, dims: list[Any], dtype: str, kernel: str,
                    bandwidth: float, itemsize: int) -> None:
        """A memory-bound op; its kernel moves its inputs plus one output at `bandwidth`."""
        sizes = [itemsize * _numel(d) for d in dims]
        us = (sum(sizes) + max(sizes)) / bandwidth * 1e6
        self.op(name, dims, [dtype] * len(dims), children=lambda: self.kernel(kernel, us))

    def write(self, path: Path, device: str, memory: int, shapes: bool = True) -> None:
        events = self.events
        if not shapes:
            events = [{**e, "args": {k: v for k, v in e.get("args", {}).items()
                                     if k not in ("Input Dims", "Input type")}}
                      for e in events]
        doc = {"schemaVersion": 1,
               "deviceProperties": [{"id": 0, "name": device, "totalGlobalMem": memory}],
               "traceEvents": events, "traceName": path.name}
        path.write_text(json.dumps(doc, indent=0) + "\n")


def _numel(shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def nvidia(elementwise_only: bool = False) -> Trace:
    """One FFN-like fp32 layer, forward and backward, on an A100 (see the module docstring)."""
    t = Trace("cudaLaunchKernel", correlation=True)
    x, ffn = [8, 512, 1024], [8, 512, 4096]
    fwd, bwd, bw = 0.5 * A100_FP32, 0.4 * A100_FP32, 0.8 * A100_BW
    if not elementwise_only:
        t.linear(x, [1024, 1024], "float", SGEMM, fwd, seq=10)
        t.linear(x, [4096, 1024], "float", SGEMM, fwd, seq=11)
    t.elementwise("aten::gelu", [ffn], "float", GELU, bw, 4)
    if not elementwise_only:
        t.linear(ffn, [1024, 4096], "float", SGEMM, fwd, seq=12)
    t.elementwise("aten::add", [x, x, []], "float", ADD, bw, 4)
    if not elementwise_only:
        t.linear_backward(ffn, [1024, 4096], 12, bwd)
        t.linear_backward(x, [4096, 1024], 11, bwd)
        t.linear_backward(x, [1024, 1024], 10, bwd)
    return t


def amd() -> Trace:
    """bf16 inference on an MI300X (see the module docstring)."""
    t = Trace("hipLaunchKernel", correlation=False)
    x, ffn = [4, 256, 2048], [4, 256, 8192]
    rate, bw = 0.3 * MI300X_BF16, 0.5 * MI300X_BW
    t.linear(x, [2048, 2048], "c10::BFloat16", TENSILE, rate, seq=1)
    t.linear(x, [8192, 2048], "c10::BFloat16", TENSILE, rate, seq=2)
    t.elementwise("aten::gelu", [ffn], "c10::BFloat16", GELU.replace("float", "c10::BFloat16"),
                  bw, 2)
    t.linear(ffn, [2048, 8192], "c10::BFloat16", TENSILE, rate, seq=3)
    t.elementwise("aten::add", [x, x, []], "c10::BFloat16", ADD.replace("float", "c10::BFloat16"),
                  bw, 2)
    return t


def main() -> None:
    nvidia().write(HERE / "nvidia_train.json", "NVIDIA A100-SXM4-80GB", 85899345920)
    nvidia().write(HERE / "no_shapes.json", "NVIDIA A100-SXM4-80GB", 85899345920, shapes=False)
    nvidia(elementwise_only=True).write(HERE / "no_gemm.json", "NVIDIA A100-SXM4-80GB",
                                        85899345920)
    amd().write(HERE / "amd_infer.json", "AMD Instinct MI300X", 206158430208)


if __name__ == "__main__":
    main()
