import sys
from pathlib import Path

# Let the tests import wseplan from the checkout when it is not installed.
_ROOT = Path(__file__).resolve().parents[2]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))
