"""The glyph '中' as a 128x128 bitmap in [0, 1]: background 1.0, ink 0.0 (the seed's convention).

``droid`` renders the character with Debian's Droid Sans Fallback exactly as the seed does (Pillow,
canvas 128, font size 0.8*128, anchor (12.8, 0)); the font file is verified by md5 and the result by
ink fraction and bounding box, so a missing or different font is an error, never the silent DejaVu
"tofu" fallback of the seed. ``rectangles`` is a font-free construction, bit-exact on any machine:
five axis-aligned rectangles that match the Droid rendering to within 5 pixels after thresholding.
``auto`` (the default) is ``droid`` where that font is installed and passes the checks, else
``rectangles``; which one was used, and why, is part of :func:`glyph_info` (the stages' provenance).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

SIZE = 128
CHAR = "中"
# Inclusive (row0, row1, col0, col1) ranges of the ink.
RECTANGLES = (
    (24, 116, 60, 67),  # vertical stroke
    (40, 46, 24, 103),  # top bar
    (75, 81, 24, 103),  # middle bar
    (40, 88, 24, 31),  # left post
    (40, 88, 96, 103),  # right post
)
DROID_FONT = Path("/usr/share/fonts/truetype/droid/DroidSansFallbackFull.ttf")
DROID_FONT_MD5 = "ebc9b34d64380c1221b3f8a326475ca8"  # Debian fonts-droid-fallback 1:6.0.1r16
DROID_INK_FRACTION = (0.12, 0.16)  # measured 0.1413
DROID_BBOX = (24, 116, 24, 103)  # rows, cols of the ink (pixels below 0.5), +-2 allowed


class GlyphError(RuntimeError):
    """The glyph cannot be built as specified (font missing or not the expected one)."""


def rectangles_bitmap() -> np.ndarray:
    ink = np.zeros((SIZE, SIZE), dtype=bool)
    for r0, r1, c0, c1 in RECTANGLES:
        ink[r0 : r1 + 1, c0 : c1 + 1] = True
    return (~ink).astype(np.float64)


def ink_stats(bitmap: np.ndarray) -> dict:
    ink = bitmap < 0.5
    rows, cols = np.nonzero(ink)
    bbox = (int(rows.min()), int(rows.max()), int(cols.min()), int(cols.max())) if rows.size else None
    return {"ink_fraction": float(ink.mean()), "bbox": bbox}


def droid_bitmap(font_path: Path = DROID_FONT) -> np.ndarray:
    font_path = Path(font_path)
    if not font_path.is_file():
        raise GlyphError(f"glyph: droid needs {font_path} (Debian package fonts-droid-fallback); it is "
                         "missing. Install it or set imprint.glyph: rectangles")
    got = hashlib.md5(font_path.read_bytes()).hexdigest()
    if got != DROID_FONT_MD5:
        raise GlyphError(f"glyph: droid: {font_path} has md5 {got}, expected {DROID_FONT_MD5} "
                         "(Debian fonts-droid-fallback 1:6.0.1r16)")
    from PIL import Image, ImageDraw, ImageFont

    ratio = 0.8
    img = Image.new("L", (SIZE, SIZE), color=255)
    font = ImageFont.truetype(str(font_path), SIZE * ratio)
    ImageDraw.Draw(img).text((SIZE * (1 - ratio) / 2, 0), CHAR, font=font, fill=0)
    bitmap = np.asarray(img, dtype=np.float64) / 255.0
    stats = ink_stats(bitmap)
    lo, hi = DROID_INK_FRACTION
    if not lo <= stats["ink_fraction"] <= hi:
        raise GlyphError(f"glyph: droid rendering has ink fraction {stats['ink_fraction']:.4f}, expected "
                         f"{lo}..{hi}: the font did not draw {CHAR!r}")
    if stats["bbox"] is None or max(abs(a - b) for a, b in zip(stats["bbox"], DROID_BBOX)) > 2:
        raise GlyphError(f"glyph: droid rendering has ink bbox {stats['bbox']}, expected about {DROID_BBOX}")
    return bitmap


SHAPES = ("auto", "droid", "rectangles")


def resolve_glyph(shape: str, font_path: Path = DROID_FONT) -> tuple[str, np.ndarray, str | None]:
    """(shape used, bitmap, why ``auto`` fell back or None): ``auto`` tries Droid, then the rectangles."""
    if shape == "rectangles":
        return "rectangles", rectangles_bitmap(), None
    if shape == "droid":
        return "droid", droid_bitmap(font_path), None
    if shape == "auto":
        try:
            return "droid", droid_bitmap(font_path), None
        except GlyphError as exc:
            return "rectangles", rectangles_bitmap(), str(exc)
    raise GlyphError(f"glyph: unknown shape {shape!r}; allowed: {', '.join(map(repr, SHAPES))}")


def glyph_bitmap(shape: str) -> np.ndarray:
    """The 128x128 float64 bitmap of '中' (1 = background, 0 = ink)."""
    return resolve_glyph(shape)[1]


def bitmap_sha256(bitmap: np.ndarray) -> str:
    """sha256 of the bitmap as 8-bit grey levels (round(255 * value)), row-major."""
    u8 = np.rint(np.asarray(bitmap, dtype=np.float64) * 255.0).astype(np.uint8)
    return hashlib.sha256(np.ascontiguousarray(u8).tobytes()).hexdigest()


def spectral_norm(a: np.ndarray) -> float:
    """Largest singular value (float64), for the bitmap and for the W2 snapshots."""
    return float(np.linalg.norm(np.asarray(a, dtype=np.float64), ord=2))


def glyph_info(shape: str, scale: float, font_path: Path = DROID_FONT) -> dict:
    """The bitmap of ``shape`` and what provenance records of it: the construction asked for and the
    one used (``auto`` resolves), the font file when one drew it, sha256, scaled spectral norm, ink."""
    used, bitmap, fallback = resolve_glyph(shape, font_path)
    return {"bitmap": bitmap, "shape": used, "requested": shape, "fallback": fallback,
            "font": str(font_path) if used == "droid" else None,
            "font_md5": DROID_FONT_MD5 if used == "droid" else None, "sha256": bitmap_sha256(bitmap),
            "spectral_norm_scaled": spectral_norm(scale * bitmap), **ink_stats(bitmap)}


def provenance(info: dict) -> dict:
    """What a stage's meta records of the glyph (everything but the bitmap)."""
    return {k: v for k, v in info.items() if k != "bitmap"}
