"""``python -m dfit_nb`` is ``dfit-nb``."""

from .cli import run

run()
