"""``carb-nas profile``: measure configs on a platform into a resumable campaign."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from carb_nas.cli._model import model_spec_options, resolve_model_spec
from carb_nas.cli._options import (
    echo_json,
    example,
    info,
    json_option,
    max_configs_option,
    precision_option,
    renamed_option,
    runtime_option,
    seed_option,
    storage_option,
    threads_option,
)

__all__ = ["COMMANDS"]


def _profile_spec(spec, device, runtime, threads, protocol, out_dir, as_json) -> None:  # noqa: ANN001
    """Measure one --model-spec for real into ``out_dir/model_spec_<key>.json``."""
    from carb_nas._io import atomic_write_json, check_writable_dir
    from carb_nas.errors import ConfigError
    from carb_nas.validate import profile_spec

    if runtime != "torch":
        raise ConfigError(
            f"unsupported runtime for --model-spec: expected torch, got {runtime!r}. "
            "Use --runtime torch (a factory's module runs in eager PyTorch)."
        )
    check_writable_dir(Path(out_dir), "output directory", "-o")
    row = profile_spec(spec, device, threads, protocol)
    path = Path(out_dir) / f"model_spec_{spec.key}.json"
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, row)
    info(f"wrote the measurement of {spec.name} to {path}")
    if as_json:
        echo_json(row)
    else:
        click.echo(
            f"{spec.name} input {'x'.join(map(str, spec.input_shape))}: latency "
            f"{row['latency_ms']:.3f} ms, peak {row['peak_mem_mb']:.1f} MB"
        )


@click.command("profile")
@click.argument("configs", metavar="CONFIGS.csv|SPACE.toml", required=False)
@click.option("--device", default="cpu", show_default=True, help="cpu, cuda or cuda:N.")
@runtime_option()
@precision_option()
@click.option(
    "-o",
    "--output",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False),
    help="Campaign directory (created; the same command resumes it).",
)
@max_configs_option("Profile N configs sampled from the source (nested in N for a seed).")
@renamed_option("--limit", "--max-configs")
@renamed_option("--out", "-o/--output")
@seed_option("Sampling/order seed (an integer >= 0).")
@threads_option(
    "Intra-op threads (torch.set_num_threads / ORT intra_op_num_threads), at most the CPUs "
    "this process may use."
)
@click.option(
    "--protocol",
    type=click.Choice(["adaptive", "carb"]),
    default="adaptive",
    show_default=True,
    help="adaptive: until the median's 95% CI is within the "
    "target or the time cap; carb: 10 warmups, 100 runs, 1 s cooldown.",
)
@click.option("--target-ci", type=float, default=None, help="Adaptive CI target (default 0.02).")
@click.option(
    "--time-cap-s",
    type=float,
    default=None,
    help="Adaptive time cap (default 2 s; at least the protocol's 0.15 s timing window).",
)
@click.option(
    "--cooldown-s",
    type=float,
    default=None,
    help="Pause between configs (default 0 adaptive, 1 s carb).",
)
@click.option(
    "--meter",
    type=click.Choice(["auto", "nvml", "rapl", "none"]),
    default="auto",
    show_default=True,
    help="Energy meter; an explicit meter must be readable.",
)
@storage_option(
    "Optuna storage URL for many workers (journal:PATH, sqlite:///x.db, postgresql://...); "
    "default $CARB_NAS_STORAGE, else the one the campaign recorded, else a journal file in -o."
)
@click.option(
    "--max-host-mem-mb",
    type=float,
    default=None,
    help="CPU memory cap: configs whose tensor peak exceeds it are rows with status oom.",
)
@click.option(
    "--stop-after",
    type=click.IntRange(min=1),
    default=None,
    help="Stop after measuring this many configs in this call (resume later).",
)
@click.option(
    "--remeasure-cv-above",
    type=float,
    default=None,
    help="Re-measure done configs whose latency_cv exceeds this (e.g. 0.10); export "
    "keeps the ok row with the lowest CV.",
)
@click.option("--retry-errors", is_flag=True, help="Re-measure done configs with status error.")
@click.option(
    "--max-attempts",
    type=int,
    default=3,
    show_default=True,
    help="Most measurements per config when re-measuring.",
)
@click.option(
    "--lock-sm-clock-mhz",
    type=int,
    default=None,
    help="Opt-in, your own GPU only: lock the SM clock (NVML, needs root); reset "
    "at the end. Default: measure the GPU as found and record its clocks.",
)
@click.option(
    "--wait-quiet-s",
    type=float,
    default=0.0,
    show_default=True,
    help="Before timing each config, wait up to this long until other processes "
    "use < 0.5 CPU core (shared machines: contention inflates medians).",
)
@click.option(
    "--fresh-process",
    is_flag=True,
    help="CPU: measure each config in a new forked process, so no row depends on what ran "
    "before (eager PyTorch's per-call page faults do; see mmap_mb). Slower: one model build "
    "per config.",
)
@click.option(
    "--heartbeat-s",
    type=float,
    default=None,
    help="RDB storages: record a running config's heartbeat this often (default 60 s).",
)
@click.option(
    "--grace-s",
    type=float,
    default=None,
    help="RDB storages: a config silent this long (its worker died) is retried by another "
    "worker (default 180 s, 3 heartbeats).",
)
@click.option("--no-progress", is_flag=True, help="No progress bar.")
@json_option("Print the summary as JSON on stdout.")
@model_spec_options
@example("carb-nas profile search_spaces/resnet.toml --max-configs 2 --threads 1 -o campaigns/cpu")
def profile_cmd(
    configs: str | None,
    device: str,
    runtime: str,
    precision: str,
    out_dir: str,
    max_configs: int | None,
    seed: int,
    threads: int | None,
    protocol: str,
    target_ci: float | None,
    time_cap_s: float | None,
    cooldown_s: float | None,
    meter: str,
    storage: str | None,
    max_host_mem_mb: float | None,
    stop_after: int | None,
    remeasure_cv_above: float | None,
    retry_errors: bool,
    max_attempts: int,
    lock_sm_clock_mhz: int | None,
    wait_quiet_s: float,
    fresh_process: bool,
    heartbeat_s: float | None,
    grace_s: float | None,
    no_progress: bool,
    as_json: bool,
    model_spec: str | None,
    factory_kwargs: str | None,
    input_shape: str | None,
) -> None:
    """Profile CONFIGS (a configs table or a space file) into the campaign directory -o.

    Killed at any moment, the same command continues where it stopped: no row is lost or
    duplicated. Export the rows with `carb-nas dataset export DIR -o rows.csv`. Every option is
    checked before anything is created: a refused command leaves no directory behind.
    """
    from carb_nas.datasets import read_configs
    from carb_nas.errors import ConfigError
    from carb_nas.measure import Protocol, check_platform
    from carb_nas.measure.campaign import check_campaign_args, check_heartbeat, run_campaign
    from carb_nas.space import load_space
    from carb_nas.storage import check_postgres, check_storage_url, resolve_storage_url

    check_platform(device, runtime, precision)  # before reading a large space
    if (configs is None) == (model_spec is None):
        raise ConfigError(
            "nothing to profile: expected CONFIGS or --model-spec (one of them), got "
            f"{'both' if configs else 'neither'}. Pass a configs table/space or a factory."
        )
    spec = resolve_model_spec(model_spec, factory_kwargs, input_shape, precision)
    check_campaign_args(
        threads=threads,
        max_attempts=max_attempts,
        remeasure_cv_above=remeasure_cv_above,
        wait_quiet_s=wait_quiet_s,
        max_configs=stop_after,
        limit=max_configs,
        max_host_mem_mb=max_host_mem_mb,
        lock_sm_clock_mhz=lock_sm_clock_mhz,
    )
    window_s = Protocol.named(protocol).min_time_s
    if time_cap_s is not None and not (time_cap_s > 0 and time_cap_s >= window_s):
        raise ConfigError(
            f"invalid --time-cap-s: expected > 0 and >= {window_s:g} s (the {protocol} "
            f"protocol's minimum timing window), got {time_cap_s:g}. Use --time-cap-s "
            f"{max(window_s, 0.15):g} or more, or drop it (default 2 s)."
        )
    overrides = {"target_ci_rel": target_ci, "time_cap_s": time_cap_s, "cooldown_s": cooldown_s}
    if spec is not None:
        proto = Protocol.named(protocol, **overrides)
        _profile_spec(spec, device, runtime, threads, proto, out_dir, as_json)
        return
    heartbeat_s, grace_s = check_heartbeat(heartbeat_s, grace_s)
    url = resolve_storage_url(storage)
    if url:  # its form (and a PostgreSQL server), before a space is read or anything is made
        check_storage_url(url)
        if url.startswith(("postgresql", "postgres:")):
            check_postgres(url)
    assert configs is not None  # checked above: exactly one of CONFIGS and --model-spec
    frame = read_configs(configs)
    p = Path(configs)
    if p.suffix == ".toml" or not p.exists():
        source = f"space:{load_space(configs).fingerprint}"
    else:
        source = None  # the configs' own fingerprint
    kw: dict[str, Any] = dict(
        device=device,
        runtime=runtime,
        precision=precision,
        threads=threads,
        protocol=protocol,
        protocol_overrides=overrides,
        meter=meter,
        storage=storage,
        source=source,
        seed=seed,
        max_host_mem_mb=max_host_mem_mb,
        max_configs=stop_after,
        remeasure_cv_above=remeasure_cv_above,
        retry_errors=retry_errors,
        max_attempts=max_attempts,
        lock_sm_clock_mhz=lock_sm_clock_mhz,
        wait_quiet_s=wait_quiet_s,
        fresh_process=fresh_process,
        progress=not no_progress,
        heartbeat_s=heartbeat_s,
        grace_s=grace_s,
    )
    summary = run_campaign(frame, out_dir, limit=max_configs, **kw)
    if summary.torn_bytes_cut:
        info(
            f"note: cut a torn last journal record ({summary.torn_bytes_cut} bytes, left by a "
            f"killed worker; kept in {out_dir}/journal.log.torn) before resuming"
        )
    if as_json:
        echo_json(summary.as_dict())
        return
    mean = summary.mean_s_per_config
    click.echo(
        f"{summary.platform}: {summary.done}/{summary.total} configs done "
        f"({summary.measured_now} measured now: {summary.ok} ok, {summary.failed} failed; "
        f"{summary.added} newly queued, {summary.remeasures_queued} re-measures queued, "
        f"{summary.recovered} recovered, {summary.requeued} re-queued) in "
        f"{summary.wall_s:.1f} s"
        + (f", {mean:.2f} s/config" if mean is not None else "")
        + f". Export: carb-nas dataset export {out_dir} -o rows.csv"
    )
    if summary.descheduled:
        from carb_nas.measure import MIN_CPU_PER_WALL, autogroup_hint

        info(
            f"warning: {summary.descheduled} of the rows measured now were timed while other "
            f"processes took the CPU (cpu_per_wall below {MIN_CPU_PER_WALL}: off the core for "
            "more than a tenth of the timing window), so their latency includes the wait. "
            "Stop other work and run the same command with --remeasure-cv-above 0.10 to "
            "measure them again (the row that kept its core is kept)." + autogroup_hint()
        )


COMMANDS: list = [profile_cmd]
