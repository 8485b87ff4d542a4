"""The documentation site (mkdocs.yml, docs/): it builds in strict mode (a docstring error, a
broken link or cross-reference, a renamed function named by the API pages fails it), the
getting-started commands are the README's quickstart commands, and the command-line reference
is generated from the ``fhc-jax`` parser."""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fhc_jax.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"_docs_{name}", DOCS / "hooks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _bash_blocks(markdown: str) -> list[str]:
    return [block.strip() for block in re.findall(r"^```bash\n(.*?)^```", markdown, re.MULTILINE | re.DOTALL)]


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def test_getting_started_commands_are_readmes():
    readme = (ROOT / "README.md").read_text()
    quickstart = re.search(r"^## Quickstart.*?(?=^## )", readme, re.MULTILINE | re.DOTALL)
    assert quickstart, "README.md has no '## Quickstart' section"
    page = (DOCS / "getting_started.md").read_text()
    block = re.search(r"<!-- quickstart -->(.*?)<!-- /quickstart -->", page, re.DOTALL)
    assert block, "docs/getting_started.md lacks the <!-- quickstart --> ... <!-- /quickstart --> block"
    expected = _bash_blocks(quickstart.group(0))
    assert len(expected) == 2, expected  # install + train, install + test
    assert _bash_blocks(block.group(1)) == expected


def test_cli_page_is_generated_from_the_parser():
    hook = _load("cli_reference")
    parser = build_parser()
    page = hook.render(parser)
    subcommands = _subcommands(parser)
    assert {"solve", "train", "plot", "sweep", "compare"} <= set(subcommands)
    for name, sub in subcommands.items():
        assert f"\n## fhc-jax {name}\n" in page, f"fhc-jax {name} has no section in the CLI page"
        for action in sub._actions:
            for flag in action.option_strings:
                if flag not in ("-h", "--help"):
                    assert f"`{flag}" in page, f"fhc-jax {name} {flag} missing from the CLI page"
    # the hook is what fills docs/cli.md at build time
    assert hook.MARKER in (DOCS / "cli.md").read_text()
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    assert "docs/hooks/cli_reference.py" in config["hooks"]


def test_cli_page_follows_a_renamed_flag():
    hook = _load("cli_reference")

    def parser(flag: str) -> argparse.ArgumentParser:
        p = argparse.ArgumentParser(prog="tool")
        sub = p.add_subparsers(dest="command", required=True)
        run = sub.add_parser("run", help="run it")
        run.add_argument(flag, type=int, default=3, help="how many | which")
        run.add_argument("--mode", choices=("a", "b"), default="a", help="the mode")
        return p

    old, new = hook.render(parser("--count")), hook.render(parser("--number"))
    assert "`--count COUNT`" in old and "--number" not in old
    assert "`--number NUMBER`" in new and "--count" not in new
    assert "\n## tool run\n" in new
    assert "how many \\| which" in new  # a pipe in a help text does not break the table
    assert "| `--mode {a,b}` | `a` | the mode |" in new


def test_docstring_rewrites():
    ext = _load("griffe_fhc")
    text = "Summary with :func:`a.b` and :class:`~c.D`.\n\nArgs:\n    x: one.\nReturns:\n    y."
    out = ext.rewrite(text)
    assert "``a.b``" in out and "``c.D``" in out and ":func:" not in out
    assert "    x: one.\n\nReturns:\n" in out  # a blank line above a stacked section header
    fields = "Static fields (set shapes):\n    n: updates.\n"
    assert ext.rewrite(fields).startswith("Static fields (set shapes):\n\nAttributes:\n    n: updates.")
    legend = "Attributes (H stages, M constraints):\n    reward: J.\n"
    assert ext.rewrite(legend).startswith("H stages, M constraints.\n\nAttributes:\n    reward: J.")


@pytest.mark.slow
def test_site_builds_strict(tmp_path):
    """``mkdocs build --strict``: zero warnings (griffe docstring warnings, broken links and
    anchors, unresolved cross-references, pages missing from the nav all fail it)."""
    site = tmp_path / "site"
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-5000:]
    assert not re.search(r"^WARNING", log, re.MULTILINE), log[-5000:]
    cli = (site / "cli" / "index.html").read_text()
    for name in _subcommands(build_parser()):
        assert f'id="fhc-jax-{name}"' in cli, f"fhc-jax {name} missing from the built CLI page"
    api = (site / "api" / "fh_constrained" / "index.html").read_text()
    for name in ("Config", "make_train", "policy_table", "policy"):
        assert f'id="fhc_jax.algos.fh_constrained.{name}"' in api
    for notebook in (ROOT / "notebooks").glob("*.ipynb"):
        assert "jp-Cell" in (site / "notebooks" / notebook.stem / "index.html").read_text()
    for page in (
        "concepts",
        "getting_started",
        "environments",
        "ARCHITECTURE",
        "RELIABILITY",
        "algorithms/fh_constrained",
        "algorithms/saute",
    ):
        assert (site / page / "index.html").is_file(), page
