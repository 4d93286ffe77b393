"""Kineto's start/stop lines on descriptor 2 are dropped; everything else passes on."""

import os

from bertscope.measure.quiet import keep_line, quiet_fd2


def test_kineto_lines_are_recognised() -> None:
    assert not keep_line("USDT:2026-12-02 00:35:06 16131:16131 "
                         "SyncActivityProfilerHandler.cpp:52] profiler_start\n")
    assert not keep_line("USDT:2026-12-02 00:35:06 1:1 SyncActivityProfilerHandler.cpp:59] "
                         "profiler_stop")
    assert keep_line("RuntimeError: CUDA out of memory\n")
    assert keep_line("USDT probe failed: profiler_start missing\n")  # not Kineto's format


def test_fd2_writes_are_filtered_not_swallowed(capfd) -> None:
    with quiet_fd2():
        os.write(2, b"USDT:2026-12-02 00:35:06 7:7 SyncActivityProfilerHandler.cpp:52] "
                    b"profiler_start\n")
        os.write(2, b"a real C++ warning\n")
    err = capfd.readouterr().err
    assert err == "a real C++ warning\n"


def test_descriptor_2_is_restored_after_an_exception(capfd) -> None:
    try:
        with quiet_fd2():
            raise ValueError("x")
    except ValueError:
        pass
    os.write(2, b"after\n")
    assert capfd.readouterr().err == "after\n"
