"""MLPerf LoadGen scenarios: a ``Workload`` (any model spec on a runtime) run under
``LoadGenSettings`` in resumable run directories (``run_loadgen_campaign``), read back as rows.
"""

from carb_nas.measure._loadgen import (
    RULES,
    SCENARIOS,
    LoadGenSettings,
    LoadGenSummary,
    Workload,
    import_loadgen,
    loadgen_rows,
    parse_detail_log,
    parse_summary,
    run_loadgen_campaign,
    run_scenario,
    why_invalid,
)

__all__ = [
    "RULES",
    "SCENARIOS",
    "LoadGenSettings",
    "LoadGenSummary",
    "Workload",
    "import_loadgen",
    "loadgen_rows",
    "parse_detail_log",
    "parse_summary",
    "run_loadgen_campaign",
    "run_scenario",
    "why_invalid",
]
