"""`python -m stages.render <study> <unit> [--profile P]`: one render unit of a study (see pipeline.stage)."""

import sys

from pipeline.stage import main
from pipeline.writer.figures import ready_renderer, write_render
from stages import finish

if __name__ == "__main__":
    sys.exit(finish(main("render", render_writer=write_render, checks=ready_renderer)))
