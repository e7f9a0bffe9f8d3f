"""Owning a deployment: capex, maintenance, electricity and facility per year and per hour, power, MemoryX capex.

Pure keyword-only numpy functions: scalars or arrays alike (the nominal case, a Monte Carlo sample, a tornado).
Units: USD, W, h (hours only inside ``*_per_hour`` names), kWh only in ``electricity_usd_per_kwh``.
"""
from __future__ import annotations

import numpy as np

#: hours in a Julian year (365.25 d) [h]; a unit definition, not a catalog input
HOURS_PER_YEAR = 8766.0
#: seconds per hour [s]
S_PER_HOUR = 3600.0


def deployment_cost(*, num_systems, capex_per_system_usd, network_frac, extra_capex_usd, installation_frac,
                    amortization_years, maintenance_frac_per_year, peak_power_per_system_w, busy_power_frac,
                    idle_power_frac, utilization_frac, pue, electricity_usd_per_kwh, facility_usd_per_kw_month,
                    extra_peak_power_w=0.0, cost_of_capital_frac_per_year=0.0):
    """Annual and hourly cost of owning ``num_systems`` systems of one type.

    Parameters
    ----------
    num_systems : array_like
        Systems (CS-3) or nodes (8-GPU servers) [count].
    capex_per_system_usd : array_like
        Purchase price of one system or node [USD].
    network_frac : array_like
        Scale-out fabric (InfiniBand, SwarmX/Ethernet) as a share of system capex [fraction].
    extra_capex_usd : array_like
        Capex shared by the deployment (MemoryX) [USD].
    installation_frac : array_like
        One-time installation as a share of hardware capex, amortised with it [fraction].
    amortization_years : array_like
        Depreciation period [years].
    cost_of_capital_frac_per_year : array_like
        The buyer's cost of capital [fraction/year]: the capex is paid back over ``amortization_years`` at this rate
        (capital recovery factor ``r / (1 - (1 + r)^-n)``); 0 is straight-line depreciation, ``1 / n`` a year.
    maintenance_frac_per_year : array_like
        Annual maintenance as a share of hardware capex [fraction/year].
    peak_power_per_system_w : array_like
        Peak IT power of one system or node [W].
    extra_peak_power_w : array_like
        Peak IT power shared by the deployment (a weight-streaming cluster's MemoryX, SwarmX and input servers) [W];
        drawn in the same busy/idle proportions as the systems.
    busy_power_frac, idle_power_frac : array_like
        Average draw while busy / idle as a share of peak [fraction].
    utilization_frac : array_like
        Share of hours the deployment does paid work [fraction, (0, 1]].
    pue : array_like
        Power usage effectiveness (facility power / IT power) [-].
    electricity_usd_per_kwh : array_like
        Electricity price [USD/kWh].
    facility_usd_per_kw_month : array_like
        Facility (colocation) charge per kW of provisioned peak IT power [USD/(kW month)].

    Returns
    -------
    dict of arrays
        ``hardware_capex_usd``, ``capex_usd`` (incl. installation), ``capex_usd_per_year``,
        ``maintenance_usd_per_year``, ``electricity_usd_per_year``, ``facility_usd_per_year``,
        ``total_usd_per_year``, ``usd_per_hour`` (per wall-clock hour owned), ``usd_per_busy_hour``,
        ``peak_it_power_w``, ``average_it_power_w``, ``busy_it_power_w``, ``peak_facility_power_w``.

    Notes
    -----
    hardware = n capex (1 + network) + extra;  capex = hardware (1 + installation);
    per year: capex x CRF(r, years) (capex / years at r = 0) + hardware maintenance + P_avg PUE 8766 h price + P_peak facility 12;
    P_peak = n P_system + P_extra;
    P_avg = P_peak (u busy + (1 - u) idle). The cost of an hour of paid work is the yearly total over
    8766 u hours.

    References
    ----------
    Epoch AI, training-cost-trends (energy.py: PUE and average draw at 75% of server TDP), 2024.
    """
    n = np.asarray(num_systems, dtype=float)
    hardware = n * capex_per_system_usd * (1.0 + network_frac) + extra_capex_usd
    capex = hardware * (1.0 + installation_frac)
    r = np.asarray(cost_of_capital_frac_per_year, dtype=float)
    years = np.asarray(amortization_years, dtype=float)
    crf = np.where(r > 0, r / -np.expm1(-years * np.log1p(np.where(r > 0, r, 1.0))), 1.0 / years)
    capex_per_year = capex * crf
    maintenance = hardware * maintenance_frac_per_year
    peak_w = n * peak_power_per_system_w + extra_peak_power_w
    avg_w = peak_w * (utilization_frac * busy_power_frac + (1.0 - utilization_frac) * idle_power_frac)
    electricity = avg_w * pue / 1000.0 * HOURS_PER_YEAR * electricity_usd_per_kwh
    facility = peak_w / 1000.0 * facility_usd_per_kw_month * 12.0
    total = capex_per_year + maintenance + electricity + facility
    per_hour = total / HOURS_PER_YEAR
    return {
        "hardware_capex_usd": hardware,
        "capex_usd": capex,
        "capex_usd_per_year": capex_per_year,
        "maintenance_usd_per_year": maintenance,
        "electricity_usd_per_year": electricity,
        "facility_usd_per_year": facility,
        "total_usd_per_year": total,
        "usd_per_hour": per_hour,
        "usd_per_busy_hour": per_hour / utilization_frac,
        "peak_it_power_w": peak_w,
        "average_it_power_w": avg_w,
        "busy_it_power_w": peak_w * busy_power_frac,
        "peak_facility_power_w": peak_w * pue,
    }



def memoryx_capex_usd(*, capacity_bytes, dram_capacity_bytes, dram_usd_per_tb, flash_usd_per_tb):
    """Capex of a MemoryX option: its DRAM tier (up to ``dram_capacity_bytes``) and the flash beyond [USD]."""
    cap = np.asarray(capacity_bytes, dtype=float)
    dram = np.minimum(cap, dram_capacity_bytes)
    return dram / 1e12 * dram_usd_per_tb + (cap - dram) / 1e12 * flash_usd_per_tb


def cluster_nodes(*, num_systems, capacity_bytes, dram_capacity_bytes, min_nodes, node_dram_bytes, node_flash_bytes,
                  nodes_per_system):
    """CPU servers of a weight-streaming cluster [count]: MemoryX's DRAM servers (at least ``min_nodes``, one per
    ``node_dram_bytes`` of the option's DRAM tier), its flash servers (one per ``node_flash_bytes`` beyond), and
    ``nodes_per_system`` per system (SwarmX, input workers, activation servers).

    ALCF's four-CS-3 cluster (12 x 1128 GiB MemoryX nodes in use per job, 8 SwarmX, 4 worker and 4 activation nodes)
    gives 12 + 4 x 4 = 28 for its 12 TB option.
    """
    cap = np.asarray(capacity_bytes, dtype=float)
    dram = np.minimum(cap, dram_capacity_bytes)
    mx = np.maximum(min_nodes, np.ceil(dram / node_dram_bytes - 1e-9)) + np.ceil((cap - dram) / node_flash_bytes - 1e-9)
    return mx + np.ceil(np.asarray(num_systems, dtype=float) * nodes_per_system - 1e-9)


def tco_scope_note(*, amortization_years: float, cost_of_capital_frac_per_year: float) -> str:
    """What the TCO behind every dollar figure holds and what it leaves out (audit33a M5), one sentence for ``cost``,
    ``compare`` and ``fleet``: hardware capex over ``amortization_years`` [years] at ``cost_of_capital_frac_per_year``
    [1/year], maintenance, electricity at the site's PUE and facility space; no staff, software licences and support
    (NVIDIA AI Enterprise is sold per GPU per year), storage and front-end network, insurance, taxes or residual value."""
    r = cost_of_capital_frac_per_year
    return (f"TCO: hardware capex over {amortization_years:g} years at a {r:.0%} cost of capital"
            + (" (a cash purchase: --set cost_of_capital_frac_per_year=0.08 for a financed one)" if r == 0 else "")
            + ", maintenance, electricity (PUE) and facility space; it leaves out staff, software licences and support, "
              "storage and front-end network, insurance, taxes and residual value: add them for a budget")

