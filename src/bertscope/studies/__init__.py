"""Workflows that measure and predict together, and compare the two.

A study runs producers (`measure`, `trace`, `analytic`) and consumers (`perf`, `parallel`)
on the same work and puts their figures side by side; nothing below imports a study.

- `measured`: the runs a study measures, what to measure and what came back (`RunSpec`,
  `parse_specs`, `Measurement`, `MeasuredRun`, `load_result`, `combine_rounds`).
- `validate`: profile some configs, calibrate on them, predict held-out ones and compare
  (`validate.validate`, `compare`).
- `local_calibration`: microbenchmark the local device and fit its efficiency models, optionally
  refitted to measured op tables (`calibrate_local`).
- `ddp`: a measured DistributedDataParallel run merged over its ranks, with the distributed
  model's all-reduce prediction beside it (`profile_ddp`, `merge_ranks`, `DdpResult`).

Importing a study needs no torch; running one that measures does. The function
`validate.validate` is not re-exported here (its name is its module's).
"""

from __future__ import annotations

from bertscope.studies.ddp import DdpResult, merge_ranks, profile_ddp
from bertscope.studies.local_calibration import calibrate_local
from bertscope.studies.measured import (
    MeasuredRun,
    Measurement,
    RunSpec,
    combine_rounds,
    load_result,
    parse_specs,
)
from bertscope.studies.validate import compare

__all__ = ["DdpResult", "MeasuredRun", "Measurement", "RunSpec", "calibrate_local",
           "combine_rounds", "compare", "load_result", "merge_ranks", "parse_specs",
           "profile_ddp"]
