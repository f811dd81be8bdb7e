"""Measurement datasets: the row schema, table I/O, the shipped data, validation, merging.

A row is one measured config on one platform (``SCHEMA``). ``load_dataset`` is the one loader
of measured rows (a shipped platform name such as ``cpu/torch/fp32``, a CSV/Parquet path or a
DataFrame), and every table it returns passed ``validate_rows`` -- one strictness rule, see
``carb_nas.datasets._validate``. ``median_of_passes`` merges independent passes of one platform;
``append_rows`` adds rows to a dataset file (one row per config).
"""

from carb_nas.datasets._merge import append_rows, check_appendable, median_of_passes
from carb_nas.datasets._schema import (
    DEVICES,
    REAL_METERS,
    REQUIRED_COLUMNS,
    SCHEMA,
    STATUSES,
    TARGETS,
)
from carb_nas.datasets._shipped import (
    DatasetWarning,
    dataset_path,
    datasets_dir,
    list_datasets,
    load_dataset,
)
from carb_nas.datasets._tables import TABLE_SUFFIXES, read_configs, read_table, write_table
from carb_nas.datasets._validate import plain, validate_rows

__all__ = [
    "SCHEMA",
    "TARGETS",
    "REQUIRED_COLUMNS",
    "STATUSES",
    "REAL_METERS",
    "DEVICES",
    "TABLE_SUFFIXES",
    "read_table",
    "read_configs",
    "write_table",
    "validate_rows",
    "plain",
    "DatasetWarning",
    "datasets_dir",
    "dataset_path",
    "list_datasets",
    "load_dataset",
    "median_of_passes",
    "check_appendable",
    "append_rows",
]
