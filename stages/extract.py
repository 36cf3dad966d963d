"""`python -m stages.extract <study> <unit> [--profile P]`: one extract unit of a study (see pipeline.stage)."""

import sys

from pipeline.stage import main

if __name__ == "__main__":
    sys.exit(main("extract"))
