"""Measurement datasets: the row schema, table I/O, the shipped data, validation, merging.

A row is one measured config on one platform (``SCHEMA``). ``load_dataset`` is the one loader
of measured rows (a shipped platform name such as ``cpu/torch/fp32``, a CSV/Parquet path or a
DataFrame), and every table it returns passed ``validate_rows`` -- one strictness rule, see
``carb_nas.datasets._validate``. ``median_of_passes`` merges independent passes of one platform;
``append_rows`` adds rows to a dataset file (one row per config); ``reference_normalized``
divides the machine's momentary speed out of rows that timed the speed probe;
``load_kernel_samples`` reads single-op measurements (kernel samples) of one machine;
``machines`` names the machines a table was measured on (the one notion of "same machine").
Published measurements (timm's GPU/CPU benchmarks and ImageNet accuracies, read-only, never
mixed with ours) are read by ``load_published`` / ``load_published_accuracy`` and refused where
measured rows are needed.
"""

from carb_nas.datasets._kernels import KERNEL_SAMPLE_COLUMNS, load_kernel_samples
from carb_nas.datasets._machine import machine_identity, machines
from carb_nas.datasets._merge import append_rows, check_appendable, median_of_passes
from carb_nas.datasets._published import (
    ACCURACY_COLUMNS,
    BENCHMARK_COLUMNS,
    PUBLISHED_PREFIX,
    PUBLISHED_SCHEMA,
    PublishedDatasetError,
    git_blob_sha1,
    is_published,
    list_published,
    load_published,
    load_published_accuracy,
    model_family,
    parse_benchmark_name,
    published_dir,
    published_inputs,
    read_published_accuracy,
    read_published_benchmark,
    refuse_published,
    resolve_published,
)
from carb_nas.datasets._reference import REFERENCE_SCALED, reference_normalized
from carb_nas.datasets._schema import (
    DEVICES,
    REAL_METERS,
    REQUIRED_COLUMNS,
    SCHEMA,
    STATUSES,
    TARGETS,
)
from carb_nas.datasets._shipped import (
    DEFAULT_QUALIFIER,
    DatasetWarning,
    dataset_path,
    datasets_dir,
    list_datasets,
    load_dataset,
    shipped_names,
    zoo_dir,
)
from carb_nas.datasets._tables import TABLE_SUFFIXES, read_configs, read_table, write_table
from carb_nas.datasets._validate import plain, validate_rows

__all__ = [
    "DEFAULT_QUALIFIER",
    "REFERENCE_SCALED",
    "reference_normalized",
    "KERNEL_SAMPLE_COLUMNS",
    "load_kernel_samples",
    "machine_identity",
    "machines",
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
    "shipped_names",
    "zoo_dir",
    "load_dataset",
    "median_of_passes",
    "check_appendable",
    "append_rows",
    # published measurements (read-only, others' benchmarks; never mixed with ours)
    "PUBLISHED_PREFIX",
    "PUBLISHED_SCHEMA",
    "BENCHMARK_COLUMNS",
    "ACCURACY_COLUMNS",
    "PublishedDatasetError",
    "published_dir",
    "list_published",
    "load_published",
    "load_published_accuracy",
    "resolve_published",
    "is_published",
    "refuse_published",
    "published_inputs",
    "model_family",
    "parse_benchmark_name",
    "read_published_benchmark",
    "read_published_accuracy",
    "git_blob_sha1",
]
