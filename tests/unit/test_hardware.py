"""Hardware catalog: every file loads, every figure is cited, units are consistent.

Expected numbers come from the vendors' datasheets and papers (cited beside each), not from
the loader's output; the hand arithmetic is written next to each derived value.
"""

from __future__ import annotations

import dataclasses
import json
from importlib.resources import files
from pathlib import Path

import pytest

from bertscope.errors import BertscopeError
from bertscope.hardware import (
    Device,
    DeviceKind,
    NumberFormat,
    catalog,
    device_from_dict,
    list_devices,
    load_device,
)

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "devices"
CATALOG_DIR = Path(str(files("bertscope") / "data" / "devices"))
CATALOG_FILES = sorted(CATALOG_DIR.glob("*.toml"))

# The issue's list: NVIDIA V100, A100, H100, H200, B200; AMD MI50, MI100, MI250X, MI300X;
# Google TPU v1, v2, v3, v4, v5e, v5p.
ISSUE_DEVICES = {
    "v100": "v100-sxm2-32gb", "a100": "a100-sxm4-80gb", "h100": "h100-sxm5-80gb",
    "h200": "h200-sxm-141gb", "b200": "b200-hgx-180gb",
    "mi50": "mi50-32gb", "mi100": "mi100", "mi250x": "mi250x-oam", "mi300x": "mi300x-oam",
    "tpuv1": "tpu-v1", "tpuv2": "tpu-v2", "tpuv3": "tpu-v3", "tpuv4": "tpu-v4",
    "tpuv5e": "tpu-v5e", "tpuv5p": "tpu-v5p",
}
GPUS = [d for d in catalog() if d.kind is DeviceKind.GPU]

T, G = 1e12, 1e9


# --- the catalog as a whole --------------------------------------------------------------------

@pytest.mark.parametrize("path", CATALOG_FILES, ids=lambda p: p.stem)
def test_every_catalog_file_loads_and_is_named_after_its_file(path: Path) -> None:
    device = load_device(path)
    assert device.name == path.stem
    assert device.sku and device.vendor


def test_catalog_has_every_device_of_the_issue() -> None:
    names = {d.name for d in catalog()}
    assert set(ISSUE_DEVICES.values()) <= names
    assert len(catalog()) == len(CATALOG_FILES)
    for alias, name in ISSUE_DEVICES.items():
        assert load_device(alias).name == name


@pytest.mark.parametrize("device", catalog(), ids=lambda d: d.name)
def test_every_figure_has_a_source_with_a_url(device: Device) -> None:
    figures = device.figures()
    assert set(figures) <= set(device.sources)
    root = Path(__file__).resolve().parents[2]
    for key in figures:
        src = device.sources[key]
        # a published URL, or a measurement of this project committed under bench/results/
        committed = any(w.startswith("bench/results/") and (root / w).is_file()
                        for w in src.split())
        assert "https://" in src or committed, f"{device.name}: {key} cites no URL"


@pytest.mark.parametrize("path", CATALOG_FILES, ids=lambda p: p.stem)
def test_every_catalog_file_says_its_peaks_are_dense(path: Path) -> None:
    assert "dense" in path.read_text(encoding="utf-8").lower()


@pytest.mark.parametrize("device", catalog(), ids=lambda d: d.name)
def test_capacities_and_bandwidths_are_positive_and_plausible(device: Device) -> None:
    # Between TPU v1's 8 GiB / 34 GB/s (Jouppi et al. 2017) and B200's 180 GB / 7.7 TB/s.
    assert 1 * G <= device.memory_bytes <= 1e12
    assert 10 * G <= device.memory_bandwidth <= 20e12
    if device.on_chip_bytes is not None:
        assert 1e6 <= device.on_chip_bytes <= 1e9
    if device.interconnect_bandwidth is not None:
        assert 100 * G <= device.interconnect_bandwidth <= 10e12
    for fmt in device.formats:
        assert 1 * T <= device.peak_flops(fmt) <= 10e15
        assert 1 <= device.ridge_point(fmt) <= 3000
    for fmt in (NumberFormat.BF16, NumberFormat.FP16):
        if device.has(fmt):
            # A 16-bit ridge point is tens to hundreds of FLOP per byte on every chip here.
            assert 10 <= device.ridge_point(fmt) <= 500


@pytest.mark.parametrize("device", GPUS, ids=lambda d: d.name)
def test_narrower_formats_are_at_least_as_fast_on_gpus(device: Device) -> None:
    order = [NumberFormat.FP32, NumberFormat.TF32, NumberFormat.FP16, NumberFormat.FP8]
    have = [f for f in order if device.has(f)]
    rates = [device.peak_flops(f) for f in have]
    assert rates == sorted(rates), f"{device.name}: {dict(zip(have, rates, strict=True))}"
    if device.has("fp16") and device.has("fp32"):
        assert device.peak_flops("fp16") >= device.peak_flops("fp32")


def test_names_and_aliases_are_unique_and_lowercase() -> None:
    keys = [k for d in catalog() for k in (d.name, *d.aliases)]
    assert len(keys) == len(set(keys))
    assert all(k == k.lower() for k in keys)


# --- figures checked against the published tables ------------------------------------------

def test_a100_figures_and_ridge_point() -> None:
    # NVIDIA A100 datasheet, A100 80GB SXM column, dense figures.
    a100 = load_device("a100")
    assert a100.peak_flops("fp32") == pytest.approx(19.5 * T)
    assert a100.peak_flops("tf32") == pytest.approx(156 * T)
    assert a100.peak_flops("bf16") == pytest.approx(312 * T)
    assert a100.peak_flops("int8") == pytest.approx(624 * T)
    assert a100.memory_bandwidth == pytest.approx(2039 * G)
    assert a100.memory_bytes == pytest.approx(80e9)
    assert a100.interconnect_bandwidth == pytest.approx(600 * G)
    # 312e12 FLOP/s / 2039e9 B/s = 153.0 FLOP/B
    assert a100.ridge_point("bf16") == pytest.approx(153.0, abs=0.1)
    # 19.5e12 / 2039e9 = 9.56 FLOP/B: fp32 without Tensor Cores is memory-bound far sooner.
    assert a100.ridge_point(NumberFormat.FP32) == pytest.approx(9.56, abs=0.01)


def test_h100_is_dense_not_sparse_and_doubles_a100_per_sm_per_clock() -> None:
    # H100 whitepaper, Table 3, H100 SXM5: 989.4 dense / 1978.9 sparse FP16 Tensor TFLOPS.
    h100, a100 = load_device("h100"), load_device("a100")
    assert h100.peak_flops("fp16") == pytest.approx(989.4 * T)
    assert h100.peak_flops("fp8") == pytest.approx(1978.9 * T)
    # Per SM per clock, Hopper's Tensor Cores do 2x Ampere's (H100 whitepaper):
    # H100 SXM5 132 SMs at 1830 MHz: 989.4e12 / (132 * 1.830e9) = 4096 FLOP/clk/SM
    # A100 SXM4 108 SMs at 1410 MHz:  312e12 / (108 * 1.410e9) = 2049 FLOP/clk/SM
    per_sm_h100 = h100.peak_flops("fp16") / (132 * 1.830e9)
    per_sm_a100 = a100.peak_flops("fp16") / (108 * 1.410e9)
    assert per_sm_h100 / per_sm_a100 == pytest.approx(2.0, rel=0.01)
    # Whole chip: 989.4 / 312 = 3.17x (a sparse figure would give 6.3x).
    assert h100.peak_flops("fp16") / a100.peak_flops("fp16") == pytest.approx(3.17, abs=0.01)
    # 989.4e12 / 3.35e12 = 295 FLOP/B (H100 datasheet: 3.35 TB/s)
    assert h100.ridge_point("bf16") == pytest.approx(295.3, abs=0.1)


def test_h200_and_b200_dense_figures_are_half_the_sparse_datasheet_figures() -> None:
    # H200 page: BF16 Tensor Core 1,979 TFLOPS "with sparsity" -> 1979 / 2 = 989.5 dense.
    assert load_device("h200").peak_flops("bf16") == pytest.approx(1979 / 2 * T)
    assert load_device("h200").memory_bandwidth == pytest.approx(4.8e12)
    # HGX B200: FP16/BF16 4.5 PFLOPS with sparsity per GPU -> 2.25 PFLOPS dense.
    b200 = load_device("b200")
    assert b200.peak_flops("bf16") == pytest.approx(4.5e15 / 2)
    assert b200.peak_flops("fp8") == pytest.approx(9e15 / 2)
    assert b200.interconnect_bandwidth == pytest.approx(1.8e12)


def test_v100_has_no_bf16_and_says_which_formats_it_has() -> None:
    # V100 whitepaper / datasheet: 15.7 fp32, 125 Tensor (fp16) TFLOPS, 900 GB/s, no bf16.
    v100 = load_device("V100")
    assert v100.peak_flops("fp16") == pytest.approx(125 * T)
    # 125e12 / 900e9 = 138.9 FLOP/B
    assert v100.ridge_point("fp16") == pytest.approx(138.9, abs=0.1)
    with pytest.raises(BertscopeError, match=r"no published dense bf16 peak; it has: fp32, fp16"):
        v100.peak_flops("bf16")


def test_amd_figures() -> None:
    # MI300X data sheet: 1307.4 dense FP16 (2614.9 with sparsity), 5.3 TB/s, 192 GB.
    mi300x = load_device("MI300X")
    assert mi300x.peak_flops("fp16") == pytest.approx(1307.4 * T)
    assert mi300x.memory_bytes == pytest.approx(192e9)
    # 1307.4e12 / 5.3e12 = 246.7 FLOP/B
    assert mi300x.ridge_point("bf16") == pytest.approx(246.7, abs=0.1)
    # MI250X: 383 FP16/BF16 TFLOPS, 3.2768 TB/s; one OAM package = 2 GCDs.
    assert load_device("mi250x").peak_flops("bf16") == pytest.approx(383 * T)
    # MI100: bf16 runs at half the fp16 matrix rate (92.3 vs 184.6).
    mi100 = load_device("mi100")
    assert mi100.peak_flops("bf16") / mi100.peak_flops("fp16") == pytest.approx(0.5, abs=0.001)
    # MI50: no bf16, no matrix cores: fp16 = 2 x fp32 (26.5 vs 13.3).
    assert not load_device("mi50").has("bf16")


def test_tpu_figures_and_binary_units() -> None:
    # Jouppi et al. 2017: 92 int8 TOPS, 34 GB/s, 8 GiB DDR3, 28 MiB on chip.
    v1 = load_device("tpu-v1")
    assert v1.formats == (NumberFormat.INT8,)
    assert v1.memory_bytes == 8 * 2**30
    assert v1.on_chip_bytes == 28 * 2**20
    # The paper's roofline counts MAC ops (2 ops each) per weight byte:
    # 92e12 / 2 / 34e9 = 1353, the ridge it reports near 1350.
    assert v1.ridge_point("int8") / 2 == pytest.approx(1353, abs=1)
    assert v1.interconnect_bandwidth is None
    # Cloud TPU v4 page: 275 TFLOPS bf16 or int8, 32 GiB HBM2 at 1200 GBps.
    v4 = load_device("tpu-v4")
    assert v4.peak_flops("bf16") == v4.peak_flops("int8") == pytest.approx(275 * T)
    assert v4.memory_bytes == 32 * 2**30  # 34,359,738,368 bytes
    # 275e12 / 1200e9 = 229.2 FLOP/B
    assert v4.ridge_point("bf16") == pytest.approx(229.2, abs=0.1)
    # CACM 2020: TPU v3 ICI 4 links x 656 Gbit/s = 2624 Gbit/s = 328 GB/s.
    assert load_device("tpu-v3").interconnect_bandwidth == pytest.approx(328 * G)
    # No TPU publishes an fp32 matrix peak, so none is catalogued.
    for tpu in (d for d in catalog() if d.kind is DeviceKind.TPU):
        assert not tpu.has("fp32"), tpu.name


# --- API behaviour ----------------------------------------------------------------------------

def test_unknown_format_name_lists_the_choices() -> None:
    with pytest.raises(BertscopeError, match=r"unknown number format 'fp64'.*fp32, tf32"):
        load_device("a100").peak_flops("fp64")


def test_tpu_without_fp32_names_what_it_has() -> None:
    with pytest.raises(BertscopeError, match=r"tpu-v4\) has no published dense fp32.*bf16, int8"):
        load_device("tpu-v4").peak_flops(NumberFormat.FP32)


def test_names_are_case_space_and_underscore_insensitive() -> None:
    assert load_device("A100").name == "a100-sxm4-80gb"
    assert load_device("TPU v4").name == load_device("tpu_v4").name == "tpu-v4"
    assert load_device(" MI300X ").name == "mi300x-oam"


def test_unknown_name_suggests_close_names() -> None:
    with pytest.raises(BertscopeError, match=r"unknown device 'h1000'; did you mean .*h100"):
        load_device("h1000")
    with pytest.raises(BertscopeError, match=r"did you mean .*mi300x"):
        load_device("mi300")


def test_list_devices_rows() -> None:
    rows = list_devices()
    assert [r["name"] for r in rows] == [d.name for d in catalog()]
    a100 = next(r for r in rows if r["name"] == "a100-sxm4-80gb")
    assert a100["bf16_TFLOPS"] == pytest.approx(312)
    assert a100["bandwidth_GBps"] == pytest.approx(2039)
    assert a100["memory_GB"] == pytest.approx(80)
    assert a100["ridge_format"] == "bf16"
    assert a100["ridge_FLOP_per_byte"] == pytest.approx(153.0, abs=0.1)
    v100 = next(r for r in rows if r["name"] == "v100-sxm2-32gb")
    assert v100["bf16_TFLOPS"] is None and v100["ridge_format"] == "fp16"
    v1 = next(r for r in rows if r["name"] == "tpu-v1")
    assert v1["ridge_format"] == "int8"
    fp32_rows = list_devices("fp32")
    assert next(r for r in fp32_rows if r["name"] == "tpu-v4")["ridge_FLOP_per_byte"] is None


def test_catalog_order_is_natural() -> None:
    amd = [d.name for d in catalog() if d.vendor == "AMD"]
    assert amd == ["mi50-32gb", "mi100", "mi250x-oam", "mi300x-oam"]


def test_devices_are_hashable_and_frozen() -> None:
    a100 = load_device("a100")
    assert {a100, load_device("a100-sxm4-80gb")} == {a100}
    with pytest.raises(dataclasses.FrozenInstanceError):
        a100.memory_bandwidth = 1.0  # type: ignore[misc]


def test_device_in_code_needs_a_source_per_figure() -> None:
    fields = dict(name="x", sku="X", vendor="Me", kind="gpu", peaks={"bf16": 1e14},
                  memory_bytes=16e9, memory_bandwidth=1e12)
    sources = {"peaks.bf16": "s", "memory_bytes": "s", "memory_bandwidth": "s"}
    d = Device(**fields, sources=sources)
    assert d.peaks == {NumberFormat.BF16: 1e14} and d.kind is DeviceKind.GPU
    with pytest.raises(BertscopeError, match="memory_bandwidth has no source"):
        Device(**fields, sources={"peaks.bf16": "s", "memory_bytes": "s"})
    with pytest.raises(BertscopeError, match="memory_bytes must be a positive number"):
        Device(**{**fields, "memory_bytes": 0}, sources=sources)
    with pytest.raises(BertscopeError, match="unknown kind 'fpga'"):
        Device(**{**fields, "kind": "fpga"}, sources=sources)


# --- user device files ------------------------------------------------------------------------

def test_user_toml_device_loads_with_units_converted() -> None:
    d = load_device(FIXTURES / "my-accelerator.toml")
    assert d.name == "my-accelerator"  # names are lowercased
    assert d.memory_bytes == 24 * 2**30  # memory_GiB = 24
    assert d.memory_bandwidth == pytest.approx(1.5e12)  # memory_bandwidth_TBps = 1.5
    assert d.on_chip_bytes == pytest.approx(64e6)  # on_chip_MB = 64
    assert d.interconnect_bandwidth == pytest.approx(100e9)  # 800 Gbit/s / 8 = 100 GB/s
    assert d.peak_flops("int8") == pytest.approx(400 * T)
    # 200e12 / 1.5e12 = 133.3 FLOP/B
    assert d.ridge_point("bf16") == pytest.approx(133.3, abs=0.1)
    assert d.sources["peaks.fp32"].startswith("Example Corp X1 product brief")
    assert d.sources["peaks.fp32"].endswith("; page 1")
    assert d.sources["on_chip_bytes"].startswith("measured")


def test_user_json_device_equals_the_toml_one() -> None:
    toml_device = load_device(str(FIXTURES / "my-accelerator.toml"))
    json_device = load_device(str(FIXTURES / "my-accelerator.json"))
    assert json_device == toml_device
    assert json_device.origin.endswith(".json")


def test_device_from_dict_matches_the_file() -> None:
    raw = json.loads((FIXTURES / "my-accelerator.json").read_text(encoding="utf-8"))
    assert device_from_dict(raw) == load_device(FIXTURES / "my-accelerator.json")


@pytest.mark.parametrize(
    ("fixture", "message"),
    [
        ("bad_missing_source.toml", r"peak_TFLOPS\.bf16 has no source; add 'peak_TFLOPS\.bf16'"),
        ("bad_negative_bandwidth.toml", r"memory_bandwidth_GBps must be a positive number, got -9"),
        ("bad_unknown_format.toml", r"unknown number format 'fp64'.*use one of: fp32, tf32"),
        ("bad_unknown_field.toml", r"unknown field 'memory_gb'; did you mean 'memory_GB'\?"),
        ("bad_missing_memory.toml", r"missing field memory \(give memory_GB or memory_GiB"),
        ("bad_not_toml.toml", r"not valid TOML"),
        ("bad_not_json.json", r"not valid JSON"),
    ],
)
def test_bad_device_files_give_one_line_errors_naming_the_file(fixture: str, message: str) -> None:
    with pytest.raises(BertscopeError, match=message) as info:
        load_device(FIXTURES / fixture)
    text = str(info.value)
    assert fixture in text
    assert "\n" not in text


def test_missing_file_and_wrong_suffix() -> None:
    with pytest.raises(BertscopeError, match="no such file"):
        load_device("nowhere/my_chip.toml")
    with pytest.raises(BertscopeError, match=r"must end in \.toml or \.json"):
        load_device(FIXTURES)
