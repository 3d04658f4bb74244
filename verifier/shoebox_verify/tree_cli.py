"""`shoebox-verify proof | consistency | monitor | witness`: the log's Merkle tree, offline.

- `proof FILE --key VKEY`: check one round's proof (GET /v1/rounds/{id}/proof?size=N) and
  print the round it proves.
- `consistency OLD NEW --key VKEY (--proof FILE | --log URL)`: check that the checkpoint NEW
  extends OLD, with a consistency proof from a file (one base64 hash a line) or the log.
- `monitor URL --key VKEY --state DIR [--token T]`: fetch the log's latest checkpoint, check
  it extends the last one kept in DIR, and keep it; on a fork, save both checkpoints and the
  proof in DIR as evidence and fail.
- `witness --key FILE --state DIR --log-key VKEY [--listen HOST:PORT]`: serve
  c2sp.org/tlog-witness's add-checkpoint (shoebox_verify.witness).

Policies: `--witness-key VKEY` (repeatable) with `--quorum K` demands k of those witnesses'
cosignatures on the checkpoint. Exit status: 0 verified, 1 refused, 2 unreadable input.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import json
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from shoebox_verify.checkpoints import CheckpointError, read_file, signature_valid
from shoebox_verify.merkle import MerkleProofError, check_consistency
from shoebox_verify.note import (
    NoteError,
    TreeCheckpoint,
    VerifierKey,
    open_checkpoint,
    witnessed_by,
)
from shoebox_verify.roundproof import RoundProofError, check_round_proof
from shoebox_verify.witness import Witness, WitnessKey, WitnessKeyError, serve

COMMANDS = ("proof", "consistency", "monitor", "witness")
CHAIN_HEAD = "shoebox-chain-head "
EXIT_OK, EXIT_REFUSED, EXIT_UNREADABLE = 0, 1, 2
_TIMEOUT = 10.0


class _RefusedError(Exception):
    """A check failed: exit 1 with this message."""


class _UnreadableError(Exception):
    """An input could not be read: exit 2 with this message."""


def _vkey(text: str) -> VerifierKey:
    try:
        return VerifierKey.parse(text)
    except NoteError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _policy(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--key",
        type=_vkey,
        action="append",
        required=True,
        metavar="VKEY",
        help="a trusted log key, as a vkey (<origin>+<id>+<key>); repeatable",
    )
    parser.add_argument(
        "--witness-key",
        type=_vkey,
        action="append",
        default=[],
        metavar="VKEY",
        help="a witness's cosignature vkey (type 0x04); repeatable",
    )
    parser.add_argument(
        "--quorum",
        type=int,
        default=0,
        metavar="K",
        help="demand cosignatures from at least K of the --witness-key witnesses",
    )
    parser.add_argument(
        "--checkpoint",
        metavar="FILE",
        help="a kept file of the log's JSON checkpoints: the note's chain head must be the"
        " head hash of the one signed at the note's size, by the same key",
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="shoebox-verify", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    proof = commands.add_parser("proof", help="check one round's proof and replay the round")
    proof.add_argument("file", help="the round's proof (JSON), or - for standard input")
    _policy(proof)
    consistency = commands.add_parser("consistency", help="check that NEW extends OLD")
    consistency.add_argument("old", help="the older checkpoint's note file")
    consistency.add_argument("new", help="the newer checkpoint's note file")
    source = consistency.add_mutually_exclusive_group(required=True)
    source.add_argument("--proof", help="the consistency proof: one base64 hash a line")
    source.add_argument("--log", metavar="URL", help="the Shoebox API (…/v1) to fetch it from")
    consistency.add_argument("--token", help="an API key for --log (a regulator's)")
    _policy(consistency)
    monitor = commands.add_parser("monitor", help="follow the log's checkpoints; catch a fork")
    monitor.add_argument("url", help="the Shoebox API, e.g. https://casino.example/v1")
    monitor.add_argument(
        "--state", required=True, type=Path, help="where the last checkpoint is kept"
    )
    monitor.add_argument("--token", help="an API key (a regulator's, for consistency proofs)")
    _policy(monitor)
    witness = commands.add_parser("witness", help="serve tlog-witness add-checkpoint")
    witness.add_argument("--key", required=True, type=Path, help="the witness's private key file")
    witness.add_argument("--state", required=True, type=Path, help="where cosigned sizes are kept")
    witness.add_argument(
        "--log-key",
        type=_vkey,
        action="append",
        default=[],
        metavar="VKEY",
        help="a log key whose checkpoints this witness cosigns; repeatable",
    )
    witness.add_argument("--listen", default="127.0.0.1:7380", metavar="HOST:PORT")
    witness.add_argument(
        "--new-key", metavar="NAME", help="write a new key file at --key for witness NAME and exit"
    )
    return parser


def _read(path: str) -> str:
    try:
        return sys.stdin.read() if path == "-" else Path(path).read_text()
    except (OSError, UnicodeDecodeError) as error:
        raise _UnreadableError(f"{path}: cannot read: {error}") from None


def _checkpoint(raw: str, arguments: argparse.Namespace, where: str) -> TreeCheckpoint:
    try:
        note, checkpoint = open_checkpoint(raw, arguments.key)
        if arguments.quorum:
            witnessed_by(note, arguments.witness_key, arguments.quorum)
    except NoteError as error:
        raise _RefusedError(f"{where}: {error}") from None
    if arguments.checkpoint is not None:
        _bound(checkpoint, arguments, where)
    return checkpoint


def _bound(checkpoint: TreeCheckpoint, arguments: argparse.Namespace, where: str) -> None:
    # The chain and the tree are one history only if the chain's head at the note's size is
    # the one the note names, under a JSON checkpoint signed by the same key.
    head = checkpoint.extension(CHAIN_HEAD)
    if head is None:
        raise _RefusedError(f"{where}: the note names no chain head ({CHAIN_HEAD.strip()})")
    try:
        kept = read_file(arguments.checkpoint)
    except (OSError, CheckpointError) as error:
        raise _UnreadableError(f"{arguments.checkpoint}: {error}") from None
    keys = {key.public_key for key in arguments.key}
    for _, json_checkpoint in kept:
        if json_checkpoint.position != checkpoint.size:
            continue
        signed = signature_valid(
            json_checkpoint.public_key, json_checkpoint.message, json_checkpoint.signature
        )
        if not signed or json_checkpoint.public_key not in keys:
            raise _RefusedError(
                f"{where}: the JSON checkpoint at {checkpoint.size} is not the log key's"
            )
        if json_checkpoint.head_hash != head:
            raise _RefusedError(
                f"{where}: the chain's head at {checkpoint.size} is {json_checkpoint.head_hash},"
                f" the note names {head}: the chain and the tree tell two histories"
            )
        return
    print(f"note: {where}: no JSON checkpoint at size {checkpoint.size} in {arguments.checkpoint}")


def _get(url: str, token: str | None) -> str:
    request = urllib.request.Request(url)  # noqa: S310 - the operator's own URL
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=_TIMEOUT) as answer:  # noqa: S310
            return str(answer.read().decode())
    except urllib.error.HTTPError as error:
        raise _UnreadableError(
            f"{url}: HTTP {error.code}: {error.read(500).decode('utf-8', 'replace')}"
        ) from None
    except (OSError, ValueError) as error:
        raise _UnreadableError(f"{url}: {error}") from None


def _fetched_proof(api: str, token: str | None, old: int, new: int) -> list[bytes]:
    if old == new:
        return []
    answer = json.loads(_get(f"{api.rstrip('/')}/log/proof/consistency?from={old}&to={new}", token))
    return [base64.b64decode(h, validate=True) for h in answer["hashes"]]


def _consistent(old: TreeCheckpoint, new: TreeCheckpoint, proof: list[bytes]) -> None:
    if old.origin != new.origin:
        raise _RefusedError(f"the checkpoints are of two logs: {old.origin!r} and {new.origin!r}")
    try:
        check_consistency(old.size, new.size, old.root, new.root, proof)
    except MerkleProofError as error:
        raise _RefusedError(f"NEW does not extend OLD: {error}") from None


def _proof(arguments: argparse.Namespace) -> str:
    if arguments.checkpoint is not None:
        try:
            note = json.loads(_read(arguments.file))["checkpoint"]
        except (ValueError, KeyError, TypeError) as error:
            raise _RefusedError(f"not a round's proof: {error}") from None
        _checkpoint(str(note), arguments, "the proof's checkpoint")
    try:
        report = check_round_proof(
            _read(arguments.file), arguments.key, arguments.witness_key, arguments.quorum
        )
    except RoundProofError as error:
        raise _RefusedError(str(error)) from None
    return "\n".join(
        [*report.lines, *(f"note: {note}" for note in report.notes), "OK: the round is in the log"]
    )


def _consistency(arguments: argparse.Namespace) -> str:
    old = _checkpoint(_read(arguments.old), arguments, "OLD")
    new = _checkpoint(_read(arguments.new), arguments, "NEW")
    if arguments.proof is not None:
        try:
            proof = [
                base64.b64decode(line, validate=True) for line in _read(arguments.proof).split()
            ]
        except (ValueError, binascii.Error) as error:
            raise _UnreadableError(f"{arguments.proof}: {error}") from None
    else:
        proof = _fetched_proof(arguments.log, arguments.token, old.size, new.size)
    _consistent(old, new, proof)
    return f"OK: size {new.size} extends size {old.size} of {new.origin}"


def _monitor(arguments: argparse.Namespace) -> str:
    state: Path = arguments.state
    state.mkdir(parents=True, exist_ok=True)
    raw = _get(f"{arguments.url.rstrip('/')}/log/checkpoint", arguments.token)
    new = _checkpoint(raw, arguments, "the log's checkpoint")
    kept_file = state / "checkpoint"
    if not kept_file.exists():
        _keep(kept_file, raw)
        return f"OK: first checkpoint kept, size {new.size} of {new.origin}"
    kept_raw = kept_file.read_text()
    old = _checkpoint(kept_raw, arguments, "the kept checkpoint")
    if new.size < old.size:
        _evidence(state, kept_raw, raw, [], "the log shows a smaller tree than one it signed")
        raise _RefusedError(
            f"the log's checkpoint (size {new.size}) is older than the kept one ({old.size})"
        )
    proof = _fetched_proof(arguments.url, arguments.token, old.size, new.size)
    try:
        _consistent(old, new, proof)
    except _RefusedError as refusal:
        _evidence(state, kept_raw, raw, proof, str(refusal))
        raise
    _keep(kept_file, raw)
    return f"OK: size {new.size} extends the kept size {old.size}; kept"


def _keep(path: Path, note: str) -> None:
    temporary = path.with_suffix(".tmp")
    temporary.write_text(note)
    temporary.replace(path)


def _evidence(state: Path, old: str, new: str, proof: list[bytes], reason: str) -> None:
    folder = state / f"fork-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "kept.checkpoint").write_text(old)
    (folder / "served.checkpoint").write_text(new)
    (folder / "consistency.proof").write_text(
        "".join(base64.b64encode(h).decode() + "\n" for h in proof)
    )
    (folder / "reason.txt").write_text(reason + "\n")
    print(f"shoebox-verify: evidence saved in {folder}", file=sys.stderr)


def _witness(arguments: argparse.Namespace) -> str:
    if arguments.new_key:
        key = WitnessKey.generate(arguments.new_key)
        arguments.key.write_text(key.encode())
        arguments.key.chmod(0o600)
        return f"witness key written to {arguments.key}; its vkey: {key.verifier_key().encode()}"
    if not arguments.log_key:
        raise _UnreadableError("name at least one --log-key: the logs this witness cosigns")
    try:
        key = WitnessKey.read(arguments.key)
    except (OSError, WitnessKeyError) as error:
        raise _UnreadableError(f"{arguments.key}: {error}") from None
    host, _, port = arguments.listen.rpartition(":")
    witness = Witness(key, arguments.state, arguments.log_key)
    server = serve(witness, host or "127.0.0.1", int(port))
    print(
        f"witness {key.name} on http://{arguments.listen}/add-checkpoint, vkey"
        f" {key.verifier_key().encode()}",
        flush=True,
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return "witness stopped"


def main(argv: Sequence[str]) -> int:
    """Run one of the tree commands; its exit status."""
    arguments = _parser().parse_args(argv)
    handlers = {
        "proof": _proof,
        "consistency": _consistency,
        "monitor": _monitor,
        "witness": _witness,
    }
    try:
        print(handlers[arguments.command](arguments))
    except _RefusedError as refusal:
        print(f"FAILED: {refusal}")
        return EXIT_REFUSED
    except _UnreadableError as error:
        print(f"shoebox-verify: {error}", file=sys.stderr)
        return EXIT_UNREADABLE
    return EXIT_OK
