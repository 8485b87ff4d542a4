"""mkdocs hook: the notebooks in the repository's ``notebooks/`` folder become pages under
``notebooks/`` of the site (rendered by mkdocs-jupyter, never executed), without copies in
docs/: the notebooks the tests execute are the ones the site shows."""

from __future__ import annotations

from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"


@event_priority(100)  # before mkdocs-jupyter's on_files turns .ipynb files into notebook pages
def on_files(files: Files, config) -> Files:
    notebooks = sorted(NOTEBOOKS.glob("*.ipynb"))
    if not notebooks:
        raise FileNotFoundError(f"docs/hooks/notebooks.py: no notebooks in {NOTEBOOKS}")
    for path in notebooks:
        files.append(
            File(
                f"notebooks/{path.name}",
                src_dir=str(ROOT),
                dest_dir=config["site_dir"],
                use_directory_urls=config["use_directory_urls"],
            )
        )
    return files


def on_serve(server, config, builder):
    server.watch(str(NOTEBOOKS))
    return server
