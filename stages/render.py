"""`python -m stages.render <study> <unit> [--profile P]`: one render unit of a study (see pipeline.stage)."""

import sys

from pipeline.stage import main
from pipeline.writer.figures import check_settings, write_render
from stages import finish

if __name__ == "__main__":
    sys.exit(finish(main("render", render_writer=write_render, checks=check_settings)))
