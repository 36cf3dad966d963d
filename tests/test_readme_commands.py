"""Every command a README shows in a ```bash block is one that works, checked cheaply (no compute).

* ``dvc exp run -S <file>:<override>``: the params file exists, the override applies to a copy of it
  through DVC's own parser (so the key exists; ``+key`` adds one, whose base key must exist), no
  override sets ``profile`` (every stage refuses it: ``make profile P=…``), and none omits the file;
* ``python -m <module> …``: the module answers ``--help`` with exit 0; ``python <script>``: it exists;
* ``make <target>``: the Makefile defines the target;
* ``dvc repro <dvc.yaml>[:<stage>[@<item>]]``: the file exists and the stage (and item) is in the
  generated graph of the active profile;
* ``pytest <path>``: the path exists.

A failure names the README and the line.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT

READMES = [ROOT / "README.md", *sorted((ROOT / "pipeline" / "studies").glob("**/README.md"))]
ENV_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=\S*")
MAKE_TARGET = re.compile(r"^([A-Za-z0-9_.-]+(?:\s+[A-Za-z0-9_.-]+)*)\s*:(?!=)", re.M)


@dataclass(frozen=True)
class Command:
    """One simple command of a README's bash block: where it is and its words."""

    readme: Path
    line: int
    words: tuple[str, ...]

    @property
    def where(self) -> str:
        name = self.readme.relative_to(ROOT) if self.readme.is_relative_to(ROOT) else self.readme
        return f"{name}:{self.line}: {shlex.join(self.words)}"


def bash_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, logical line) of every ```bash block, continuation lines joined, comments dropped."""
    in_block, pending, start = False, "", 0
    for i, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if stripped.startswith("```"):
            in_block = stripped == "```bash" and not in_block
            pending = ""
            continue
        if not in_block:
            continue
        if not pending:
            start = i
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        yield start, pending + stripped
        pending = ""


def commands(readme: Path) -> Iterator[Command]:
    """The simple commands of a README's bash blocks (split at ``&&``, ``||`` and ``;``), env
    assignments in front dropped."""
    for line, text in bash_lines(readme.read_text()):
        lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        words: list[str] = []
        for tok in [*lexer, ";"]:
            if tok and set(tok) <= set(";&|"):
                while words and ENV_ASSIGNMENT.fullmatch(words[0]):
                    words.pop(0)
                if words:
                    yield Command(readme, line, tuple(words))
                words = []
            else:
                words.append(tok)


ALL = [c for r in READMES for c in commands(r)]


def _of(*heads: str) -> list[Command]:
    return [c for c in ALL if c.words[: len(heads)] == heads
            or (len(c.words) > len(heads) and Path(c.words[0]).name == heads[0] and c.words[1:len(heads)] == heads[1:])]


def _ids(cmds: list[Command]) -> list[str]:
    return [f"{c.readme.relative_to(ROOT)}:{c.line}" for c in cmds]


def test_the_readmes_show_commands():
    assert len(READMES) >= 5 and all(r.exists() for r in READMES)
    assert _of("dvc", "exp", "run") and _of("make") and _of("dvc", "repro") and MODULES


# ----------------------------------------------------------------------------- dvc exp run -S


def set_params(c: Command) -> list[str]:
    """The values of every ``-S`` / ``--set-param`` of a command."""
    out, words = [], list(c.words)
    for i, w in enumerate(words):
        if w in ("-S", "--set-param") and i + 1 < len(words):
            out.append(words[i + 1])
        elif w.startswith("--set-param="):
            out.append(w.split("=", 1)[1])
    return out


def has_key(tree: object, dotted: str) -> bool:
    node = tree
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def override_problem(value: str, scratch: Path) -> str | None:
    """Why one ``-S`` value would fail or do nothing, else None (DVC's own grouping and parser)."""
    from dvc.utils.cli_parse import to_path_overrides
    from dvc.utils.hydra import apply_overrides

    ((path, overrides),) = to_path_overrides([value]).items()
    key = overrides[0].partition("=")[0].lstrip("+~")
    if key == "profile" or key.endswith(".profile"):
        return "sets `profile`, which every stage refuses: switch with `make profile P=<name> && dvc repro`"
    if ":" not in value.partition("=")[0]:
        return f"names no params file: DVC would look for `{key}` in params.yaml; write `params/<study>.yaml:{key}=…`"
    src = ROOT / path
    if not src.is_file():
        return f"params file {path} does not exist"
    tree = yaml.safe_load(src.read_text())
    if overrides[0].startswith("+"):
        base = re.sub(r"\.profiles\.[^.]+\.", ".", key)
        if not has_key(tree, base):
            return f"adds `{key}`, but `{base}` is no key of {path}"
    elif not has_key(tree, key):
        return f"`{key}` is no key of {path} (base or a profile)"
    copy = scratch / Path(path).name
    shutil.copy(src, copy)
    try:
        apply_overrides(copy, overrides)
    except Exception as e:  # DVC's InvalidArgumentError, with hydra's reason as the cause
        return f"DVC refuses it: {e} {e.__cause__ or ''}".strip()
    return None


EXP_RUNS = _of("dvc", "exp", "run")


@pytest.mark.parametrize("cmd", EXP_RUNS, ids=_ids(EXP_RUNS))
def test_exp_run_overrides_name_an_existing_key_of_an_existing_params_file(cmd, tmp_path):
    values = set_params(cmd)
    problems = [f"-S {v}: {p}" for v in values if (p := override_problem(v, tmp_path))]
    assert not problems, f"{cmd.where}\n  " + "\n  ".join(problems)


# ----------------------------------------------------------------------------- python, make, pytest


def _modules(cmds: list[Command]) -> list[tuple[Command, str]]:
    """(command, module) of every ``python -m <module> …``."""
    out = []
    for c in cmds:
        if Path(c.words[0]).name.startswith("python") and len(c.words) > 2 and c.words[1] == "-m":
            out.append((c, c.words[2]))
    return out


MODULES = _modules(ALL)


@pytest.mark.parametrize(("cmd", "module"), MODULES, ids=[f"{_ids([c])[0]}:{m}" for c, m in MODULES])
def test_python_modules_answer_help(cmd, module):
    proc = subprocess.run([sys.executable, "-m", module, "--help"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, (f"{cmd.where}\n  `python -m {module} --help` exits {proc.returncode}: "
                                  f"{proc.stderr[-800:]}")


def test_python_scripts_exist():
    missing = [c.where for c in ALL if Path(c.words[0]).name.startswith("python") and len(c.words) > 1
               and c.words[1].endswith(".py") and not (ROOT / c.words[1]).is_file()]
    assert not missing, "scripts that do not exist:\n  " + "\n  ".join(missing)


def makefile_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    return {t for m in MAKE_TARGET.finditer(text) for t in m.group(1).split() if not t.startswith(".")}


def test_make_targets_exist():
    targets = makefile_targets()
    assert {"repro", "test", "dag", "profile"} <= targets
    missing = []
    for c in _of("make"):
        wanted = [w for w in c.words[1:] if not w.startswith("-") and "=" not in w]
        missing += [f"{c.where}: no target `{t}` in the Makefile" for t in wanted if t not in targets]
    assert not missing, "\n  ".join(missing)


def test_pytest_paths_exist():
    missing = []
    for c in ALL:
        if Path(c.words[0]).name != "pytest":
            continue
        args = iter(c.words[1:])
        for w in args:
            if w in ("-m", "-n", "-k", "--dist", "-p"):
                next(args, None)
            elif not w.startswith("-") and not (ROOT / w.split("::")[0]).exists():
                missing.append(f"{c.where}: {w} does not exist")
    assert not missing, "\n  ".join(missing)


# ----------------------------------------------------------------------------- dvc repro <stage>


def stage_problem(target: str) -> str | None:
    """Why ``dvc repro <target>`` names nothing in the generated graph, else None."""
    path, _, stage = target.partition(":")
    if path.startswith("graph/") and not path.endswith("dvc.yaml"):  # a folder of unit stage files (`-R`)
        return None if any((ROOT / path).rglob("dvc.yaml")) else f"{path} holds no stage file"
    if not path.endswith(("dvc.yaml", ".dvc")):
        stage, path = path, "dvc.yaml"
    file = ROOT / path
    if not file.is_file():
        return f"{path} does not exist"
    if not stage:
        return None
    stages = (yaml.safe_load(file.read_text()) or {}).get("stages", {})
    name, _, item = stage.partition("@")
    if name not in stages:
        return f"{path} has no stage `{name}` (stages: {', '.join(stages)})"
    if item:
        foreach = stages[name].get("foreach")
        items = list(foreach) if isinstance(foreach, dict | list) else []
        if item not in items:
            return f"`{name}` runs no `{item}` under the active profile (items: {', '.join(map(str, items))})"
    return None


REPROS = [c for c in _of("dvc", "repro") + _of("dvc", "exp", "run") if any(not w.startswith("-") for w in c.words[2:])]


@pytest.mark.parametrize("cmd", REPROS, ids=_ids(REPROS))
def test_repro_targets_are_stages_of_the_generated_graph(cmd):
    args = list(cmd.words[3:] if cmd.words[1] == "exp" else cmd.words[2:])
    targets, skip = [], False
    for w in args:
        if skip:
            skip = False
        elif w in ("-S", "--set-param", "-n", "--name", "-j", "--jobs"):
            skip = True
        elif not w.startswith("-"):
            targets.append(w)
    problems = [f"{t}: {p}" for t in targets if (p := stage_problem(t))]
    assert not problems, f"{cmd.where}\n  " + "\n  ".join(problems)


# ----------------------------------------------------------------------------- the checks themselves


def test_the_checks_catch_what_the_readmes_used_to_teach(tmp_path):
    """The refused and failing forms of issue 25 are caught, with the README and line named."""
    fake = tmp_path / "README.md"
    fake.write_text("x\n```bash\ndvc exp run -S profile=paper\ndvc exp run -S imprint.glyph=droid\n"
                    "make nonsense && dvc repro graph/imprint/render/nope/dvc.yaml:imprint_render@nope\n```\n")
    cmds = list(commands(fake))
    assert [c.line for c in cmds] == [3, 4, 5, 5]
    assert "make profile P=" in override_problem("profile=paper", tmp_path)
    assert "names no params file" in override_problem("imprint.glyph=droid", tmp_path)
    assert "no key" in override_problem("params/imprint.yaml:imprint.nonsense=1", tmp_path)
    assert "does not exist" in override_problem("params/nope.yaml:nope.x=1", tmp_path)
    assert override_problem("params/imprint.yaml:imprint.profiles.smoke.epochs=5", tmp_path) is None
    assert override_problem("params/imprint.yaml:+imprint.profiles.paper.epochs=5", tmp_path) is None
    assert "does not exist" in stage_problem("graph/imprint/render/nope/dvc.yaml:imprint_render@nope")
    assert "no stage" in stage_problem("graph/imprint/render/glyph/dvc.yaml:imprint_nothing")
    assert "runs no `nope`" in stage_problem("graph/imprint/render/glyph/dvc.yaml:imprint_render@nope")
    assert stage_problem("graph/imprint/render/glyph/dvc.yaml:imprint_render@glyph") is None
    assert stage_problem("graph/imprint/render") is None and "holds no" in stage_problem("graph/imprint/nope")
    assert _modules(list(commands(fake))) == []
    fake.write_text("```bash\n.venv/bin/python -m pipeline.plan --profile paper\n```\n")
    assert [m for _, m in _modules(list(commands(fake)))] == ["pipeline.plan"]
    assert "nonsense" not in makefile_targets() and "plan" in makefile_targets()
    assert cmds[0].where.endswith(":3: dvc exp run -S profile=paper")
