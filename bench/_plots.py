"""PNG plots of cost against size, drawn by the peers venv's matplotlib (not a project
dependency): ``python bench/_plots.py series.json bench/plots``.

series.json: {"name": {"title", "xlabel", "ylabel", "lines": {label: [[x, y], ...]}}}.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def main() -> None:
    series = json.loads(Path(sys.argv[1]).read_text())
    folder = Path(sys.argv[2])
    folder.mkdir(parents=True, exist_ok=True)
    for name, spec in series.items():
        fig, ax = plt.subplots(figsize=(6, 4))
        for label, points in spec["lines"].items():
            xs, ys = zip(*sorted(points), strict=True)
            ax.plot(xs, ys, marker="o", label=label)
        ax.set_title(spec["title"])
        ax.set_xlabel(spec["xlabel"])
        ax.set_ylabel(spec["ylabel"])
        ax.grid(True, alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(folder / f"{name}.png", dpi=100)
        plt.close(fig)
        print(f"wrote {folder / (name + '.png')}")


if __name__ == "__main__":
    main()
