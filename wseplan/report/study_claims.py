"""The ``claims`` study kind: a claims file checked by :func:`wseplan.claims.check`, with a margin plot."""
from __future__ import annotations

from pathlib import Path

from ..claims import check, load_claims, validated_errors
from ..claims.schema import KIND_UNIT
from ..errors import InputError
from ..model_error import speed_bounds
from ..targets import parse_target
from .markdown import fmt_num
from .plots import VERDICT_COLORS, Marker, Plot, Series
from .study_schema import Study
from .study_sources import entry_sources, model_sources
from .tables import claims_table


def claims_path_inside(base: Path, rel: Path) -> Path:
    """``base / rel`` after resolving symlinks, refused when it leaves the study's folder ``base``.

    A claims file that is (or sits behind) a symlink pointing outside the study folder is refused, so a study
    cannot make wseplan read files from elsewhere; a missing file is left to :func:`load_claims` to report.
    """
    try:
        root = base.resolve(strict=True)
        real = (base / rel).resolve(strict=False)
    except (OSError, RuntimeError):
        raise InputError(f"claims: {str(rel)!r} is a symlink loop; give a claims file inside the study's folder") \
            from None
    if root != real and root not in real.parents:
        raise InputError(f"claims: {str(rel)!r} resolves to {real}, outside the study's folder {root}; copy the "
                         "claims file next to the study")
    return base / rel


def claims_body(st: Study, cat, base: Path) -> dict:
    path = Path(st.claims)
    if path.is_absolute() or ".." in path.parts:
        raise InputError(f"claims: {st.claims!r} must be a relative path inside the study's folder")
    claims = load_claims(claims_path_inside(base, path))
    verdicts = check(claims, catalog=cat)
    table = claims_table(verdicts, texts=[c.text for c in claims])
    counts = {k: sum(v.verdict == k for v in verdicts) for k in ("impossible", "optimistic", "consistent")}
    imp = [v for v in verdicts if v.verdict == "impossible"]
    answer = (f"Of {len(verdicts)} claims, {counts['impossible']} are impossible, {counts['optimistic']} optimistic "
              f"and {counts['consistent']} consistent with physics and wseplan's estimates. "
              + " ".join(f"{v.id} breaks {v.bound} by {fmt_num(v.margin)}x." for v in imp))
    plotted = [v for v in verdicts if v.margin]
    series = []
    for verdict in ("impossible", "optimistic", "consistent"):
        idx = [i for i, v in enumerate(plotted) if v.verdict == verdict]
        if idx:
            series.append(Series(label=verdict, x=[plotted[i].margin for i in idx], y=[i + 1 for i in idx], style="",
                                 marker=True, color=VERDICT_COLORS[verdict]))
    plot = Plot(title="Each claim against its bound or wseplan's estimate",
                xlabel="claim / (bound or estimate), better-is-larger [x]", ylabel="claim", series=series,
                logx=True, markers=[Marker(1.0, "bound or estimate")],
                yticks=[(i + 1, v.id) for i, v in enumerate(plotted)])
    return {"answer": answer, "tables": [table], "plots": {"claims_margin": plot}, "params": {},
            "plot_captions": {"claims_margin": "Margins above 1 mean the claim is better than the bound "
                                               "(impossible) or than wseplan's estimate (optimistic when beyond the "
                                               "validated error)."},
            "extra_sources": _claim_sources(claims, cat), "targets": _claim_targets(claims, cat),
            "assumption_rows": _error_rows(cat), "why": _why(verdicts)}


def _why(verdicts) -> list[tuple[str, str]]:
    """What decides each verdict: the bound an impossible claim breaks, and the value at which each claim would
    change verdict (its margin: the claim divided by the bound or the estimate)."""
    imp = [v for v in verdicts if v.verdict == "impossible"]
    opt = [v for v in verdicts if v.verdict == "optimistic"]
    binds = [f"{v.id}: {v.bound} (margin {fmt_num(v.margin)}x)" for v in imp]

    def at(v, factor: float) -> str:  # the claimed value, as a share, that is `factor` less good
        return fmt_num(100 * factor if KIND_UNIT[v.kind][1] else 100 / factor)  # a time or a power grows; a rate falls

    flips = [(f"{v.id} would be within physics at {at(v, v.margin)}% of its claimed value"
              # the links carry the weights (or gradients) once per step: the batch per step moves this bound (audit29b M5)
              + (f", or at {fmt_num(v.margin)}x the batch per step it states (the bound is paid once per step)"
                 if v.bound == "io_bandwidth" and v.quantity == "train_tokens_per_s" else ""))
             if v.kind != "fits"
             else f"{v.id} would fit if it needed {fmt_num(100 / v.margin)}% of the memory it does" for v in imp
             if v.margin]
    # optimistic: consistent once the claim is within the estimate's error (margin <= 1 + error)
    flips += [f"{v.id} would be consistent with wseplan's estimate at {at(v, v.margin / (1 + (v.error_frac or 0.0)))}% "
              "of its claimed value (or if the estimate's validated error were wider)" for v in opt if v.margin]
    return [("Binding constraints", ("The bounds the impossible claims break: " + "; ".join(binds) + ".") if binds
             else "No claim breaks a physical bound."),
            ("What would flip a verdict", "; ".join(flips) + "." if flips else
             "Every claim is consistent; only a lower bound or a higher estimate would change that."),
            ("Prediction interval", "An 'optimistic' verdict needs the claim to beat wseplan's estimate by more than "
                                    "the validated error of that kind of prediction (the error rows in the inputs "
                                    "table, inside the validated envelope; a claim on a model size, device count, "
                                    "hardware or software outside it is judged with its estimate's widened interval, "
                                    "which each verdict's reason states); 'impossible' rests on catalog bounds, with "
                                    "no model error in it."),
            ("List prices", "Not a cost question: no list price is compared.")]


def _claim_targets(claims, cat) -> list[str]:
    keys = []
    for c in claims:
        if c.target:
            k = parse_target(c.target, cat).key
            if k not in keys:
                keys.append(k)
    return keys


def _error_rows(cat) -> list[dict]:
    """One assumption row per validated category: the held-out interval of measured over predicted speed (the
    band a claim beyond the estimate is judged by is its upper end; a category whose truth was never faster than
    predicted has none, which a single "0%" would hide)."""
    rows = []
    for name, (_, text) in sorted(validated_errors(cat).items()):
        lo, hi, _ = speed_bounds(name)
        rows.append({"input": f"held-out interval of {name} predictions (measured / predicted speed)",
                     "value": f"{lo:.2f}x to {hi:.2f}x", "range": "", "basis": "measured", "source": text})
    return rows


def _claim_sources(claims, cat) -> list[str]:
    ids: list[str] = []
    for c in claims:
        if c.target:
            ids += entry_sources(parse_target(c.target, cat), cat)
        if c.model:
            ids += model_sources(c.model, cat)
    return ids
