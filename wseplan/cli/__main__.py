"""``python -m wseplan.cli ...`` runs the command line."""
from . import console

console()
