"""dsh under Harbor (docs/harbor.md, "Tests").

Run by .ci/run in a virtual environment with the packages of requirements.txt, after
`cargo build -p dsh-cli -p dsh-test-support --bins`:

- Harbor's own ACP runner (harbor/agents/installed/acp_runner.py, unchanged, from the installed
  package) drives the built `dsh acp` through a scripted tool task served by the fake provider
  (`dsh-fake-provider`) on loopback: exit 0, stopReason end_turn, a usage_update whose tokens
  are the provider's, the model Harbor asked for in every request body, the tool's effect on
  disk; the session it leaves exports as a valid ATIF trajectory.
- `dsh sessions export --format atif` of dsh's recorded sessions (text turns, tool turns,
  sub-agents, a compaction) passes Harbor's trajectory validator.

Paths come from the environment: DSH_BIN (the dsh binary) and DSH_FAKE_PROVIDER_BIN, else
target/debug/ of the repository.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from harbor.agents.installed import acp as harbor_acp
from harbor.utils.trajectory_validator import TrajectoryValidator

REPO = Path(__file__).resolve().parents[2]
DSH = Path(os.environ.get("DSH_BIN", REPO / "target" / "debug" / "dsh"))
FAKE = Path(
    os.environ.get("DSH_FAKE_PROVIDER_BIN", REPO / "target" / "debug" / "dsh-fake-provider")
)
RUNNER = Path(harbor_acp.__file__).with_name("acp_runner.py")
FIXTURES = REPO / "fixtures" / "dsh"
REQUESTED_MODEL = "deepseek/deepseek-v4-pro"


def require_binaries() -> None:
    for path in (DSH, FAKE):
        if not path.is_file():
            pytest.fail(
                f"{path} is missing: build it first "
                "(cargo build -p dsh-cli -p dsh-test-support --bins)"
            )


def validate(path: Path) -> None:
    validator = TrajectoryValidator()
    assert validator.validate(path), f"{path}: {validator.errors}"


@pytest.fixture()
def provider(tmp_path: Path):
    """The fake provider process: yields (base_url, usage list, requests file)."""
    require_binaries()
    requests = tmp_path / "requests.json"
    proc = subprocess.Popen(
        [str(FAKE), "--script", "tool-task", "--requests", str(requests)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        hello = json.loads(proc.stdout.readline())
        yield hello["base_url"], hello["usage"], requests
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=10)


def test_harbor_acp_runner_completes_a_tool_task_with_usage_and_model(
    tmp_path: Path, provider
) -> None:
    base_url, usage, requests_file = provider
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    logs = tmp_path / "logs"
    home = tmp_path / "dsh-home"
    # Harbor copies the runner into the task container (/installed-agent/acp_runner.py); run
    # a copy too, since beside Harbor's own acp.py, `import acp` would find that module.
    runner = tmp_path / "installed-agent" / "acp_runner.py"
    runner.parent.mkdir()
    runner.write_bytes(RUNNER.read_bytes())
    launcher = tmp_path / "acp-launch.sh"
    launcher.write_text(f'#!/bin/sh\nexec {DSH} acp "$@"\n')
    launcher.chmod(0o755)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "DSH_HOME": str(home),
        "DEEPSEEK_BASE_URL": base_url,
        "DEEPSEEK_API_KEY": "sk-harbor-test",
        # The task container is the sandbox (docs/harbor.md, "Permissions").
        "DSH_PERMISSION_MODE": "danger-full-access",
        "ACP_RUNNER_REQUESTED_MODEL": REQUESTED_MODEL,
    }
    done = subprocess.run(
        [
            sys.executable,
            str(runner),
            "--instruction",
            "Create harbor-done.txt containing the word harbor.",
            "--logs-dir",
            str(logs),
            "--launcher",
            str(launcher),
        ],
        cwd=workspace,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    summary_path = logs / "acp-summary.json"
    assert summary_path.is_file(), done.stderr
    summary = json.loads(summary_path.read_text())
    assert done.returncode == 0, (summary.get("error"), done.stderr[-2000:])
    assert summary["prompt_response"]["stopReason"] == "end_turn", summary
    assert summary.get("resolved_session_model_id") in ("deepseek-v4-pro", REQUESTED_MODEL), summary

    # The last usage_update carries the provider's numbers: the last call's context and the
    # session's cumulative counts.
    update = summary["latest_usage_update"]
    assert update is not None, summary
    last = usage[-1]
    assert update["used"] == last["prompt_tokens"] + last["completion_tokens"], update
    assert update["size"] > 0
    counts = update["_meta"]["dsh"]
    assert counts["inputTokens"] == sum(u["prompt_tokens"] for u in usage), counts
    assert counts["outputTokens"] == sum(u["completion_tokens"] for u in usage), counts
    assert counts["cachedReadTokens"] == sum(u["prompt_cache_hit_tokens"] for u in usage)
    assert update["cost"]["currency"] == "USD" and update["cost"]["amount"] > 0

    # Every model call went out with the model Harbor asked for.
    requests = json.loads(requests_file.read_text())
    calls = [r for r in requests if r["path"].endswith("/chat/completions")]
    assert len(calls) == len(usage), requests
    assert all(r["body"]["model"] == "deepseek-v4-pro" for r in calls), [
        r["body"]["model"] for r in calls
    ]
    assert (workspace / "harbor-done.txt").read_text().strip() == "harbor"

    # The session dsh logged exports as ATIF that Harbor accepts, with the same totals.
    session_id = summary["session"]["sessionId"]
    out = tmp_path / "trajectory.json"
    subprocess.run(
        [str(DSH), "sessions", "export", "--format", "atif", session_id, "-o", str(out)],
        env={**env, "DSH_HOME": str(home)},
        cwd=workspace,
        check=True,
    )
    validate(out)
    trajectory = json.loads(out.read_text())
    assert trajectory["final_metrics"]["total_prompt_tokens"] == counts["inputTokens"]
    assert trajectory["final_metrics"]["total_completion_tokens"] == counts["outputTokens"]
    assert any(s.get("tool_calls") for s in trajectory["steps"])


def recorded_sessions() -> list[Path]:
    logs = sorted((FIXTURES / "acp-snapshots").glob("*/session.jsonl"))
    logs.append(FIXTURES / "examples/acp-agent/tests/snapshots/subagent-multi/session.jsonl")
    logs.append(
        FIXTURES / "examples/headless-agent/tests/snapshots/compaction-recovery/session.jsonl"
    )
    return logs


@pytest.mark.parametrize(
    "log", recorded_sessions(), ids=lambda p: p.parent.name
)
def test_recorded_session_exports_valid_atif(tmp_path: Path, log: Path) -> None:
    require_binaries()
    out = tmp_path / "trajectory.json"
    subprocess.run(
        [str(DSH), "sessions", "export", "--format", "atif", str(log), "-o", str(out)],
        env={"PATH": os.environ.get("PATH", ""), "DSH_HOME": str(tmp_path / "home")},
        check=True,
    )
    validate(out)
    trajectory = json.loads(out.read_text())
    if log.parent.name == "subagent-multi":
        assert len(trajectory["subagent_trajectories"]) == 2
    if log.parent.name == "compaction-recovery":
        assert any(s["source"] == "system" for s in trajectory["steps"])


def test_registry_manifest_is_an_entry_harbor_accepts() -> None:
    """dist/acp-registry/dsh/agent.json parses as Harbor's ACP registry entry and runs `dsh acp`."""
    from harbor.agents.installed.acp import AcpRegistryEntry

    manifest = REPO / "dist" / "acp-registry" / "dsh" / "agent.json"
    entry = AcpRegistryEntry(**json.loads(manifest.read_text()))
    assert entry.id == "dsh"
    cargo = (REPO / "Cargo.toml").read_text()
    assert f'version = "{entry.version}"' in cargo, "manifest version is not the workspace's"
    binaries = entry.distribution.binary or {}
    assert {"linux-x86_64", "linux-aarch64"} <= set(binaries)
    for target in binaries.values():
        assert target.cmd == "./dsh" and target.args == ["acp"]
        assert target.archive.endswith(".tar.gz") and target.checksum
