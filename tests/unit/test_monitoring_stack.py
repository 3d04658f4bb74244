"""The compose file's Prometheus and Grafana, checked statically: no container engine runs here.

Every panel's query must name metrics the service exports, collected from the real registry
and the scrape-time gauges (service/runtime/metrics.py), with labels those metrics carry; and
Prometheus must scrape every Shoebox process where compose makes it listen.
"""

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import REGISTRY
from prometheus_client.metrics import MetricWrapperBase

from service.runtime import metrics
from service.runtime.settings import MULTIPROC_VARIABLE

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "shoebox.json"
DATASOURCES = ROOT / "deploy" / "grafana" / "provisioning" / "datasources" / "prometheus.yml"
PROVIDERS = ROOT / "deploy" / "grafana" / "provisioning" / "dashboards" / "shoebox.yml"
PROMETHEUS = ROOT / "deploy" / "prometheus" / "prometheus.yml"
# Labels Prometheus adds to every series it scrapes, and a histogram's bucket bound.
TARGET_LABELS = frozenset({"job", "instance"})
SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "gauge": ("",),
}
NAME = re.compile(r"\b(shoebox_[a-z0-9_]+)\b")
SELECTOR = re.compile(r"\b(shoebox_[a-z0-9_]+)\{([^}]*)\}")
MATCHER = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)")
GROUPING = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")


def exported() -> dict[str, frozenset[str]]:
    """Every series name Shoebox's processes export, with the labels each carries."""
    series: dict[str, frozenset[str]] = {}
    recorded = [v for v in vars(metrics).values() if isinstance(v, MetricWrapperBase)]
    assert recorded, "no metric found in service/runtime/metrics.py"
    registered = {family.name: family.type for family in REGISTRY.collect()}
    for metric in recorded:
        (family,) = metric.describe()
        assert registered.get(family.name) == family.type, family.name  # in the real registry
        # prometheus-client keeps a metric's label names only here.
        labels = frozenset(metric._labelnames)
        for suffix in SUFFIXES[family.type]:
            series[family.name + suffix] = labels | ({"le"} if suffix == "_bucket" else frozenset())
    # The gauges the API and the projector measure at each scrape, from the real collector.
    scrape_time = metrics.ScrapeTimeGauges(
        lambda: {"wallets": 0}, lambda: {"q": 0}, lambda: {"q": 0}
    )
    for family in scrape_time.collect():
        series[family.name] = frozenset(label for s in family.samples for label in s.labels)
    return series


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def queries() -> list[tuple[str, str]]:
    return [
        (panel["title"], target["expr"])
        for panel in dashboard()["panels"]
        for target in panel["targets"]
    ]


def test_every_panels_query_names_only_metrics_the_service_exports_with_their_labels() -> None:
    series = exported()
    assert queries()
    for title, expr in queries():
        named = set(NAME.findall(expr))
        assert named, f"{title}: {expr} names no Shoebox metric"
        unknown = named - set(series)
        assert not unknown, f"{title}: {sorted(unknown)} are not exported ({expr})"
        for name, matchers in SELECTOR.findall(expr):
            used = set(MATCHER.findall(matchers))
            assert used <= series[name] | TARGET_LABELS, f"{title}: {name} has no {used}"
        carried = set().union(*(series[name] for name in named)) | TARGET_LABELS
        for grouping in GROUPING.findall(expr):
            grouped = {label.strip() for label in grouping.split(",") if label.strip()}
            assert grouped <= carried, f"{title}: no series of {sorted(named)} has {grouped}"


def test_the_dashboard_shows_what_matters_for_running_shoebox() -> None:
    everything = " ".join(expr for _, expr in queries())
    for shown in (
        'shoebox_events_appended_total{type="BetPlaced"}',  # bets a second
        "rate(shoebox_rounds_total",  # rounds a second
        "shoebox_http_request_duration_seconds_bucket",  # latency
        'status=~"5.."',  # 5xx
        "shoebox_projection_lag_events",
        "shoebox_window_close_delay_seconds_bucket",  # window lateness
        "shoebox_rq_queue_depth",
        "shoebox_rq_workers",
    ):
        assert shown in everything, shown


def test_every_panel_reads_the_provisioned_prometheus() -> None:
    (source,) = yaml.safe_load(DATASOURCES.read_text())["datasources"]
    assert (source["type"], source["url"]) == ("prometheus", "http://prometheus:9090")
    for panel in dashboard()["panels"]:
        assert panel["datasource"]["uid"] == source["uid"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == source["uid"], panel["title"]
    ids = [panel["id"] for panel in dashboard()["panels"]]
    assert len(ids) == len(set(ids))


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return loaded


def metrics_port(command: list[str]) -> str:
    return command[command.index("--metrics-port") + 1]


def test_prometheus_scrapes_the_api_the_worker_and_the_projector_where_compose_listens() -> None:
    services = compose()["services"]
    config = yaml.safe_load(PROMETHEUS.read_text())
    targets = {
        job["job_name"]: [t for c in job["static_configs"] for t in c["targets"]]
        for job in config["scrape_configs"]
    }
    api = services["api"]["environment"]["SHOEBOX_API_PORT"]
    assert targets == {
        "shoebox-api": [f"api:{api}"],
        "shoebox-worker": [f"worker:{metrics_port(services['worker']['command'])}"],
        "shoebox-projector": [f"projector:{metrics_port(services['projector']['command'])}"],
    }
    for name in ("worker", "projector"):
        command = services[name]["command"]
        # Listening on the container's every interface, or Prometheus could not reach it.
        assert command[command.index("--metrics-host") + 1] == "0.0.0.0", name
    # The API serves /metrics on its own port unless told otherwise.
    assert "SHOEBOX_METRICS_ACCESS" not in services["api"]["environment"]


def test_grafana_and_prometheus_mount_files_that_exist_where_their_configs_look() -> None:
    services = compose()["services"]
    mounts: dict[str, str] = {}
    for name in ("prometheus", "grafana"):
        for volume in services[name]["volumes"]:
            source, target = volume.split(":")[:2]
            if source.startswith("./"):
                assert (ROOT / source).exists(), source
                mounts[target] = source
    assert mounts["/etc/prometheus/prometheus.yml"] == "./deploy/prometheus/prometheus.yml"
    (provider,) = yaml.safe_load(PROVIDERS.read_text())["providers"]
    assert mounts[provider["options"]["path"]] == "./deploy/grafana/dashboards"
    assert mounts["/etc/grafana/provisioning/datasources"] == (
        "./deploy/grafana/provisioning/datasources"
    )
    assert mounts["/etc/grafana/provisioning/dashboards"] == (
        "./deploy/grafana/provisioning/dashboards"
    )
    home = services["grafana"]["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home == f"{provider['options']['path']}/{DASHBOARD.name}"
    assert services["grafana"]["depends_on"]["prometheus"]["condition"] == "service_healthy"


def test_a_process_refuses_a_metrics_port_of_its_own_beside_the_apis_shared_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Under `shoebox run` the API's /metrics adds this process's files up already.
    monkeypatch.setenv(MULTIPROC_VARIABLE, str(tmp_path))
    with pytest.raises(ValueError, match="already"):
        metrics.MetricsServer("127.0.0.1", 0)
