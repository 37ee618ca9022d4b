"""The alert rules and the Grafana dashboard in config/: promtool checks the rules and runs
their unit tests; every expression, the dashboard's included, parses as PromQL and names only
families docs/metrics.md documents (which tests/integration/test_metrics.py checks against
live nodes)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).parents[2]
CONFIG = ROOT / "config"
PROMTOOL = shutil.which("promtool") or str(Path(sys.executable).parent / "promtool")
# CI's machine can fetch promtool (scripts/test does): there, its absence is a failure
needs_promtool = pytest.mark.skipif(
    not Path(PROMTOOL).exists() and not os.environ.get("CI"),
    reason="promtool is not installed (scripts/test fetches it from Debian's prometheus package)",
)
_FAMILY = re.compile(r"\b((?:kraftlite|process)_[a-z_]+)")
_ROW = re.compile(r"^\| `([a-z_]+)` \| (counter|gauge|histogram) \|")


def documented() -> set[str]:
    """Every series name a documented family exports (histograms' parts, counters' _total)."""
    names = set()
    for line in (ROOT / "docs" / "metrics.md").read_text().splitlines():
        found = _ROW.match(line)
        if found:
            name, kind = found.groups()
            names.add(name)
            if kind == "histogram":
                names |= {f"{name}_bucket", f"{name}_count", f"{name}_sum"}
    return names


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((CONFIG / "grafana-dashboard.json").read_text())
    return loaded


def dashboard_exprs() -> list[str]:
    return [t["expr"] for p in dashboard()["panels"] for t in p.get("targets", [])]


def rule_exprs() -> list[str]:
    rules = yaml.safe_load((CONFIG / "prometheus-alerts.yml").read_text())
    return [r["expr"] for g in rules["groups"] for r in g["rules"]]


def test_every_expression_names_only_documented_families() -> None:
    known = documented()
    exprs = rule_exprs() + dashboard_exprs()
    assert len(exprs) > 30
    for expr in exprs:
        unknown = set(_FAMILY.findall(expr)) - known
        assert not unknown, (expr, unknown)


def test_the_dashboard_is_a_grafana_dashboard_with_unique_panels_in_the_grid() -> None:
    loaded = dashboard()
    assert loaded["uid"] and loaded["title"] and loaded["schemaVersion"] >= 36
    ids = [p["id"] for p in loaded["panels"]]
    assert len(ids) == len(set(ids))
    for panel in loaded["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        for target in panel.get("targets", []):
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]
    names = {v["name"] for v in loaded["templating"]["list"]}
    assert {"datasource", "job"} <= names


@needs_promtool
def test_promtool_checks_the_rules_and_passes_their_unit_tests() -> None:
    for args in (
        ["check", "rules", "prometheus-alerts.yml"],
        ["test", "rules", "prometheus-alerts.test.yml"],
    ):
        done = subprocess.run(
            [PROMTOOL, *args], cwd=CONFIG, capture_output=True, text=True, timeout=60, check=False
        )
        assert done.returncode == 0, done.stdout + done.stderr


@needs_promtool
def test_every_dashboard_expression_parses_as_promql(tmp_path: Path) -> None:
    """Grafana's variables replaced as Grafana would, each expression is made a recording
    rule: promtool's rule check parses it."""
    rules = [
        {
            "record": f"dashboard:panel_{i}",
            "expr": expr.replace("$__rate_interval", "5m").replace("$job", "kraftlite"),
        }
        for i, expr in enumerate(dashboard_exprs())
    ]
    path = tmp_path / "dashboard-rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    done = subprocess.run(
        [PROMTOOL, "check", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
