"""Pipeline schedules and their formulas: bubble, and micro-batches a stage holds at its peak.

GPipe (Huang et al. 2019) and 1F1B (PipeDream-Flush, Narayanan et al. 2021) take (m + p - 1)
micro-batch steps; the interleaved 1F1B schedule with v virtual stages per device takes
(m + (p - 1)/v) (Narayanan et al., SC 2021, section 2.2). Every function takes numbers or
numpy arrays (broadcast together); a schedule is a `Schedule`, its name, or an array of codes
(`Schedule.code`, the form `evaluate_arrays` and the search use).
"""

from __future__ import annotations

import numpy as np

from bertscope.errors import parse_enum
from bertscope.job import Schedule
from bertscope.parallel.collectives import ArrayLike

SCHEDULES: tuple[Schedule, ...] = tuple(Schedule)
"""Schedules in code order (0 gpipe, 1 1f1b, 2 interleaved)."""

GPIPE_CODE = Schedule.GPIPE.code
"""Code of the GPipe schedule in arrays of layouts."""
ONE_F_ONE_B_CODE = Schedule.ONE_F_ONE_B.code
"""Code of the 1F1B schedule in arrays of layouts."""
INTERLEAVED_CODE = Schedule.INTERLEAVED.code
"""Code of the interleaved 1F1B schedule in arrays of layouts."""


def schedule_codes(schedule: Schedule | str | ArrayLike) -> np.ndarray:
    """Integer codes of a schedule (a `Schedule` or its name) or of an array of codes."""
    if isinstance(schedule, str):
        return np.asarray(parse_enum(Schedule, schedule, "schedule").code)
    return np.asarray(schedule)


def virtual_factor(schedule: Schedule | str | ArrayLike,
                   virtual_stages: ArrayLike) -> np.ndarray:
    """v where the schedule is interleaved, 1 elsewhere (the divisor of the bubble)."""
    code = schedule_codes(schedule)
    return np.where(code == INTERLEAVED_CODE, np.asarray(virtual_stages, dtype=float), 1.0)


def bubble_fraction(schedule: Schedule | str | ArrayLike, pp: ArrayLike,
                    micro_batches: ArrayLike, virtual_stages: ArrayLike = 1) -> np.ndarray:
    """Share of the pipeline's time that a device idles: (p - 1)/(m + p - 1) for GPipe and
    1F1B; (p - 1)/(v m + p - 1) interleaved, i.e. a bubble of (p - 1)/v micro-batch steps in
    m + (p - 1)/v (Narayanan et al. 2021, section 2.2). Schedule codes as in `SCHEDULES`."""
    p, m = np.asarray(pp, dtype=float), np.asarray(micro_batches, dtype=float)
    v = virtual_factor(schedule, virtual_stages)
    return (p - 1) / (v * m + p - 1)


def bubble_overhead(schedule: Schedule | str | ArrayLike, pp: ArrayLike,
                    micro_batches: ArrayLike, virtual_stages: ArrayLike = 1) -> np.ndarray:
    """Bubble time relative to the ideal (bubble-free) time: (p - 1)/m for GPipe and 1F1B,
    (p - 1)/(v m) interleaved (Narayanan et al. 2021's "bubble time fraction")."""
    p, m = np.asarray(pp, dtype=float), np.asarray(micro_batches, dtype=float)
    v = virtual_factor(schedule, virtual_stages)
    return (p - 1) / (v * m)


def in_flight(schedule: Schedule | str | ArrayLike, pp: ArrayLike, micro_batches: ArrayLike,
              virtual_stages: ArrayLike = 1) -> tuple[np.ndarray, np.ndarray]:
    """Micro-batches' worth of its layers' activations the (first, last) stage holds at its
    peak. GPipe: m on every stage. 1F1B: min(m, p) on the first stage (p - 1 warm-up forwards
    plus one), 1 on the last. Interleaved: Megatron-LM's warm-up of 2(p - 1) + (v - 1)p chunks
    plus one on the first device, (v - 1)p plus one on the last, each chunk 1/v of the stage:
    min(m v, v p + p - 1)/v, which is Korthikanti et al.'s factor 1 + (p - 1)/(p v) times p.
    One pipeline stage (p = 1) holds one micro-batch at a time."""
    code = schedule_codes(schedule)
    p, m = np.asarray(pp, dtype=float), np.asarray(micro_batches, dtype=float)
    v = np.maximum(np.asarray(virtual_stages, dtype=float), 1.0)
    first = np.where(code == GPIPE_CODE, m, np.where(
        code == INTERLEAVED_CODE, np.minimum(m * v, v * p + p - 1) / v, np.minimum(m, p)))
    last = np.where(code == GPIPE_CODE, m, np.where(
        code == INTERLEAVED_CODE, np.minimum(m * v, (v - 1) * p + 1) / v, 1.0))
    single = p <= 1
    return np.where(single, 1.0, first), np.where(single, 1.0, last)


def edge_in_flight(schedule: Schedule | str | ArrayLike, pp: ArrayLike,
                   micro_batches: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Micro-batches' worth of the embedding (first stage) and head (last stage) activations
    held at the peak: the sections outside the stack are not interleaved, so m under GPipe,
    else min(m, p) on the first stage and one on the last; one with p = 1."""
    code = schedule_codes(schedule)
    p, m = np.asarray(pp), np.asarray(micro_batches)
    first = np.where(p == 1, 1.0, np.where(code == GPIPE_CODE, m, np.minimum(m, p)))
    last = np.where(p == 1, 1.0, np.where(code == GPIPE_CODE, m, 1.0))
    return first, last


__all__ = ["GPIPE_CODE", "INTERLEAVED_CODE", "ONE_F_ONE_B_CODE", "SCHEDULES", "Schedule",
           "bubble_fraction", "bubble_overhead", "edge_in_flight", "in_flight", "schedule_codes",
           "virtual_factor"]
