"""Training: $ and J for one run of a given number of tokens (a pure numpy function)."""
from __future__ import annotations

import numpy as np

from .tco import S_PER_HOUR


def goodput_frac(num_devices, *, interruptions_per_device_hour, loss_per_interruption_s):
    """Share of a long training run's wall time spent training [fraction]: a job on ``num_devices`` is interrupted
    ``interruptions_per_device_hour x num_devices`` times an hour (hardware faults and planned maintenance), each
    costing ``loss_per_interruption_s`` (restart, and the work since the last checkpoint), so wall time is the
    training time x ``1 + rate x loss``: ``1 / (1 + rate x loss)``. Llama 3 405B on 16,384 H100: 466 interruptions in
    54 days and over 90% effective training time (Dubey et al. 2024, sec. 3.3.4)."""
    rate = np.asarray(num_devices, dtype=float) * interruptions_per_device_hour / S_PER_HOUR
    return 1.0 / (1.0 + rate * loss_per_interruption_s)


def time_to_train(*, step_s, tokens_per_step, train_tokens, num_gpus, goodput=1.0):
    """Wall time [s] and device-hours [h] to train ``train_tokens`` at ``tokens_per_step`` per ``step_s``, of which
    ``goodput`` (:func:`goodput_frac`) is spent training. A run of fewer tokens than one step still takes one whole step
    (audit37b F6: 1,000 tokens "trained" in 1.9 ms where a step takes 6 s); a longer one is pro-rated."""
    steps = np.maximum(np.asarray(train_tokens, dtype=float) / np.asarray(tokens_per_step, dtype=float), 1.0)
    secs = steps * np.asarray(step_s, dtype=float)
    secs = secs / goodput
    return secs, secs * num_gpus / S_PER_HOUR


def training_cost(*, usd_per_busy_hour, busy_it_power_w, pue, step_s, tokens_per_step, train_tokens, goodput=1.0):
    """$ and J for one training run of ``train_tokens`` tokens.

    Parameters
    ----------
    usd_per_busy_hour : array_like
        Cost of one busy hour of the training deployment [USD/h].
    busy_it_power_w : array_like
        IT power while training [W].
    pue : array_like
        Power usage effectiveness [-].
    step_s : array_like
        Time of one optimizer step [s].
    tokens_per_step : array_like
        Tokens per step (global batch x sequence) [tokens].
    train_tokens : array_like
        Tokens in the run [tokens].
    goodput : array_like
        Share of the run's wall time spent training (:func:`goodput_frac`) [fraction].

    Returns
    -------
    dict of arrays
        ``run_s`` [s], ``usd_per_run`` [USD], ``energy_j_per_run`` [J, incl. PUE],
        ``energy_j_per_train_token`` [J], ``usd_per_mtok_trained`` [USD per 1e6 tokens].

    Notes
    -----
    run_s = train_tokens / tokens_per_step x step_s / goodput; usd = run_s / 3600 x USD/h; J = P_busy PUE run_s (the
    systems stay reserved, and powered, through an interruption).
    """
    run_s = time_to_train(step_s=step_s, tokens_per_step=tokens_per_step, train_tokens=train_tokens, num_gpus=1.0,
                          goodput=goodput)[0]
    usd = run_s / S_PER_HOUR * usd_per_busy_hour
    energy = busy_it_power_w * pue * run_s
    return {
        "run_s": run_s,
        "usd_per_run": usd,
        "energy_j_per_run": energy,
        "energy_j_per_train_token": energy / train_tokens,
        "usd_per_mtok_trained": usd / train_tokens * 1e6,
    }
