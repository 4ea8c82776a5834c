"""``python -m specdec_lib.hardware``: see `specdec_lib.hardware.profiling.main`."""

import sys

from .profiling import main

sys.exit(main())
