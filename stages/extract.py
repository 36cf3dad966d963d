"""`python -m stages.extract <study> <unit> [--profile P]`: one extract unit of a study (see pipeline.stage)."""

import sys

from pipeline.stage import main
from stages import finish

if __name__ == "__main__":
    sys.exit(finish(main("extract")))
