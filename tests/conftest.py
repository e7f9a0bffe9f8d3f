import os

import pytest
from hypothesis import settings

from wseplan.catalog import load_catalog

# property tests draw the same examples on every run and machine (a CI run must not turn red by chance: a random draw
# once found a capacity test's tolerance the brute force did not share); no example database is written
settings.register_profile("wseplan", derandomize=True, database=None)
settings.load_profile("wseplan")


@pytest.fixture(scope="session", autouse=True)
def _parse_cache_dir(tmp_path_factory):
    """The parse cache of the bundled catalog (wseplan/catalog/parse_cache.py) lives in this run's temporary folder,
    not in the user's ~/.cache (CLI processes the tests start inherit it)."""
    if "WSEPLAN_CACHE_DIR" in os.environ:
        yield
        return
    os.environ["WSEPLAN_CACHE_DIR"] = str(tmp_path_factory.mktemp("wseplan-cache"))
    yield
    os.environ.pop("WSEPLAN_CACHE_DIR", None)


@pytest.fixture(scope="session")
def catalog():
    return load_catalog()
