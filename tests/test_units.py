import math

import pytest

from wseplan.errors import InputError
from wseplan.units import parse_quantity


@pytest.mark.parametrize("text,value,dim", [
    ("80 GB", 80e9, "bytes"),
    ("48 KiB", 49152, "bytes"),
    ("3.35 TB/s", 3.35e12, "bytes/s"),
    ("1.2 Tb/s", 150e9, "bytes/s"),  # 12 x 100 GbE = 150 GB/s (cerebras-swarmx-glossary)
    ("989.4 TFLOP/s", 989.4e12, "flop/s"),
    ("1.1 GHz", 1.1e9, "1/s"),
    ("10.2 kW", 10200.0, "W"),
    ("10 us", 1e-5, "s"),
    ("199000 USD", 199000.0, "USD"),
])
def test_parse(text, value, dim):
    v, d = parse_quantity(text)
    assert math.isclose(v, value, rel_tol=1e-12)
    assert d == dim


@pytest.mark.parametrize("bad", ["80 GQ", "fast", "1e400", "nan GB", True, [1]])
def test_parse_rejects(bad):
    with pytest.raises(InputError):
        parse_quantity(bad)
