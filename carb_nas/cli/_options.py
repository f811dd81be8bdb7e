"""Shared option decorators: one spelling per concept across every command.

| concept            | spelling                        | notes                                    |
|--------------------|---------------------------------|------------------------------------------|
| output file / dir  | ``-o/--output``                 | what the command produces                |
| report directory   | ``--report DIR``                | README.md, JSON and PNG plots            |
| a cost model       | ``--model``                     | saved model dir or shipped platform name |
| two-stage models   | ``--source/--target``           | search, screen, published screen         |
| calibration        | ``--uncalibrated``              | this machine's is applied by default     |
| how many configs   | ``--max-configs``               | validate, search, profile, loadgen       |
| INT8 data          | ``--quantization-data FILE``    | static INT8's calibration batches (.npy) |
| Optuna storage     | ``--storage`` / ``CARB_NAS_STORAGE`` | as Optuna's CLI has OPTUNA_STORAGE  |
| CPU threads        | ``--threads``                   | profiler intra-op threads, learner jobs  |
| runtime, precision | ``--runtime`` / ``--precision`` | what ``measure.SUPPORTED`` holds         |
| random seed        | ``--seed`` (an int >= 0)        | a count of draws is ``--repeats``        |
| machine output     | ``--json``                      | results on stdout, progress on stderr    |

Results go to stdout; progress, notes and "wrote ..." lines to stderr (:func:`info`).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from typing import Any, TypeVar

import click

#: where ``--storage`` falls back to (carb_nas.storage.STORAGE_ENV, written out here so that
#: --help imports nothing heavy; tests/test_cli_main.py checks they agree)
STORAGE_ENV = "CARB_NAS_STORAGE"

F = TypeVar("F", bound=Callable[..., Any])

__all__ = [
    "STORAGE_ENV",
    "echo_json",
    "info",
    "json_option",
    "output_option",
    "report_option",
    "model_option",
    "storage_option",
    "threads_option",
    "seed_option",
    "example",
    "runtime_option",
    "precision_option",
    "PLATFORM_PRECISIONS",
    "uncalibrated_option",
    "max_configs_option",
    "source_target_options",
    "quantization_data_option",
    "renamed_option",
    "load",
    "say_provenance",
    "EXAMPLES",
]

#: every command's ``--help`` example, by the function it documents (run by
#: tests/test_cli_examples.py)
EXAMPLES: dict[str, str] = {}


def echo_json(value: Any) -> None:
    """Print strict JSON (NaN and inf become null) on stdout."""
    from carb_nas._json import jsonable

    click.echo(json.dumps(jsonable(value), indent=None, allow_nan=False))


def info(msg: str) -> None:
    """Progress, notes and "wrote ..." lines: stderr, so stdout stays the result."""
    click.echo(msg, err=True)


def json_option(help: str = "Print the result as JSON on stdout.") -> Callable[[F], F]:
    return click.option("--json", "as_json", is_flag=True, help=help)


def output_option(
    help: str, *, required: bool = False, dir_okay: bool = False, dest: str = "output", **kw: Any
) -> Callable[[F], F]:
    """``-o/--output``: the file (or directory, ``dir_okay=True``) the command produces."""
    path = click.Path(dir_okay=dir_okay, file_okay=not dir_okay)
    return click.option("-o", "--output", dest, required=required, type=path, help=help, **kw)


def report_option(
    help: str = "Write README.md, JSON and PNG plots into this directory.",
) -> Callable[[F], F]:
    return click.option(
        "--report", "report_dir", default=None, type=click.Path(file_okay=False), help=help
    )


def model_option(
    flag: str = "--model",
    dest: str = "model",
    *,
    required: bool = False,
    default: str | None = None,
    help: str = "A saved model directory or a shipped platform name (cpu/torch/fp32).",
) -> Callable[[F], F]:
    return click.option(
        flag, dest, required=required, default=default, help=help, show_default=default is not None
    )


def storage_option(
    help: str = "Optuna storage URL (journal:PATH, sqlite:///x.db, postgresql://...); "
    f"default ${STORAGE_ENV}, else a journal file.",
) -> Callable[[F], F]:
    return click.option("--storage", default=None, envvar=STORAGE_ENV, help=help)


def threads_option(
    help: str = "CPU threads (default: the command's own).", default: int | None = None
) -> Callable[[F], F]:
    return click.option(
        "--threads",
        type=click.IntRange(min=1, max=1024),
        default=default,
        help=help,
        show_default=default is not None,
    )


def seed_option(help: str = "Random seed (an integer >= 0).", default: int = 0) -> Callable[[F], F]:
    return click.option(
        "--seed",
        type=click.IntRange(min=0, max=2**32 - 1),
        default=default,
        show_default=True,
        help=help,
    )


#: (device kind, runtime) -> precisions, as ``carb_nas.measure.SUPPORTED`` holds them (written
#: out here so that --help imports no torch; tests/test_cli_validate_scenario.py checks them)
PLATFORM_PRECISIONS: dict[tuple[str, str], tuple[str, ...]] = {
    ("cpu", "torch"): ("fp32", "bf16", "int8-dynamic"),
    ("cpu", "onnxruntime"): ("fp32", "int8", "int8-dynamic", "fp16"),
    ("cpu", "openvino"): ("fp32", "int8", "bf16", "fp16"),
    ("cpu", "litert"): ("fp32", "fp16", "int8"),
    ("cuda", "torch"): ("fp32", "fp16", "bf16"),
    ("cuda", "onnxruntime"): ("fp32",),
}


def runtime_option(help: str | None = None) -> Callable[[F], F]:
    runtimes = " | ".join(dict.fromkeys(r for _, r in PLATFORM_PRECISIONS))
    return click.option(
        "--runtime", default="torch", show_default=True, help=help or f"{runtimes}."
    )


def precision_option(help: str | None = None) -> Callable[[F], F]:
    """``--precision``; its help lists every runtime's precisions (int8: static quantization
    with a calibration set, int8-dynamic: weights only / activations at run time)."""
    parts = []
    for kind in dict.fromkeys(k for k, _ in PLATFORM_PRECISIONS):
        runs = [f"{r} {'/'.join(p)}" for (k, r), p in PLATFORM_PRECISIONS.items() if k == kind]
        parts.append(f"{kind}: " + ", ".join(runs))
    return click.option(
        "--precision", default="fp32", show_default=True, help=help or "; ".join(parts) + "."
    )


def uncalibrated_option() -> Callable[[F], F]:
    return click.option(
        "--uncalibrated",
        is_flag=True,
        help="Predict with the shipped model as it is: without this machine's calibration "
        "(`carb-nas calibrate PLATFORM`), which is applied by default when it exists.",
    )


def max_configs_option(help: str, default: int | None = None) -> Callable[[F], F]:
    return click.option(
        "--max-configs",
        type=click.IntRange(min=1),
        default=default,
        show_default=default is not None,
        help=help,
    )


def source_target_options(
    *, required: bool = False, source_help: str, target_help: str, **defaults: str
) -> Callable[[F], F]:
    """``--source`` (ranks every candidate) and ``--target`` (re-scores the shortlist)."""

    def deco(f: F) -> F:
        f = click.option(
            "--target",
            required=required,
            default=defaults.get("target"),
            show_default="target" in defaults,
            help=target_help,
        )(f)
        return click.option(
            "--source",
            required=required,
            default=defaults.get("source"),
            show_default="source" in defaults,
            help=source_help,
        )(f)

    return deco


def quantization_data_option() -> Callable[[F], F]:
    return click.option(
        "--quantization-data",
        "quantization_data",
        type=click.Path(dir_okay=False, exists=True),
        default=None,
        help="--precision int8 (static): a .npy of shape (N, 3, H, W) to calibrate the "
        "quantization with, instead of the seeded set.",
    )


def renamed_option(old: str, new: str, *, is_flag: bool = False) -> Callable[[F], F]:
    """A hidden ``old`` spelling that fails in one line naming ``new``."""

    def refuse(ctx: click.Context, param: click.Parameter, value: Any) -> None:
        if value:
            raise click.UsageError(f"{old} is now {new}.", ctx=ctx)

    # a name of its own: the old spelling's derived name may be the new option's destination
    name = "renamed_" + old.lstrip("-").replace("-", "_")
    return click.option(
        old, name, is_flag=is_flag, hidden=True, expose_value=False, callback=refuse, default=None
    )


def load(spec: Any, role: str, uncalibrated: bool = False, *, say: bool = True) -> Any:
    """The predictor ``spec`` names (:func:`carb_nas.predictors.load_predictor`: a platform
    name, a model directory), this machine's calibration applied unless ``uncalibrated``;
    says on stderr what it is and whether it is calibrated (``say=False``: the command says
    it with :func:`say_provenance` once its checks passed, so an error stays one line)."""
    from carb_nas.predictors import load_predictor

    predictor = load_predictor(spec, calibrated=not uncalibrated, role=role)
    if say:
        say_provenance(predictor, role)
    return predictor


def say_provenance(predictor: Any, role: str) -> None:
    """One stderr line: what ``predictor`` is and whether this machine's calibration applies."""
    info(f"{role} {predictor.provenance.describe()}")


def example(text: str) -> Callable[[F], F]:
    """Append one runnable example to a command's ``--help`` (click keeps ``\\b`` blocks as is)."""

    def deco(f: F) -> F:
        EXAMPLES[f"{f.__module__}.{f.__qualname__}"] = text
        # cleandoc first: click dedents by the docstring's own indentation, which an appended
        # unindented block would otherwise break
        doc = inspect.cleandoc(f.__doc__ or "")
        f.__doc__ = f"{doc}\n\n\b\nExample:\n  {text}\n"
        return f

    return deco
