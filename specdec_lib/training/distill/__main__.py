"""``python -m specdec_lib.training.distill``: see `specdec_lib.training.distill.runs.main`."""

import sys

from .runs import main

sys.exit(main())
