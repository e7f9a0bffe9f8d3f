"""The cost of one case whose times are known: every metric (:func:`evaluate`), its P10/P50/P90 and tornado, and the
record (:class:`CostResult`, ``wseplan cost --format json``)."""
from __future__ import annotations

import math

import numpy as np

from ...catalog.schema import Frozen
from .params import Param, nominal
from .prices import ServicePrice
from .serving import rental_serving_cost, serving_cost
from .tco import S_PER_HOUR, cluster_nodes, deployment_cost, memoryx_capex_usd
from .training import training_cost
from .uncertainty import TornadoRow, monte_carlo, tornado

#: version of the cost record's layout (docs/cli-output.md)
SCHEMA_VERSION = 1


class TimeInputs(Frozen):
    """Time numbers the cost model consumes (from the time model, or given by hand)."""

    phase: str  # "serve" | "train"
    num_devices: int
    num_systems: float  # systems charged: whole for training, a replica's share of a node for serving
    prefill_s: float | None = None
    prompt_tokens: float | None = None
    decode_step_s: float | None = None
    output_tokens_per_step: float | None = None
    step_s: float | None = None
    tokens_per_step: float | None = None
    train_tokens: float | None = None
    #: share of a training run's wall time spent training (interruptions: :func:`.training.goodput_frac`) [fraction]
    goodput_frac: float = 1.0
    #: output tokens the deployment delivers per second at its load, request overheads included (serve, decode) [tokens/s]
    output_tokens_per_s: float | None = None


def deployment_terms(p: dict, num_systems, *, extra_capex_usd=0.0, extra_peak_power_w=0.0) -> dict:
    """The TCO terms of ``num_systems`` systems of inputs ``p`` (:func:`.tco.deployment_cost` with every site input of
    ``p``), beside ``extra_capex_usd`` of other equipment drawing ``extra_peak_power_w``: the one place the inputs meet
    the deployment's cost (:func:`evaluate` and the fleet's system types both take it)."""
    return deployment_cost(num_systems=num_systems, capex_per_system_usd=p["capex_usd"], network_frac=p["network_frac"],
                           extra_capex_usd=extra_capex_usd, installation_frac=p["installation_frac"],
                           amortization_years=p["amortization_years"], maintenance_frac_per_year=p["maintenance_frac_per_year"],
                           peak_power_per_system_w=p["peak_power_w"], busy_power_frac=p["busy_power_frac"],
                           idle_power_frac=p["idle_power_frac"], utilization_frac=p["utilization_frac"], pue=p["pue"],
                           electricity_usd_per_kwh=p["electricity_usd_per_kwh"],
                           facility_usd_per_kw_month=p["facility_usd_per_kw_month"], extra_peak_power_w=extra_peak_power_w,
                           cost_of_capital_frac_per_year=p.get("cost_of_capital_frac_per_year", 0.0))


def evaluate(p: dict, t: TimeInputs) -> dict:
    """All cost metrics for inputs ``p`` (scalars or equal-length arrays) and times ``t``."""
    extra = 0.0
    if "memoryx_capacity_bytes" in p:
        extra = memoryx_capex_usd(capacity_bytes=p["memoryx_capacity_bytes"],
                                  dram_capacity_bytes=p["memoryx_dram_capacity_bytes"],
                                  dram_usd_per_tb=p["memoryx_dram_usd_per_tb"],
                                  flash_usd_per_tb=p["memoryx_flash_usd_per_tb"])
    nodes = extra_w = 0.0
    if "cluster_node_power_w" in p:  # a weight-streaming cluster's CPU servers draw beside the systems
        nodes = cluster_nodes(num_systems=t.num_systems, capacity_bytes=p["memoryx_capacity_bytes"],
                              dram_capacity_bytes=p["memoryx_dram_capacity_bytes"], min_nodes=p["memoryx_min_nodes"],
                              node_dram_bytes=p["memoryx_node_dram_bytes"], node_flash_bytes=p["memoryx_node_flash_bytes"],
                              nodes_per_system=p.get("cluster_nodes_per_system", 0.0))
        extra_w = nodes * np.asarray(p["cluster_node_power_w"], dtype=float)
    d = deployment_terms(p, t.num_systems, extra_capex_usd=extra, extra_peak_power_w=extra_w)
    out = dict(d)
    out["cluster_nodes"] = np.asarray(nodes, dtype=float) + 0.0 * d["capex_usd"]
    out["cluster_peak_power_w"] = np.asarray(extra_w, dtype=float) + 0.0 * d["capex_usd"]
    out["memoryx_capex_usd"] = np.asarray(extra, dtype=float) + 0.0 * d["capex_usd"]
    out["usd_per_system_hour"] = d["usd_per_hour"] / t.num_systems
    out["usd_per_device_hour"] = d["usd_per_hour"] / t.num_devices
    # the systems' rack space and the weight-streaming cluster's CPU servers' (audit28b H3)
    out["rack_units"] = (t.num_systems * np.asarray(p["rack_units"], dtype=float)
                         + np.asarray(nodes, dtype=float) * np.asarray(p.get("cluster_node_rack_units", 0.0), dtype=float))
    out["racks"] = out["rack_units"] / p["rack_units_per_rack"]
    # the model error of the predicted times (true / predicted; 1 = as predicted), sampled with the prices
    f = np.asarray(p.get("model_time_factor", 1.0), dtype=float)
    scaled = lambda x: None if x is None else np.asarray(x, dtype=float) * f  # noqa: E731
    if t.phase == "serve":
        out.update(serving_cost(usd_per_busy_hour=d["usd_per_busy_hour"], busy_it_power_w=d["busy_it_power_w"],
                                pue=p["pue"], prefill_s=scaled(t.prefill_s), prompt_tokens=t.prompt_tokens,
                                decode_step_s=scaled(t.decode_step_s), output_tokens_per_step=t.output_tokens_per_step))
        if t.output_tokens_per_s is not None:
            # all in: the deployment's busy hour over the output tokens it delivers, prompts and waits included
            tps = np.asarray(t.output_tokens_per_s, dtype=float) / f
            out["all_in_usd_per_mtok"] = np.asarray(d["usd_per_busy_hour"], dtype=float) / S_PER_HOUR / tps * 1e6
            out["energy_j_per_output_token_all_in"] = np.asarray(d["busy_it_power_w"], dtype=float) * p["pue"] / tps
        if "cloud_usd_per_device_hour" in p:
            out.update(rental_serving_cost(cloud_usd_per_device_hour=p["cloud_usd_per_device_hour"],
                                           num_devices=t.num_devices, prefill_s=scaled(t.prefill_s),
                                           prompt_tokens=t.prompt_tokens, decode_step_s=scaled(t.decode_step_s),
                                           output_tokens_per_step=t.output_tokens_per_step))
            if t.output_tokens_per_s is not None:  # the rented devices' hour over what they deliver, as all-in owned
                out["rental_all_in_usd_per_mtok"] = out["rental_usd_per_hour"] / S_PER_HOUR / tps * 1e6
    else:
        out.update(training_cost(usd_per_busy_hour=d["usd_per_busy_hour"], busy_it_power_w=d["busy_it_power_w"],
                                 pue=p["pue"], step_s=scaled(t.step_s), tokens_per_step=t.tokens_per_step,
                                 train_tokens=t.train_tokens, goodput=t.goodput_frac))
        if "cloud_usd_per_device_hour" in p:
            run_h = out["run_s"] / S_PER_HOUR
            out["rental_usd_per_hour"] = np.asarray(p["cloud_usd_per_device_hour"], dtype=float) * t.num_devices
            out["rental_usd_per_run"] = out["rental_usd_per_hour"] * run_h
    return out


#: unit of each reported metric
UNITS = {
    "hardware_capex_usd": "USD", "capex_usd": "USD", "memoryx_capex_usd": "USD", "cluster_nodes": "count",
    "cluster_peak_power_w": "W", "capex_usd_per_year": "USD/yr",
    "maintenance_usd_per_year": "USD/yr", "electricity_usd_per_year": "USD/yr", "facility_usd_per_year": "USD/yr",
    "total_usd_per_year": "USD/yr", "usd_per_hour": "USD/h", "usd_per_busy_hour": "USD/h",
    "usd_per_system_hour": "USD/h", "usd_per_device_hour": "USD/h", "peak_it_power_w": "W",
    "average_it_power_w": "W", "busy_it_power_w": "W", "peak_facility_power_w": "W", "rack_units": "U", "racks": "-",
    "input_usd_per_mtok": "USD/Mtok", "output_usd_per_mtok": "USD/Mtok", "all_in_usd_per_mtok": "USD/Mtok",
    "energy_j_per_output_token_all_in": "J", "energy_j_per_input_token": "J",
    "energy_j_per_output_token": "J", "rental_usd_per_hour": "USD/h", "rental_input_usd_per_mtok": "USD/Mtok",
    "rental_output_usd_per_mtok": "USD/Mtok", "rental_all_in_usd_per_mtok": "USD/Mtok", "run_s": "s", "usd_per_run": "USD", "energy_j_per_run": "J",
    "energy_j_per_train_token": "J", "usd_per_mtok_trained": "USD/Mtok", "rental_usd_per_run": "USD",
    "service_input_usd_per_mtok": "USD/Mtok", "service_output_usd_per_mtok": "USD/Mtok",
}


class MetricRow(Frozen):
    metric: str
    unit: str
    value: float
    p10: float | None = None
    p50: float | None = None
    p90: float | None = None


class CostResult(Frozen):
    """The cost record (``wseplan cost --format json``); documented in docs/cli-output.md."""

    schema_version: int = SCHEMA_VERSION
    model: str
    target: str
    hardware: str
    price_key: str
    phase: str
    batch: int
    context: int
    output_tokens: int | None = None
    num_devices: int
    num_systems: int
    headline_metric: str
    headline_value: float
    times: TimeInputs
    metrics: list[MetricRow]
    params: list[Param]
    tornado: list[TornadoRow] = []
    samples: int = 0
    seed: int | None = None
    prices_date: str
    notes: list[str] = []
    plan: dict | None = None
    operating_point: dict | None = None  # serving without a batch: the searched point (wseplan.operating.operating_point)

    def metric(self, name: str) -> float:
        for m in self.metrics:
            if m.metric == name:
                return m.value
        raise KeyError(name)

    def to_row(self) -> dict:
        """Flat scalars: the case and every metric's nominal value (and P10/P50/P90 when sampled)."""
        row = {k: getattr(self, k) for k in ("model", "target", "hardware", "phase", "batch", "context",
                                              "num_devices", "num_systems", "headline_metric", "headline_value")}
        for m in self.metrics:
            row[m.metric] = m.value
            if m.p50 is not None:
                row[f"{m.metric}_p10"], row[f"{m.metric}_p50"], row[f"{m.metric}_p90"] = m.p10, m.p50, m.p90
        return row

    def to_frame(self):
        """Metrics as a DataFrame (one row per metric)."""
        import pandas as pd

        df = pd.DataFrame([m.model_dump() for m in self.metrics])
        df.attrs["prices_date"] = self.prices_date
        return df

    def params_frame(self):
        import pandas as pd

        return pd.DataFrame([p.model_dump() for p in self.params])

    def tornado_frame(self):
        import pandas as pd

        return pd.DataFrame([r.model_dump() for r in self.tornado])


def cost_from_times(params: dict[str, Param], times: TimeInputs, *, model: str, target: str, hardware: str,
                    price_key: str, batch: int, context: int, output_tokens: int | None = None,
                    uncertainty: int = 0, seed: int = 0, prices_date: str = "", service: ServicePrice | None = None,
                    notes: list[str] | None = None, headline_metric: str | None = None, plan: dict | None = None) -> CostResult:
    """Cost of a case whose times are known (pure apart from scipy sampling): metrics, P10/P50/P90, tornado."""
    def fn(p):
        with np.errstate(divide="ignore", invalid="ignore"):
            return evaluate(p, times)

    nom = fn(nominal(params))
    headline = headline_metric or ("usd_per_run" if times.phase != "serve" else "output_usd_per_mtok"
                                   if times.output_tokens_per_s is None else "all_in_usd_per_mtok")
    pct = {}
    if uncertainty:
        pct = {r.metric: r for r in monte_carlo(params, fn, n=uncertainty, seed=seed)}
    rows = []
    for k, v in nom.items():
        if not math.isfinite(float(v)):  # a metric that does not apply to this phase (e.g. input cost of decode)
            continue
        r = pct.get(k)
        rows.append(MetricRow(metric=k, unit=UNITS.get(k, ""), value=float(v), p10=r.p10 if r else None,
                              p50=r.p50 if r else None, p90=r.p90 if r else None))
    if service is not None and times.phase == "serve":
        for k, q in (("service_input_usd_per_mtok", service.input_usd_per_mtok),
                     ("service_output_usd_per_mtok", service.output_usd_per_mtok)):
            rows.append(MetricRow(metric=k, unit="USD/Mtok", value=q.si, p10=None, p50=None, p90=None))
    return CostResult(model=model, target=target, hardware=hardware, price_key=price_key, phase=times.phase,
                      batch=batch, context=context, output_tokens=output_tokens, num_devices=times.num_devices,
                      num_systems=math.ceil(times.num_systems - 1e-9), headline_metric=headline, headline_value=float(nom[headline]),
                      times=times, metrics=rows, params=list(params.values()), tornado=tornado(params, fn, headline),
                      samples=int(uncertainty), seed=seed if uncertainty else None, prices_date=prices_date,
                      notes=list(notes or []), plan=plan)
