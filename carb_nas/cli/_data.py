"""``carb-nas dataset``: export a campaign, merge passes, a campaign's status, shipped datasets."""

from __future__ import annotations

import click

from carb_nas.cli._options import (
    echo_json,
    example,
    info,
    json_option,
    output_option,
    storage_option,
)

__all__ = ["COMMANDS"]


@click.group("dataset")
def dataset_group() -> None:
    """Measured datasets: export a campaign, merge passes, list the shipped datasets."""


@dataset_group.command("export")
@click.argument("campaign", type=click.Path(file_okay=False))
@output_option("rows.csv or rows.parquet", required=True)
@storage_option()
@click.option("--ok-only", is_flag=True, help="Only rows with status ok.")
@click.option(
    "--salvage",
    is_flag=True,
    help="Read rows line by line from a corrupted journal (skips broken lines).",
)
@json_option("Print what was written (rows, path, counts per status) as JSON on stdout.")
@example("carb-nas dataset export campaigns/cpu -o rows.csv --ok-only")
def export_cmd(
    campaign: str, output: str, storage: str | None, ok_only: bool, salvage: bool, as_json: bool
) -> None:
    """Write the measured rows of CAMPAIGN (columns per carb_nas.datasets.SCHEMA).

    Reads the campaign only: nothing in CAMPAIGN or its storage is created or changed.
    """
    from carb_nas.datasets import write_table
    from carb_nas.measure.campaign import campaign_rows, salvage_rows

    if salvage:
        frame = salvage_rows(campaign)
    else:
        frame = campaign_rows(campaign, storage)
    if ok_only:
        frame = frame[frame["status"] == "ok"].reset_index(drop=True)
    write_table(frame, output)
    counts = {str(k): int(v) for k, v in sorted(frame["status"].value_counts().items())}
    info(f"wrote {len(frame)} rows to {output} " + ", ".join(f"{k}={v}" for k, v in counts.items()))
    if as_json:
        echo_json({"output": output, "rows": len(frame), "status_counts": counts})


@dataset_group.command("merge")
@click.argument("passes", nargs=-1, required=True, type=click.Path(dir_okay=False))
@output_option("rows.csv or rows.parquet", required=True)
@json_option("Print what was written (rows, passes, path) as JSON on stdout.")
@example("carb-nas dataset merge pass1.csv pass2.csv pass3.csv -o rows.csv")
def merge_cmd(passes: tuple[str, ...], output: str, as_json: bool) -> None:
    """One row per config from independent passes (row tables): the median-latency ok row.

    For example three exports of campaigns that measured the same configs at different times:
    with three passes each config keeps its middle measurement (a real row). Every pass must be
    of one platform.
    """
    from carb_nas.datasets import median_of_passes, read_table, write_table

    frame = median_of_passes([read_table(p) for p in passes], list(passes))
    write_table(frame, output)
    info(f"wrote {len(frame)} rows to {output} (median-latency row of {len(passes)} passes)")
    if as_json:
        echo_json({"rows": len(frame), "passes": len(passes), "output": output})


@dataset_group.command("status")
@click.argument("campaign", type=click.Path(file_okay=False))
@storage_option()
@json_option("Print the counts and the manifest as JSON on stdout.")
@example("carb-nas dataset status campaigns/cpu --json")
def status_cmd(campaign: str, storage: str | None, as_json: bool) -> None:
    """Progress of CAMPAIGN: total, done, waiting, running, ok, oom, error, latency CVs.

    Reads the campaign only: nothing in CAMPAIGN or its storage is created or changed.
    """
    from carb_nas.measure.campaign import campaign_status

    status = campaign_status(campaign, storage)
    if as_json:
        echo_json(status)
        return
    platform = (status.get("manifest") or {}).get("platform", "?")
    median = status["latency_cv_median"]
    click.echo(
        f"{platform}: {status['done']}/{status['total']} configs done, {status['waiting']} "
        f"waiting, {status['running']} running; rows ok={status['ok']} oom={status['oom']} "
        f"error={status['error']}; latency CV median "
        + ("n/a" if median is None else f"{median:.3f}")
        + f", {status['cv_above_0.10']} above 0.10"
    )


@dataset_group.command("list")
@click.option(
    "--source",
    "source",
    type=click.Choice(["all", "measured", "published"]),
    default="all",
    show_default=True,
    help="measured: our own measurements; published: others' benchmarks shipped read-only "
    "(timm's GPU/CPU inference benchmarks and ImageNet accuracies).",
)
@json_option("Print a JSON list, one object per shipped dataset (with its source).")
@example("carb-nas dataset list --source published --json")
def list_cmd(source: str, as_json: bool) -> None:
    """The datasets shipped with carb_nas: measured (named PLATFORM/CONFIGS@MACHINE_KIND, a
    bare PLATFORM their default; a load takes the name in the first column), the machine
    kinds that measured them, and published ones."""
    from carb_nas.datasets import MACHINE_KINDS, list_datasets, list_published

    items = []
    if source in ("all", "measured"):
        items += [{**d, "source": "measured"} for d in list_datasets()]
    if source in ("all", "published"):
        items += list_published()
    if as_json:
        echo_json(items)
        return
    if not items:
        click.echo("no shipped datasets")
    if source in ("all", "measured"):
        click.echo("machine kinds:")
        for k in MACHINE_KINDS.values():
            isa = " ".join(k.isa) or "-"
            click.echo(f"  {k.id:<16} {k.vendor:<12} {k.cpu_model:<28} {k.family_model}; {isa}")
        click.echo("datasets:")
    for d in items:
        if d["source"] == "published":
            what = f"{d.get('device_name') or d['kind']}"
            alias = f" (= {d['alias']})" if d.get("alias") else ""
            click.echo(
                f"{d['platform']:<46} {d['rows']:>6} rows  source=published  {what}"
                f"{alias}  {d['repository']}@{d['commit'][:12]}:{d['upstream_path']}"
            )
            continue
        click.echo(
            f"{d['name']:<42} {d['rows']:>6} rows  source=measured  "
            f"energy={str(d['energy_j']).lower()}  {d['device_name']}  {d['path']}"
        )


COMMANDS: list = [dataset_group]
