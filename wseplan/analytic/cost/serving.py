"""Serving: $/M tokens and J/token for input and output, owned or rented by the hour (pure numpy functions)."""
from __future__ import annotations

import numpy as np

from .tco import S_PER_HOUR


def serving_cost(*, usd_per_busy_hour, busy_it_power_w, pue, prefill_s, prompt_tokens, decode_step_s,
                 output_tokens_per_step):
    """$/M tokens and J/token for serving, input and output split by the time each takes.

    Parameters
    ----------
    usd_per_busy_hour : array_like
        Cost of one busy hour of the whole serving deployment [USD/h].
    busy_it_power_w : array_like
        IT power drawn while busy [W].
    pue : array_like
        Power usage effectiveness [-].
    prefill_s : array_like
        Time to prefill ``prompt_tokens`` prompt tokens (the whole batch) [s].
    prompt_tokens : array_like
        Prompt tokens processed in ``prefill_s`` [tokens].
    decode_step_s : array_like
        Time of one decode step of the batch [s].
    output_tokens_per_step : array_like
        Output tokens one decode step emits (the batch) [tokens].

    Returns
    -------
    dict of arrays
        ``input_usd_per_mtok``, ``output_usd_per_mtok`` [USD per 1e6 tokens];
        ``energy_j_per_input_token``, ``energy_j_per_output_token`` [J, at the facility meter, incl. PUE].

    Notes
    -----
    cost per token = (USD/h / 3600) x seconds the deployment spends on that token; energy = P_busy PUE t.
    """
    usd_per_s = np.asarray(usd_per_busy_hour, dtype=float) / S_PER_HOUR
    s_in = _per_token(prefill_s, prompt_tokens)
    s_out = np.asarray(decode_step_s, dtype=float) / output_tokens_per_step
    facility_w = busy_it_power_w * pue
    return {
        "input_usd_per_mtok": usd_per_s * s_in * 1e6,
        "output_usd_per_mtok": usd_per_s * s_out * 1e6,
        "energy_j_per_input_token": facility_w * s_in,
        "energy_j_per_output_token": facility_w * s_out,
    }



def _per_token(seconds, tokens):
    """Seconds per token [s]; NaN (no warning) where no tokens were processed (a decode-only question has no prompt)."""
    t = np.asarray(seconds, dtype=float)
    n = np.asarray(tokens, dtype=float)
    t, n = np.broadcast_arrays(t, n)
    out = np.divide(t, n, out=np.full(t.shape, np.nan), where=n > 0)
    return out if out.ndim else out[()]


def rental_serving_cost(*, cloud_usd_per_device_hour, num_devices, prefill_s, prompt_tokens, decode_step_s,
                        output_tokens_per_step):
    """$/M tokens when the same devices are rented by the hour (paid only while busy).

    Parameters
    ----------
    cloud_usd_per_device_hour : array_like
        Rental price per device (GPU) hour [USD/h].
    num_devices : array_like
        Devices the deployment uses [count].
    prefill_s, prompt_tokens, decode_step_s, output_tokens_per_step
        As for :func:`serving_cost`.

    Returns
    -------
    dict of arrays
        ``rental_usd_per_hour``, ``rental_input_usd_per_mtok``, ``rental_output_usd_per_mtok``.
    """
    per_hour = np.asarray(cloud_usd_per_device_hour, dtype=float) * num_devices
    usd_per_s = per_hour / S_PER_HOUR
    return {
        "rental_usd_per_hour": per_hour,
        "rental_input_usd_per_mtok": usd_per_s * _per_token(prefill_s, prompt_tokens) * 1e6,
        "rental_output_usd_per_mtok": usd_per_s * np.asarray(decode_step_s, dtype=float) / output_tokens_per_step * 1e6,
    }
