"""Training: $ and J for one run of a given number of tokens (a pure numpy function)."""
from __future__ import annotations

import numpy as np

from .tco import S_PER_HOUR


def training_cost(*, usd_per_busy_hour, busy_it_power_w, pue, step_s, tokens_per_step, train_tokens):
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

    Returns
    -------
    dict of arrays
        ``run_s`` [s], ``usd_per_run`` [USD], ``energy_j_per_run`` [J, incl. PUE],
        ``energy_j_per_train_token`` [J], ``usd_per_mtok_trained`` [USD per 1e6 tokens].

    Notes
    -----
    run_s = train_tokens / tokens_per_step x step_s; usd = run_s / 3600 x USD/h; J = P_busy PUE run_s.
    """
    run_s = np.asarray(train_tokens, dtype=float) / tokens_per_step * step_s
    usd = run_s / S_PER_HOUR * usd_per_busy_hour
    energy = busy_it_power_w * pue * run_s
    return {
        "run_s": run_s,
        "usd_per_run": usd,
        "energy_j_per_run": energy,
        "energy_j_per_train_token": energy / train_tokens,
        "usd_per_mtok_trained": usd / train_tokens * 1e6,
    }
