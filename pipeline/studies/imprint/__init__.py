"""imprint: a glyph stamped into an MLP's init, trained with Adam and with Muon (seed 000)."""
