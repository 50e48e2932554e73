"""The csp-web command's entry point: first make sure the top-level packages ``protocol``
and ``specialists`` that Python finds are csp-web's own, then run ``csp_web.app.main``.

The wheel installs them under those names (the project's layout), and both names exist on
the package index: another distribution's ``protocol`` first on ``sys.path``, or installed
over ours, used to fail as an ImportError traceback deep in start-up. Now that is one line
naming the shadowing package and how to fix it, and exit 2 (bad installation, as bad usage).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import csp_web

OWN = ("protocol", "specialists")  # top-level packages csp-web installs beside csp_web
EXIT_USAGE = 2
_FIX = (
    "uninstall it (pip uninstall {dists}) then reinstall csp-web (pip install "
    "--force-reinstall csp-web), or install csp-web in an environment of its own "
    "(pipx install csp-web)"
)


def shadowing(name: str) -> str | None:
    """Why the package ``name`` Python would import is not csp-web's own, or None when it
    is: found elsewhere than beside ``csp_web`` (without running it), or found there but
    without csp-web's marker (another distribution installed over it)."""
    # Not resolved: a folder of links (a distribution's own layout) is judged as Python sees it.
    home = Path(os.path.abspath(csp_web.__file__)).parent.parent
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError) as exc:
        return f"'{name}' cannot be found: {exc}"
    if spec is None or spec.origin is None:
        return f"'{name}' is missing beside {home / 'csp_web'}"
    origin = Path(os.path.abspath(spec.origin))
    if origin.parent.parent != home:
        return f"'{name}' is {origin}, not csp-web's (in {home})"
    try:
        module = importlib.import_module(name)
    except Exception as exc:  # whatever another package's code raises on import
        return f"'{name}' at {origin} fails to import ({type(exc).__name__}: {exc})"
    if getattr(module, "__csp_web__", False) is not True:
        return f"'{name}' at {origin} is another package's, installed over csp-web's"
    return None


def _owners(name: str) -> list[str]:
    """The installed distributions other than csp-web that ship top-level ``name``."""
    found = importlib.metadata.packages_distributions().get(name, [])
    return sorted({d for d in found if d.lower().replace("_", "-") != "csp-web"})


def shadow_message() -> str | None:
    """The one line for the first of ``OWN`` that is not csp-web's own, or None."""
    for name in OWN:
        why = shadowing(name)
        if why is None:
            continue
        owners = _owners(name)
        if owners:
            fix = _FIX.format(dists=" ".join(owners))
            return f"csp-web: package {why}, shadowed by {', '.join(owners)}: {fix}"
        return (
            f"csp-web: package {why}: remove its folder from PYTHONPATH/sys.path or rename "
            f"it, or reinstall csp-web (pip install --force-reinstall csp-web)"
        )
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Check the installation, then run the csp-web command; exit 2 when shadowed."""
    problem = shadow_message()
    if problem is not None:
        print(problem, file=sys.stderr)
        return EXIT_USAGE
    from csp_web.app.main import main as run

    return run(argv)
