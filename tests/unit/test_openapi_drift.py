"""openapi.yaml is produced from the code by `flask openapi write`; a drifted copy fails here.

Regenerate it with either of:
    .venv/bin/python -m tests.unit.test_openapi_drift
    DATABASE_URL=... .venv/bin/flask --app 'service.web.app:create_app()' openapi write \
        --format yaml openapi.yaml
"""

import sys
from pathlib import Path

import yaml

from events.memory import InMemoryEventStore
from service.web.app import create_app

OPENAPI_PATH = Path(__file__).resolve().parents[2] / "openapi.yaml"
REGENERATE = ".venv/bin/python -m tests.unit.test_openapi_drift"


def write_spec(path: Path) -> None:
    """Write the app's OpenAPI document to `path` with flask-smorest's own command."""
    # The store is never touched: the spec comes from the routes and schemas alone.
    app = create_app(store=InMemoryEventStore())
    result = app.test_cli_runner().invoke(args=["openapi", "write", "--format", "yaml", str(path)])
    if result.exit_code != 0:
        raise RuntimeError(f"flask openapi write failed: {result.output}") from result.exception


def test_the_checked_in_openapi_document_matches_the_code(tmp_path: Path) -> None:
    generated = tmp_path / "openapi.yaml"
    write_spec(generated)
    assert OPENAPI_PATH.exists(), f"openapi.yaml is missing; run `{REGENERATE}`"
    assert OPENAPI_PATH.read_text() == generated.read_text(), (
        f"openapi.yaml differs from the code; run `{REGENERATE}` and commit the result"
    )


def test_the_checked_in_document_is_yaml_not_json() -> None:
    text = OPENAPI_PATH.read_text()
    assert not text.lstrip().startswith("{"), "openapi.yaml holds JSON; regenerate it"
    assert yaml.safe_load(text)["openapi"] == "3.1.0"


def test_the_feed_is_documented_as_an_event_stream() -> None:
    spec = yaml.safe_load(OPENAPI_PATH.read_text())
    for path in ("/v1/tables/{table_id}/feed", "/v1/feed"):
        content = spec["paths"][path]["get"]["responses"]["200"]["content"]
        assert "text/event-stream" in content, path


def test_the_document_is_openapi_3_1_under_v1_with_a_bearer_scheme(tmp_path: Path) -> None:
    generated = tmp_path / "openapi.yaml"
    write_spec(generated)
    spec = yaml.safe_load(generated.read_text())
    assert spec["openapi"] == "3.1.0"
    assert spec["info"]["title"] == "Shoebox"
    assert spec["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"
    assert spec["security"] == [{"bearerAuth": []}]
    assert spec["paths"]
    assert all(path.startswith("/v1/") for path in spec["paths"])
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            if method in {"get", "post", "put", "patch", "delete"}:
                assert operation.get("x-roles"), f"{method} {path} documents no roles"


if __name__ == "__main__":
    write_spec(OPENAPI_PATH)
    sys.stdout.write(f"wrote {OPENAPI_PATH}\n")
