"""μPC study, training part."""
