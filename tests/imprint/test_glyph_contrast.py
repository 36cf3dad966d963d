"""The imprint metric the claims read: the glyph's contrast in W2, kept or faded."""

import numpy as np

from pipeline.studies.imprint.extract import glyph_contrast


def test_contrast_is_the_stamp_and_falls_as_the_glyph_fades():
    rng = np.random.default_rng(0)
    bitmap = np.ones((8, 8))
    bitmap[2:6, 3:5] = 0.0  # strokes (ink) are 0, the background 1
    base = rng.normal(0, 1e-3, (8, 8))
    snaps = np.stack([base + 0.4 * bitmap, base + 0.1 * bitmap, base])
    c = glyph_contrast(snaps, bitmap)
    assert np.allclose(c, [0.4, 0.1, 0.0], atol=2e-3)
