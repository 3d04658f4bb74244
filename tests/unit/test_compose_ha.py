"""docker-compose.ha.yml, checked statically: no container engine runs where Shoebox is built.

The topology is `make cluster`'s (three Patroni nodes on etcd, HAProxy before them, two API
hosts behind deploy/haproxy/api.cfg, a worker and a projector); every name it refers to
resolves; the Patroni nodes bootstrap with exactly deploy/patroni/cluster's settings (those the
failover drills prove); and both proxies' configs name the services that exist, and are valid
to HAProxy itself when it is installed.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.ha.yml"
PATRONI = ROOT / "deploy" / "patroni" / "compose" / "patroni.yml"
DB_PROXY = ROOT / "deploy" / "patroni" / "compose" / "haproxy.cfg"
API_PROXY = ROOT / "deploy" / "haproxy" / "api.cfg"
NODES = ("pg1", "pg2", "pg3")
APP = ("migrate", "api1", "api2", "worker", "projector")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(loaded, dict)
    return loaded


def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    found = compose["services"]
    assert isinstance(found, dict)
    return found


def cluster_script_dcs() -> dict[str, Any]:
    """deploy/patroni/cluster's DCS, loaded from the script itself."""
    loader = importlib.machinery.SourceFileLoader(
        "patroni_cluster", str(ROOT / "deploy" / "patroni" / "cluster")
    )
    spec = importlib.util.spec_from_loader("patroni_cluster", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    dcs = module.DCS
    assert isinstance(dcs, dict)
    return dcs


def test_the_topology_is_make_clusters(compose: dict[str, Any]) -> None:
    found = services(compose)
    for name in ("etcd", *NODES, "db", "createdb", "redis", *APP, "api"):
        assert name in found, name
    assert [found[name]["command"] for name in ("api1", "api2", "worker", "projector")] == [
        ["serve"],
        ["serve"],
        ["worker"],
        ["projector"],
    ]


def test_every_reference_resolves(compose: dict[str, Any]) -> None:
    found = services(compose)
    volumes = set(compose.get("volumes") or {})
    for name, service in found.items():
        depends = service.get("depends_on") or []
        for target in depends if isinstance(depends, list) else depends.keys():
            assert target in found, (name, target)
        for mount in service.get("volumes") or []:
            source = str(mount).split(":", 1)[0]
            if source.startswith("./"):
                assert (ROOT / source).exists(), (name, source)
            else:
                assert source in volumes, (name, source)
        build = service.get("build")
        if build is not None:
            assert (ROOT / str(build) / "Dockerfile").is_file(), (name, build)


def test_the_nodes_bootstrap_with_the_drilled_patroni_settings(compose: dict[str, Any]) -> None:
    settings = yaml.safe_load(PATRONI.read_text())
    assert settings["bootstrap"]["dcs"] == cluster_script_dcs()
    assert settings["scope"] == "shoebox"
    assert settings["etcd3"]["hosts"] == "etcd:2379"
    found = services(compose)
    for name in NODES:
        environment = found[name]["environment"]
        assert environment["PATRONI_NAME"] == name
        assert environment["PATRONI_RESTAPI_CONNECT_ADDRESS"] == f"{name}:8008"
        assert environment["PATRONI_POSTGRESQL_CONNECT_ADDRESS"] == f"{name}:5432"
        assert f"{PATRONI.relative_to(ROOT)}" in " ".join(found[name]["volumes"])


def test_the_app_reaches_the_primary_and_the_replicas_through_the_database_proxy(
    compose: dict[str, Any],
) -> None:
    found = services(compose)
    text = DB_PROXY.read_text()
    assert re.findall(r"server (\w+) (\w+):5432", text) == [(n, n) for n in NODES] * 2
    ports = dict(re.findall(r"listen (\w+)\n    bind \*:(\d+)", text))
    assert ports == {"primary": "5000", "replica": "5001"}
    for name in APP:
        environment = found[name]["environment"]
        primary = urlsplit(environment["DATABASE_URL"])
        replica = urlsplit(environment["DATABASE_READ_URL"])
        assert (primary.hostname, primary.port) == ("db", 5000), name
        assert (replica.hostname, replica.port) == ("db", 5001), name
        redis = urlsplit(environment["REDIS_URL"])
        assert redis.hostname == "redis", name


def test_the_api_proxy_is_the_shipped_config_naming_both_hosts(compose: dict[str, Any]) -> None:
    found = services(compose)
    proxy = found["api"]
    environment = proxy["environment"]
    text = API_PROXY.read_text().splitlines()
    lines = [line for line in text if not line.lstrip().startswith("#")]
    wanted = set(re.findall(r"\$\{(\w+)\}", "\n".join(lines)))
    assert wanted
    assert wanted <= set(environment), wanted - set(environment)
    for variable, host in (("SHOEBOX_API1", "api1"), ("SHOEBOX_API2", "api2")):
        name, _, port = environment[variable].partition(":")
        assert name == host
        assert found[host]["environment"]["SHOEBOX_API_PORT"] == port
    mounted = " ".join(proxy["volumes"])
    assert "./deploy/haproxy/api.cfg" in mounted
    assert "./deploy/haproxy/503.http" in mounted


@pytest.mark.skipif(shutil.which("haproxy") is None, reason="haproxy is not installed")
def test_haproxy_accepts_both_configs_as_compose_fills_them(compose: dict[str, Any]) -> None:
    checked = subprocess.run(
        ["haproxy", "-c", "-f", str(DB_PROXY)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    environment = {
        **os.environ,
        **services(compose)["api"]["environment"],
        "SHOEBOX_HAPROXY_DIR": str(API_PROXY.parent),
    }
    checked = subprocess.run(
        ["haproxy", "-c", "-f", str(API_PROXY)],
        capture_output=True,
        text=True,
        check=False,
        env=environment,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
