"""`python -m stages.train <study> <unit>`: the train step of a study (see pipeline.stage)."""

import sys

from pipeline.stage import main

if __name__ == "__main__":
    sys.exit(main("train"))
