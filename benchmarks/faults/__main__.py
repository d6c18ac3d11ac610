"""``python -m benchmarks.faults``: see the package's docstring."""

import sys

from .cli import main

sys.exit(main())
