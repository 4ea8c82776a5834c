"""``python -m specdec_lib.distill``: see `specdec_lib.distill.runs.main`."""

import sys

from .runs import main

sys.exit(main())
