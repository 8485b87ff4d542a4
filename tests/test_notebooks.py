"""The notebooks run: their code cells execute top to bottom in a fresh interpreter with small
budgets (FHC_NOTEBOOK_SMALL=1), so they cannot rot."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def code_of(path: Path) -> str:
    nb = json.loads(path.read_text())
    assert nb["nbformat"] == 4
    cells = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert cells, f"{path.name} has no code cells"
    for c in cells:
        assert c.get("outputs", []) == [], f"{path.name}: commit notebooks without outputs"
    return "\n\n".join("".join(c["source"]) for c in cells)


@pytest.mark.parametrize(
    "name,expect",
    [
        ("quickstart", "exact reward"),
        ("custom_cmdp", "exact reward"),
        pytest.param("bring_your_own_env", "position cost", marks=pytest.mark.slow),
    ],
)
@pytest.mark.slow
def test_notebook_executes(name, expect, tmp_path):
    script = tmp_path / f"{name}.py"
    script.write_text(code_of(NOTEBOOKS / f"{name}.ipynb"))
    env = dict(os.environ, FHC_NOTEBOOK_SMALL="1", MPLBACKEND="Agg")
    proc = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert expect in proc.stdout
