"""MkDocs hook: publish the benchmark plots from benchmarks/results/ without copying them into docs/.

docs/benchmarks.md (written by benchmarks/report.py) links ``results/<benchmark>/result.png``; this adds each
``benchmarks/results/*/*.png`` to the site at that path, so strict mode checks the links and the plots live once.
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[1]


def on_files(files, config):
    for png in sorted((ROOT / "benchmarks" / "results").glob("*/*.png")):
        uri = f"results/{png.parent.name}/{png.name}"
        files.append(File.generated(config, uri, abs_src_path=str(png)))
    return files
