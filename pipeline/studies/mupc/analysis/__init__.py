"""μPC study, analysis part."""
