"""The tree's checkpoints in the open: monitors that catch a fork, and witnesses that cosign.

The API runs over the real PostgreSQL and is served over real HTTP; `shoebox-verify` runs as
the regulator would run it, as a process; a witness runs as `shoebox-verify witness`.
"""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from werkzeug.serving import make_server

from domain.outcome import Outcome
from events.merkle import MemoryNodes, root
from events.merkle_store import PostgresTree
from events.postgres import Pool, PostgresEventStore
from service.application.actor import Actor
from service.application.checkpoints import CheckpointService, SigningKey, TreeSigning
from service.application.keys import Role
from service.application.tree_notes import (
    checkpoint_text,
    signature_line,
    signed_note,
    verifier_key,
)
from service.runtime.container import Container
from service.runtime.metrics import WITNESS_FAILURES
from service.runtime.witnesses import HttpWitnesses, Witness
from service.web.api import EXTENSION
from tests.api_harness import Api, seed_dealing
from tests.ports import listening_socket, port_of

KEY = SigningKey.from_seed(bytes(range(32)))
ORIGIN = "casino.example/shoebox"
SIGNER = Actor("checkpointer", "system")
VKEY = verifier_key(ORIGIN, KEY.private)


def verify(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shoebox_verify", *arguments],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


class Served:
    def __init__(self, app_pool: Pool) -> None:
        self.api = Api(store=PostgresEventStore(app_pool), seeds=(seed_dealing((Outcome.PLAYER,)),))
        self.tree = PostgresTree(app_pool)
        wiring = self.api.app.extensions[EXTENSION]
        assert isinstance(wiring, Container)
        self.api.app.extensions[EXTENSION] = replace(wiring, tree=self.tree)
        self.signer = CheckpointService(
            self.api.store, self.api.clock, KEY, tree=TreeSigning(self.tree, ORIGIN)
        )
        self.server = make_server("127.0.0.1", 0, self.api.app, threaded=True)
        self.url = f"http://127.0.0.1:{self.server.server_port}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def play_round(self) -> None:
        self.api.create_table("T1")
        self.api.fund("alice")
        self.api.sit("T1", "alice", 1)
        self.api.bet("T1", "alice", "player", 700)
        self.api.act("T1", "deal", "alice")

    @property
    def regulator(self) -> str:
        return self.api.keys[Role.REGULATOR]


@pytest.fixture
def served(app_pool: Pool) -> Iterator[Served]:
    log = Served(app_pool)
    try:
        yield log
    finally:
        log.server.shutdown()
        log.server.server_close()


def test_a_monitor_follows_the_log_and_keeps_its_latest_checkpoint(
    served: Served, tmp_path: Path
) -> None:
    served.play_round()
    served.signer.sign_head(SIGNER)
    state = tmp_path / "monitor"
    arguments = (
        "monitor",
        served.url,
        "--key",
        VKEY,
        "--state",
        str(state),
        "--token",
        served.regulator,
    )
    first = verify(*arguments)
    assert first.returncode == 0, first.stdout + first.stderr
    served.api.bet("T1", "alice", "banker", 300)
    served.signer.sign_head(SIGNER)
    second = verify(*arguments)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "extends the kept size" in second.stdout
    latest = served.signer.latest_tree()
    assert latest is not None
    assert (state / "checkpoint").read_text() == latest.note


class ForkedLog:
    """A log that shows a monitor a different history under the same key and origin."""

    def __init__(self, note: str, honest_url: str) -> None:
        self.note = note
        self.honest_url = honest_url

        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.endswith("/log/checkpoint"):
                    body = outer.note.encode()
                else:
                    # Proofs come from the honest log: no proof can join the two histories.
                    request = urllib.request.Request(
                        outer.honest_url + self.path.split("/v1", 1)[1]
                    )
                    request.add_header("Authorization", self.headers["Authorization"])
                    with urllib.request.urlopen(request, timeout=10) as answer:
                        body = answer.read()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"


def _forged_note(size: int) -> str:
    # The casino holds its key: it can sign any tree. A rewritten history is a different tree.
    nodes = MemoryNodes()
    nodes.append(b"rewritten %d" % i for i in range(size))
    text = checkpoint_text(ORIGIN, size, root(size, nodes), "0" * 64)
    return signed_note(text, [signature_line(ORIGIN, KEY.private, text)])


def test_a_fork_shown_to_two_monitors_is_caught_with_evidence(
    served: Served, tmp_path: Path
) -> None:
    served.play_round()
    served.signer.sign_head(SIGNER)
    honest, fooled = tmp_path / "honest", tmp_path / "fooled"
    for state in (honest, fooled):
        done = verify(
            "monitor", served.url, "--key", VKEY, "--state", str(state), "--token", served.regulator
        )
        assert done.returncode == 0, done.stdout + done.stderr
    served.api.bet("T1", "alice", "banker", 300)
    served.signer.sign_head(SIGNER)
    latest = served.signer.latest_tree()
    assert latest is not None
    fork = ForkedLog(_forged_note(latest.size), served.url)
    try:
        shown = verify(
            "monitor", fork.url, "--key", VKEY, "--state", str(fooled), "--token", served.regulator
        )
    finally:
        fork.server.shutdown()
        fork.server.server_close()
    assert shown.returncode == 1, shown.stdout + shown.stderr
    assert "does not extend" in shown.stdout
    (evidence,) = fooled.glob("fork-*")
    assert {p.name for p in evidence.iterdir()} == {
        "kept.checkpoint",
        "served.checkpoint",
        "consistency.proof",
        "reason.txt",
    }
    assert (evidence / "served.checkpoint").read_text() == fork.note
    # The honest monitor moves on; the two kept checkpoints now disagree at their sizes,
    # which `consistency` shows to anyone holding both.
    assert (
        verify(
            "monitor",
            served.url,
            "--key",
            VKEY,
            "--state",
            str(honest),
            "--token",
            served.regulator,
        ).returncode
        == 0
    )
    old, forged = tmp_path / "old.note", tmp_path / "forged.note"
    old.write_text((evidence / "kept.checkpoint").read_text())
    forged.write_text(fork.note)
    compared = verify(
        "consistency",
        str(old),
        str(forged),
        "--key",
        VKEY,
        "--log",
        served.url,
        "--token",
        served.regulator,
    )
    assert compared.returncode == 1
    genuine = tmp_path / "genuine.note"
    genuine.write_text(latest.note)
    assert (
        verify(
            "consistency",
            str(old),
            str(genuine),
            "--key",
            VKEY,
            "--log",
            served.url,
            "--token",
            served.regulator,
        ).returncode
        == 0
    )


def test_a_rewritten_event_behind_a_signed_checkpoint_fails_its_proof(
    served: Served, tmp_path: Path
) -> None:
    served.play_round()
    served.signer.sign_head(SIGNER)
    latest = served.signer.latest_tree()
    assert latest is not None
    answer = served.api.call(
        "GET", f"/v1/rounds/T1-1/proof?size={latest.size}", role=Role.REGULATOR
    )
    proof = tmp_path / "round.json"
    proof.write_text(answer.get_data(as_text=True))
    checked = verify("proof", str(proof), "--key", VKEY)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "OK: the round is in the log" in checked.stdout
    document = json.loads(proof.read_text())
    bet = next(e for e in document["entries"] if '"type":"BetPlaced"' in e["event"])
    bet["event"] = bet["event"].replace('"stake":700', '"stake":7000')
    proof.write_text(json.dumps(document))
    refused = verify("proof", str(proof), "--key", VKEY)
    assert refused.returncode == 1
    assert "FAILED" in refused.stdout


@pytest.fixture
def witness_process(tmp_path: Path) -> Iterator[tuple[str, str]]:
    key_file = tmp_path / "witness.key"
    made = verify(
        "witness",
        "--key",
        str(key_file),
        "--state",
        str(tmp_path / "w"),
        "--new-key",
        "witness.example/w1",
    )
    assert made.returncode == 0, made.stderr
    witness_vkey = made.stdout.strip().rsplit(" ", 1)[-1]
    with listening_socket() as probe:
        port = port_of(probe)
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "shoebox_verify",
            "witness",
            "--key",
            str(key_file),
            "--state",
            str(tmp_path / "w"),
            "--log-key",
            VKEY,
            "--listen",
            f"127.0.0.1:{port}",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        assert "add-checkpoint" in process.stdout.readline()
        yield f"http://127.0.0.1:{port}", witness_vkey
    finally:
        process.terminate()
        process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()


def test_a_witness_cosigns_and_an_unreachable_one_never_stops_the_log(
    served: Served, witness_process: tuple[str, str], tmp_path: Path
) -> None:
    url, witness_vkey = witness_process
    with listening_socket() as probe:
        dead = f"http://127.0.0.1:{port_of(probe)}"
    made = verify(
        "witness",
        "--key",
        str(tmp_path / "w2.key"),
        "--state",
        str(tmp_path / "w2"),
        "--new-key",
        "witness.example/w2",
    )
    dead_vkey = made.stdout.strip().rsplit(" ", 1)[-1]
    fleet = HttpWitnesses(
        [Witness.parse(url, witness_vkey), Witness.parse(dead, dead_vkey)], timeout=1.0
    )
    served.signer = CheckpointService(
        served.api.store, served.api.clock, KEY, tree=TreeSigning(served.tree, ORIGIN, fleet)
    )
    failures_before = WITNESS_FAILURES.labels("witness.example/w2", "unreachable")._value.get()
    served.play_round()
    started = time.monotonic()
    served.signer.sign_head(SIGNER)
    assert time.monotonic() - started < 10
    first = served.signer.latest_tree()
    assert first is not None
    assert first.cosigners == ("witness.example/w1",)
    assert (
        WITNESS_FAILURES.labels("witness.example/w2", "unreachable")._value.get()
        == failures_before + 1
    )
    served.api.bet("T1", "alice", "banker", 300)
    served.signer.sign_head(SIGNER)
    second = served.signer.latest_tree()
    assert second is not None
    assert second.cosigners == ("witness.example/w1",)
    answer = served.api.call(
        "GET", f"/v1/rounds/T1-1/proof?size={second.size}", role=Role.REGULATOR
    )
    proof = tmp_path / "round.json"
    proof.write_text(answer.get_data(as_text=True))
    policy = ("--key", VKEY, "--witness-key", witness_vkey)
    assert verify("proof", str(proof), *policy, "--quorum", "1").returncode == 0
    two = verify("proof", str(proof), *policy, "--witness-key", dead_vkey, "--quorum", "2")
    assert two.returncode == 1, two.stdout + two.stderr
    assert "1 of the trusted witnesses cosigned; 2 wanted" in two.stdout


def test_the_vkey_of_the_service_matches_its_published_form() -> None:
    name, key_id, material = VKEY.split("+", 2)
    public = base64.b64decode(material)[1:]
    assert name == ORIGIN
    assert key_id == hashlib.sha256(ORIGIN.encode() + b"\n\x01" + public).digest()[:4].hex()


def test_the_chain_and_the_tree_must_tell_one_history(served: Served, tmp_path: Path) -> None:
    from service.application.checkpoints import kept_line, message

    served.play_round()
    signed = served.signer.sign_head(SIGNER)
    latest = served.signer.latest_tree()
    assert signed is not None
    assert latest is not None
    kept = tmp_path / "kept.jsonl"
    kept.write_text(kept_line(signed) + "\n")
    answer = served.api.call(
        "GET", f"/v1/rounds/T1-1/proof?size={latest.size}", role=Role.REGULATOR
    )
    proof = tmp_path / "round.json"
    proof.write_text(answer.get_data(as_text=True))
    bound = verify("proof", str(proof), "--key", VKEY, "--checkpoint", str(kept))
    assert bound.returncode == 0, bound.stdout + bound.stderr
    # The same key signs a chain head of another history at the same position.
    other_head = "f" * 64
    forged = replace(
        signed,
        head_hash=other_head,
        signature=KEY.sign(message(signed.position, other_head, signed.key_id, signed.recorded_at)),
    )
    kept.write_text(kept_line(forged) + "\n")
    two = verify("proof", str(proof), "--key", VKEY, "--checkpoint", str(kept))
    assert two.returncode == 1, two.stdout + two.stderr
    assert "two histories" in two.stdout
