"""``python -m dfit_nb`` is ``dfit-nb``."""

import sys

from .cli import main

sys.exit(main())
