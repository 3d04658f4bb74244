"""The verifier shares no code with the server: it imports only the stdlib and cryptography."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import shoebox_verify

PACKAGE = Path(shoebox_verify.__file__).parent
ALLOWED_THIRD_PARTY = {"cryptography"}


def test_every_import_is_stdlib_cryptography_or_its_own() -> None:
    for path in PACKAGE.glob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                assert node.level == 0, f"{path.name}: relative import"
                names = [node.module or ""]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                assert (
                    top in sys.stdlib_module_names
                    or top in ALLOWED_THIRD_PARTY
                    or top == "shoebox_verify"
                ), f"{path.name} imports {name}"


def test_running_it_loads_nothing_of_the_server() -> None:
    probe = (
        "import sys, shoebox_verify.cli, shoebox_verify.verify, shoebox_verify.checkpoints\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "{'domain', 'events', 'service', 'orjson', 'flask', 'psycopg', 'redis', 'rq', 'click'})\n"
        "print(bad)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd="/"
    )
    assert done.stdout.strip() == "[]"


def test_its_distribution_depends_on_cryptography_alone() -> None:
    from importlib.metadata import requires

    assert [r.split(">")[0].split("=")[0].strip() for r in requires("shoebox-verify") or []] == [
        "cryptography"
    ]
