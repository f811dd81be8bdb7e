"""Measurement datasets: the row schema, table I/O, the shipped data, validation, merging.

A row is one measured config on one platform (``SCHEMA``). ``load_dataset`` is the one loader
of measured rows (a shipped dataset name such as ``cpu/torch/fp32`` or
``cpu/torch/fp32/zoo@amd-zen4``, a CSV/Parquet path or a DataFrame), and every table it
returns passed one strictness rule (``carb_nas.datasets._validate``). Every shipped dataset
belongs to one machine kind of ``MACHINE_KINDS`` (``MachineKind``: CPU model and ISA, or the
GPU; the name grammar is in ``carb_nas.datasets._kinds``). ``median_of_passes`` merges
independent passes of one platform; ``append_rows`` adds rows to a dataset file (one row per
config); ``reference_normalized`` divides the machine's momentary speed out of rows that timed
the speed probe; ``load_kernel_samples`` reads single-op measurements of one machine;
``machines`` names the machines a table was measured on (the one notion of "same machine").
Published measurements (timm's GPU/CPU benchmarks and ImageNet accuracies, read-only, never
mixed with ours) are read by ``load_published`` / ``load_published_accuracy`` and refused where
measured rows are needed (``refuse_published``).
"""

from carb_nas.datasets._kernels import load_kernel_samples
from carb_nas.datasets._kinds import MACHINE_KINDS, MachineKind
from carb_nas.datasets._machine import machines
from carb_nas.datasets._merge import append_rows, check_appendable, median_of_passes
from carb_nas.datasets._published import (
    PublishedDatasetError,
    is_published,
    list_published,
    load_published,
    load_published_accuracy,
    published_inputs,
    refuse_published,
    resolve_published,
)
from carb_nas.datasets._reference import reference_normalized
from carb_nas.datasets._schema import SCHEMA, TARGETS
from carb_nas.datasets._shipped import dataset_path, list_datasets, load_dataset, shipped_names
from carb_nas.datasets._tables import TABLE_SUFFIXES, read_configs, read_table, write_table

__all__ = [
    # rows and tables
    "SCHEMA",
    "TARGETS",
    "TABLE_SUFFIXES",
    "read_table",
    "read_configs",
    "write_table",
    # the shipped datasets and the one loader
    "MACHINE_KINDS",
    "MachineKind",
    "dataset_path",
    "list_datasets",
    "load_dataset",
    "shipped_names",
    # merging, appending, the machine
    "median_of_passes",
    "check_appendable",
    "append_rows",
    "reference_normalized",
    "load_kernel_samples",
    "machines",
    # published measurements (read-only, others' benchmarks; never mixed with ours)
    "PublishedDatasetError",
    "list_published",
    "load_published",
    "load_published_accuracy",
    "resolve_published",
    "is_published",
    "refuse_published",
    "published_inputs",
]
