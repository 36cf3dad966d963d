"""Thin stage entry points for dvc.yaml; the logic lives in ``pipeline``."""
