"""trainscape: the importable library behind the DVC stages (see README)."""
