"""`shoebox-verify EXPORT`: check a Shoebox regulator export with nothing but the file.

Exit status: 0 verified; 1 discrepancies (each printed as `check: where: detail`, then a
FAILED summary); 2 the export (or checkpoint file) cannot be read, with one line on stderr
saying what is wrong and where. Never a traceback.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence

from shoebox_verify import tree_cli
from shoebox_verify.export import DamagedError
from shoebox_verify.verify import verify

EXIT_OK = 0
EXIT_DISCREPANCIES = 1
EXIT_UNREADABLE = 2
_HEX64 = re.compile(r"[0-9a-f]{64}")


def _public_key(text: str) -> bytes:
    if not _HEX64.fullmatch(text):
        raise argparse.ArgumentTypeError("a public key is 64 lowercase hex characters")
    return bytes.fromhex(text)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="shoebox-verify",
        description="Verify a Shoebox regulator export offline: the hash chain and the "
        "header's promises, every shoe from its revealed seed, every coup by the tableau, "
        "every payout, and the money between tables and wallets.",
    )
    parser.add_argument("export", help="the export file (JSON Lines, shoebox-export/1 or /2)")
    parser.add_argument(
        "--checkpoint",
        metavar="FILE",
        help="a file of signed checkpoints kept by the regulator: prove the export extends them",
    )
    parser.add_argument(
        "--trusted-key",
        metavar="HEX",
        action="append",
        type=_public_key,
        default=[],
        help="an Ed25519 public key (64 hex) that checkpoints' keys must descend from "
        "(repeatable); without one, the first checkpoint's key is trusted",
    )
    progress = parser.add_mutually_exclusive_group()
    progress.add_argument(
        "--progress",
        dest="progress",
        action="store_true",
        default=None,
        help="report progress on stderr (default: only when stderr is a terminal)",
    )
    progress.add_argument("--no-progress", dest="progress", action="store_false")
    parser.add_argument(
        "--max-findings",
        type=int,
        default=1000,
        metavar="N",
        help="print at most N discrepancies (all are counted); default 1000",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the verifier; the exit status (also raised as SystemExit by the console script)."""
    given = list(sys.argv[1:] if argv is None else argv)
    if given and given[0] in tree_cli.COMMANDS:
        # The Merkle tree's commands (proof, consistency, monitor, witness); an export file
        # of one of those names can still be checked as ./proof.
        return tree_cli.main(given)
    arguments = _parser().parse_args(given)
    try:
        report = verify(
            arguments.export,
            checkpoint_file=arguments.checkpoint,
            trusted_keys=tuple(arguments.trusted_key),
            progress=arguments.progress,
            max_findings=max(arguments.max_findings, 0),
        )
    except DamagedError as error:
        print(f"shoebox-verify: {arguments.export}: {error}", file=sys.stderr)
        return EXIT_UNREADABLE
    except OSError as error:
        print(f"shoebox-verify: {arguments.export}: cannot read: {error.strerror}", file=sys.stderr)
        return EXIT_UNREADABLE
    except KeyboardInterrupt:
        print("shoebox-verify: interrupted", file=sys.stderr)
        return 130
    for finding in report.findings:
        print(finding)
    if report.finding_count > len(report.findings):
        print(f"... and {report.finding_count - len(report.findings)} more discrepancies")
    for note in report.notes:
        print(f"note: {note}")
    if not report.ok:
        print(f"FAILED: {report.finding_count} discrepancies in {report.summary()}")
        return EXIT_DISCREPANCIES
    print(f"OK: {report.summary()}")
    return EXIT_OK


def run() -> None:
    """Entry point that exits with main's status."""
    sys.exit(main())


if __name__ == "__main__":
    run()
