"""shoebox-verify: an independent verifier of Shoebox regulator exports.

Written from docs/verification.md, docs/audit-log.md and the provably-fair spec alone; it
imports nothing of the server. `shoebox_verify.verify.verify(path)` returns a Report, and
`shoebox_verify.cli.main` is the `shoebox-verify` command.
"""

__version__ = "0.1.0"
