"""The op table: one row per operation of a training iteration, the schema every producer emits.

A row is one op *site* in the iteration's graph (e.g. layer 3's FFN1 weight-gradient GEMM).
`count` says how many times it runs per iteration (micro-batches); `flops`, `bytes_read`
and `bytes_written` are totals over those runs, so sums over rows are iteration totals.
`saved_bytes` is what the op keeps for backward during one micro-batch (a memory figure,
not a volume). `time_s` is measured or predicted time where a producer knows it.

`schema.py` (Op, the columns), `grouping.py` (pandas-free grouping and summaries),
`records.py` (the typed facts a table carries), `table.py` (OpTable, its export and load).
"""

from __future__ import annotations

from bertscope.optable.combine import Combine, combine
from bertscope.optable.grouping import (
    Grouped,
    group_first_max,
    group_rows,
    group_sum,
    stable_largest,
    summarize,
)
from bertscope.optable.records import (
    Extra,
    ProfileFacts,
    Provenance,
    Record,
    records_from_dict,
    records_to_dict,
    replace_records,
)
from bertscope.optable.schema import (
    COLUMNS,
    ENUM_COLUMNS,
    Columns,
    Op,
    as_column,
    bytes_moved,
    intensity,
    is_frame,
    op_from_dict,
)
from bertscope.optable.table import OpTable, meta_with_job, table_from_doc

__all__ = ["COLUMNS", "ENUM_COLUMNS", "Columns", "Combine", "Extra", "Grouped", "Op", "OpTable",
           "ProfileFacts", "Provenance", "Record", "as_column", "bytes_moved", "combine",
           "group_first_max", "group_rows", "group_sum", "intensity", "is_frame",
           "meta_with_job", "op_from_dict", "records_from_dict", "records_to_dict",
           "replace_records", "stable_largest", "summarize", "table_from_doc"]
