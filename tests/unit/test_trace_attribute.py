"""The trace reader attributes with the same torch-free code as `bertscope profile`."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bertscope.trace import attribute


def test_the_trace_reader_does_not_import_torch() -> None:
    code = ("import sys, bertscope.trace, bertscope.cli.trace; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"


def test_profile_and_trace_reader_share_one_attributor() -> None:
    pytest.importorskip("torch")
    from bertscope.measure import attribution

    assert attribution.Attributor is attribute.Attributor
    assert attribution.gemm_shape is attribute.gemm_shape
