"""Discovery: a study is a package under ``pipeline/studies/`` whose ``__init__.py`` defines ``STUDY``.

Its name is its folder path with ``/`` as ``_`` (``mupc/analysis`` → ``mupc_analysis``), which is
also its params file ``params/<name>.yaml``, its MLflow experiment and the prefix of its DVC stages. Finding
studies reads files only; a stage imports just the study it runs.
"""

from __future__ import annotations

import ast
import functools
import importlib
from pathlib import Path

from pipeline.config import ConfigError, Params, load_section
from pipeline.contract import Study

STUDIES_DIR = Path(__file__).resolve().parent / "studies"


def _declares(init: Path) -> bool:
    tree = ast.parse(init.read_text(), filename=str(init))
    return any(isinstance(node, ast.Assign | ast.AnnAssign) and any(
        isinstance(t, ast.Name) and t.id == "STUDY" for t in (node.targets if isinstance(node, ast.Assign)
                                                              else [node.target])) for node in tree.body)


@functools.cache
def modules() -> dict[str, str]:
    """``{study name: package}`` of every declared study, in name order."""
    out = {}
    for init in sorted(STUDIES_DIR.rglob("__init__.py")):
        rel = init.parent.relative_to(STUDIES_DIR)
        if rel.parts and "__pycache__" not in rel.parts and _declares(init):
            out["_".join(rel.parts)] = "pipeline.studies." + ".".join(rel.parts)
    return dict(sorted(out.items()))


def names() -> list[str]:
    return list(modules())


def load(name: str) -> Study:
    """The declaration of study ``name``; a clear error for an unknown one."""
    mods = modules()
    if name not in mods:
        raise ConfigError(f"study {name!r} is not declared; known studies: {sorted(mods)}")
    study = importlib.import_module(mods[name]).STUDY
    if study.name != name:
        raise ConfigError(f"{mods[name]}: STUDY.name = {study.name!r} is not allowed; allowed: {name!r} "
                          "(the folder path with '/' as '_')")
    return study


def config(study: Study, params: Params, profile: str | None = None) -> object:
    """The study's section (``params/<name>.yaml``) resolved for ``profile`` (default: the active one)."""
    return load_section(study.schema, params.raw, study.name, profile or params.profile)
