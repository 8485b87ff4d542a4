"""What a user installs and runs: the version from one place, an own environment imported from
the working directory, and (slow tier) the built wheel in a fresh virtual environment running
the README's quickstart."""

from __future__ import annotations

import ast
import os
import pathlib
import re
import shutil
import subprocess
import sys
import venv

import pytest

import fhc_jax

ROOT = pathlib.Path(__file__).resolve().parents[1]
TOY = pathlib.Path(__file__).parent / "toy_env.py"


def _fhc_jax(args: list[str], cwd: pathlib.Path) -> subprocess.CompletedProcess:
    """``fhc-jax ARGS`` as a user types it, from ``cwd``, with nothing but the installed package
    on the path (the tests' folders are not importable there)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    code = "import sys; from fhc_jax.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


def test_the_version_lives_in_one_place():
    """pyproject.toml reads the version from fhc_jax/__init__.py; the changelog has an entry for it."""
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'^dynamic = \["version"\]', pyproject, re.M)
    assert 'version = {attr = "fhc_jax.__version__"}' in pyproject
    assert not re.search(r'^version = "', pyproject, re.M)
    tree = ast.parse((ROOT / "fhc_jax" / "__init__.py").read_text())
    literal = [
        n.value.value
        for n in tree.body
        if isinstance(n, ast.Assign) and any(getattr(t, "id", None) == "__version__" for t in n.targets)
    ]
    assert literal == [fhc_jax.__version__]  # a literal, so building the wheel imports nothing
    assert f"## {fhc_jax.__version__} " in (ROOT / "CHANGELOG.md").read_text()


@pytest.mark.slow
def test_an_own_environment_imports_from_the_working_directory(tmp_path):
    """``fhc-jax solve --env hospital:ToyEnv`` run from the folder holding hospital.py, as
    ``python -m`` would find it; from elsewhere the error says where it looked."""
    shutil.copy(TOY, tmp_path / "hospital.py")
    out = _fhc_jax(["solve", "--env", "hospital:ToyEnv", "--set", "env.horizon=4", "--set", "env.alpha=1.5"], tmp_path)
    assert out.returncode == 0, out.stderr
    assert "constrained" in out.stdout and "[1.5]" in out.stdout
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = _fhc_jax(["solve", "--env", "hospital:ToyEnv"], elsewhere)
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert f"no module named 'hospital': looked in the working directory {elsewhere}" in out.stderr
    assert "hospital.py" in out.stderr and "PYTHONPATH" in out.stderr


@pytest.mark.slow
def test_a_module_that_fails_to_import_is_told_apart_from_a_missing_one(tmp_path):
    (tmp_path / "broken.py").write_text("import a_package_nobody_has\n")
    out = _fhc_jax(["solve", "--env", "broken:Env"], tmp_path)
    assert out.returncode == 2 and "module 'broken' was found but importing it failed" in out.stderr


@pytest.mark.slow
def test_the_wheel_installs_in_a_fresh_venv_and_runs_the_quickstart(tmp_path):
    """``python -m build`` makes an sdist and a wheel; a fresh virtual environment installs the
    wheel (and its dependencies from the package index) and runs the README's quickstart
    ``fhc-jax train``, judged exactly."""
    pytest.importorskip("build", reason="the build package (pip install -e '.[test]') builds the wheel")
    dist = tmp_path / "dist"
    built = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(dist), str(ROOT)], capture_output=True, text=True, timeout=900
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    wheels = list(dist.glob(f"fhc_jax-{fhc_jax.__version__}-py3-none-any.whl"))
    assert len(wheels) == 1 and list(dist.glob(f"fhc_jax-{fhc_jax.__version__}.tar.gz"))
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", str(wheels[0])], capture_output=True, text=True, timeout=1800
    )
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{env_dir / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    version = subprocess.run(
        [str(python), "-c", "import fhc_jax; print(fhc_jax.__file__, fhc_jax.__version__)"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    assert version.returncode == 0 and str(env_dir) in version.stdout and fhc_jax.__version__ in version.stdout
    train = subprocess.run(
        [str(env_dir / "bin" / "fhc-jax"), "train", "--seeds", "5", "--out", "runs/demo", "--overwrite"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=2400,
    )
    assert train.returncode == 0, train.stdout[-3000:] + train.stderr[-3000:]
    assert (tmp_path / "runs" / "demo" / "summary.json").is_file()
