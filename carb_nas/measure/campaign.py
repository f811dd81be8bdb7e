"""Resumable campaigns on Optuna's public API: configs (``run_campaign``, ``campaign_rows``),
per-op profiler events (``run_ops_campaign``) and ONNX Runtime's per-node kernel times
(``run_ort_nodes_campaign``), with their status, salvage and argument checks.
"""

from carb_nas.measure._campaign import (
    JOURNAL,
    MANIFEST,
    MAX_CRASHES,
    STUDY_NAME,
    CampaignSummary,
    campaign_rows,
    campaign_status,
    campaign_storage_url,
    check_campaign_args,
    check_heartbeat,
    open_campaign_study,
    order_configs,
    run_campaign,
    salvage_rows,
    select_configs,
)
from carb_nas.measure._ops import (
    match_ops,
    measure_ops,
    read_ops_campaign,
    run_ops_campaign,
)
from carb_nas.measure._ort_nodes import (
    NODE_COLUMNS,
    measure_ort_nodes,
    ort_nodes_fingerprint,
    read_ort_nodes,
    run_ort_nodes_campaign,
)

__all__ = [
    "JOURNAL",
    "MANIFEST",
    "MAX_CRASHES",
    "STUDY_NAME",
    "CampaignSummary",
    "campaign_rows",
    "campaign_status",
    "campaign_storage_url",
    "check_campaign_args",
    "check_heartbeat",
    "open_campaign_study",
    "order_configs",
    "run_campaign",
    "salvage_rows",
    "select_configs",
    "match_ops",
    "measure_ops",
    "read_ops_campaign",
    "run_ops_campaign",
    "NODE_COLUMNS",
    "measure_ort_nodes",
    "ort_nodes_fingerprint",
    "read_ort_nodes",
    "run_ort_nodes_campaign",
]
