"""A software profile variant runs its engine's calibrated constants (``calibrated_as``); a name that is no profile of
its family is refused with one line naming the field."""
from types import SimpleNamespace

import pytest
import yaml

from wseplan.calibration_data import calibration_path, profile_constants, read_gpu_efficiency
from wseplan.catalog.load import default_catalog_dir, load_catalog
from wseplan.catalog.software import calibrated_name, load_software, resolve_software
from wseplan.errors import CatalogError


def test_variants_run_the_engines_fitted_constants():
    cat = load_catalog()
    prod = resolve_software("gpu-production", "gpu", cat)
    spec = resolve_software("gpu-production-specdec", "gpu", cat)
    assert calibrated_name(spec) == "gpu-production" == calibrated_name(prod)
    assert calibrated_name(prod.model_copy(update={"name": "gpu-production+speculative"})) == "gpu-production"
    assert calibrated_name(prod.model_copy(update={"name": "gpu-production/static"})) == "gpu-production"
    fitted = read_gpu_efficiency(calibration_path()).profiles.get("gpu-production", {})
    a, b = profile_constants(prod), profile_constants(spec)
    for k, q in fitted.items():  # the fitted values, not the variant's stated priors
        assert a[k] == b[k] == pytest.approx(q.si, rel=1e-12)


def test_unknown_calibrated_as_is_refused(tmp_path):
    (tmp_path / "software").mkdir()
    prof = yaml.safe_load(open(default_catalog_dir() / "software" / "profiles.yaml"))["software"]["gpu-production-specdec"]
    prof["calibrated_as"] = "no-such-profile"
    (tmp_path / "software" / "mine.yaml").write_text(yaml.safe_dump({"software": {"my-specdec": prof}}))
    with pytest.raises(CatalogError, match="calibrated_as"):
        load_software(SimpleNamespace(extra_dirs=[str(tmp_path)]))
