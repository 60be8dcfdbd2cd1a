"""This source tree installed as `pip install slurm-triage` leaves it, for start-up timings.

`make venv` installs the package editable, and setuptools' editable install puts a .pth in
the venv that imports its finder at every interpreter start: pathlib, re, enum, fnmatch,
urllib.parse, ipaddress (~20 ms on the shared 2-core host). A node's install has no such
.pth. So `python -c pass` in the dev venv takes 2-3x a node's, every start-up ratio to it
is flattered by as much, and our own start-ups get those modules for free. Start-up ratios
are therefore taken here: a venv whose site-packages holds one .pth listing this tree and
the dev venv's site-packages as plain paths (a .pth in a directory a .pth adds is not
run), and the package's console scripts written as pip writes them. Its `python -c pass`
is the floor a node pays; the subjects import the same files as from a wheel.
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from importlib.metadata import distribution
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# pip's console-script template, less its Windows suffix.
_SCRIPT = """#!{python}
import sys
from {module} import {attr}
if __name__ == "__main__":
    sys.exit({attr}())
"""


class PlainInstall:
    """The venv's interpreter and the directory of its console scripts."""

    def __init__(self, venv: Path) -> None:
        self.bin = venv / "bin"
        self.python = str(self.bin / "python")

    def script(self, name: str) -> str:
        return str(self.bin / name)


def plain_install(where: Path) -> PlainInstall:
    """Create it under `where` (seconds: no pip, nothing downloaded)."""
    venv = where / "plain-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    plain = PlainInstall(venv)
    site_packages = subprocess.run(
        [plain.python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    dev_site = sysconfig.get_path("purelib")
    (Path(site_packages) / "slurm_triage_bench.pth").write_text(f"{ROOT}\n{dev_site}\n")
    for entry in distribution("slurm-triage").entry_points:
        if entry.group == "console_scripts":
            path = plain.bin / entry.name
            path.write_text(
                _SCRIPT.format(python=plain.python, module=entry.module, attr=entry.attr)
            )
            path.chmod(0o755)
    _check(plain)
    return plain


def _check(plain: PlainInstall) -> None:
    """The tree is imported from ROOT, and no editable finder runs at start-up."""
    probe = (
        "import sys, slurm_triage; print(slurm_triage.__file__); "
        "print(any('editable' in name for name in sys.modules))"
    )
    out = subprocess.run(
        [plain.python, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.split()
    if out != [str(ROOT / "slurm_triage" / "__init__.py"), "False"]:
        raise SystemExit(f"the plain install does not import this tree plainly: {out}")
