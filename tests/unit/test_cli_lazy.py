"""The command line's table of commands is what its modules define, and listing imports nothing."""

import importlib
import subprocess
import sys

from service.cli import COMMANDS, main


def test_the_table_of_commands_is_every_command_the_modules_define() -> None:
    defined = {}
    for module_name in {module for module, _ in COMMANDS.values()}:
        module = importlib.import_module(f"service.cli.{module_name}")
        for command in module.commands:
            defined[command.name] = module_name
    assert defined == {name: module for name, (module, _) in COMMANDS.items()}


def test_every_command_is_reachable_by_its_name() -> None:
    for name in COMMANDS:
        command = main.get_command(None, name)  # type: ignore[arg-type]
        assert command is not None
        assert command.name == name


def test_help_and_odds_import_neither_flask_nor_psycopg_nor_rq() -> None:
    probe = (
        "import sys; from click.testing import CliRunner; from service.cli import main;"
        "CliRunner().invoke(main, ['--help']); CliRunner().invoke(main, ['odds', '--decks', '1']);"
        "print(sorted(m for m in ('flask', 'psycopg', 'rq', 'gunicorn') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"
