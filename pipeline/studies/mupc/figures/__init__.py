"""μPC study, figures part."""
