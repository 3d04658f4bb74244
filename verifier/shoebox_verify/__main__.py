"""`python -m shoebox_verify EXPORT`, the same as `shoebox-verify EXPORT`."""

from shoebox_verify.cli import run

run()
