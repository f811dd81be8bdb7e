"""Interleaved passes: the fastest of K measurements of each config, for shared machines
(``profile_passes``), and the helpers calibration uses to do the same within a budget.
"""

from carb_nas.measure._passes import (
    check_passes,
    fastest_of_passes,
    pass_spread_pct,
    profile_passes,
)

__all__ = [
    "check_passes",
    "fastest_of_passes",
    "pass_spread_pct",
    "profile_passes",
]
