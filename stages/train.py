"""`python -m stages.train <study> <unit> [--profile P]`: one train unit of a study (see pipeline.stage)."""

import sys

from pipeline.stage import main
from stages import finish

if __name__ == "__main__":
    sys.exit(finish(main("train")))
