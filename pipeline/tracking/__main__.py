"""``python -m pipeline.tracking sync [--follow [--interval S]] | resolve KEY``."""

import sys

from pipeline.tracking.sync import main

sys.exit(main())
