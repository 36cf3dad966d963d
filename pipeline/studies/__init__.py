"""One folder per study: config.py (params schema) and steps.py (stage functions)."""
