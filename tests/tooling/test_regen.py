"""scripts/regen.sh keeps generated/ in step with openapi.yaml."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
REGEN = ROOT / "scripts" / "regen.sh"

pytestmark = pytest.mark.slow


def run_check(spec: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(REGEN), "--check", "--spec", str(spec)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


class TestRegenCheck:
    def test_committed_spec_matches_generated(self) -> None:
        """The committed generated/ is exactly what the committed openapi.yaml produces."""
        result = run_check(ROOT / "openapi.yaml")
        assert result.returncode == 0, result.stdout + result.stderr

    def test_new_lease_field_is_caught(self, tmp_path: Path) -> None:
        """Adding a field to LockLease makes --check fail and show the new field in the diff."""
        spec = yaml.safe_load((ROOT / "openapi.yaml").read_text())
        lease = spec["components"]["schemas"]["LockLease"]
        lease["properties"]["holder_hostname"] = {"type": "string"}
        lease["required"].append("holder_hostname")
        changed = tmp_path / "openapi.yaml"
        changed.write_text(yaml.safe_dump(spec, sort_keys=False))

        result = run_check(changed)

        assert result.returncode == 1, result.stdout + result.stderr
        assert "holder_hostname" in result.stdout
        assert "generated/ is stale" in result.stderr

    def test_spec_problem_is_an_error(self, tmp_path: Path) -> None:
        """A spec the generator only partly understands fails rather than dropping code."""
        spec = yaml.safe_load((ROOT / "openapi.yaml").read_text())
        spec["paths"]["/v1/locks/{key}"]["get"]["responses"]["200"]["content"]["application/json"][
            "schema"
        ] = {"$ref": "#/components/schemas/DoesNotExist"}
        broken = tmp_path / "openapi.yaml"
        broken.write_text(yaml.safe_dump(spec, sort_keys=False))

        result = run_check(broken)

        assert result.returncode == 1
        assert "generator reported problems" in result.stderr
