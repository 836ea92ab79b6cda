"""release/manifest.py and release/build (docs/harbor.md, "Release archives").

Run by .ci/run with the tests of tests/harbor, in the same virtual environment: the entries the
generator writes are parsed with Harbor's own `AcpRegistryEntry`, the shape Harbor's ACP agent
reads. The archives here are small real tarballs (no compilation); release/build itself is
exercised for its argument and tool checks, which run before anything is built.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from harbor.agents.installed.acp import AcpRegistryEntry

REPO = Path(__file__).resolve().parents[2]
GENERATOR = REPO / "release" / "manifest.py"
BUILD = REPO / "release" / "build"
CHECKED_IN = REPO / "dist" / "acp-registry" / "dsh" / "agent.json"
REPOSITORY = "https://github.com/example-owner/dsh-fork"

spec = importlib.util.spec_from_file_location("release_manifest", GENERATOR)
assert spec is not None and spec.loader is not None
manifest = importlib.util.module_from_spec(spec)
spec.loader.exec_module(manifest)


def cargo_field(name: str) -> str:
    """`name = "..."` of [workspace.package] in Cargo.toml (dsh-cli inherits it)."""
    cargo = (REPO / "Cargo.toml").read_text()
    section = cargo.split("[workspace.package]", 1)[1].split("\n[", 1)[0]
    found = re.search(rf'^{name} = "([^"]+)"$', section, re.MULTILINE)
    assert found, f"{name} missing from [workspace.package]"
    return found.group(1)


def pack(path: Path, members: dict[str, tuple[bytes, int]]) -> None:
    with tarfile.open(path, "w:gz") as tar:
        for name, (data, mode) in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = mode
            tar.addfile(info, io.BytesIO(data))


def release_dir(tmp_path: Path, version: str = "1.2.3") -> Path:
    """Four archives as release/build packs them, with their .sha256 files and SHA256SUMS."""
    out = tmp_path / "archives"
    out.mkdir()
    lines = []
    for target in manifest.PLATFORMS.values():
        name = f"dsh-{version}-{target}.tar.gz"
        pack(
            out / name,
            {
                "dsh": (f"binary for {target}".encode(), 0o755),
                "LICENSE": (b"MIT", 0o644),
                "README.md": (b"# dsh", 0o644),
            },
        )
        line = f"{hashlib.sha256((out / name).read_bytes()).hexdigest()}  {name}\n"
        (out / f"{name}.sha256").write_text(line)
        lines.append(line)
    (out / "SHA256SUMS").write_text("".join(lines))
    return out


def run_generator(archives: Path, target: Path, version: str = "1.2.3", repository: str = REPOSITORY):
    return subprocess.run(
        [sys.executable, str(GENERATOR), "--version", version, "--repository", repository,
         "--archives", str(archives), "--manifest", str(target)],
        capture_output=True,
        text=True,
    )


def test_generated_entry_is_one_harbor_accepts(tmp_path: Path) -> None:
    archives = release_dir(tmp_path)
    target = tmp_path / "agent.json"
    shutil.copy(CHECKED_IN, target)
    result = run_generator(archives, target)
    assert result.returncode == 0, result.stderr

    written = json.loads(target.read_text())
    entry = AcpRegistryEntry(**written)
    assert entry.version == "1.2.3"
    assert entry.repository == REPOSITORY
    # Fields that are not per release come from the manifest it replaced.
    previous = json.loads(CHECKED_IN.read_text())
    for field in ("id", "name", "description", "authors", "license"):
        assert written[field] == previous[field]
    binaries = entry.distribution.binary or {}
    assert set(binaries) == set(manifest.PLATFORMS)
    for platform, rust_target in manifest.PLATFORMS.items():
        name = f"dsh-1.2.3-{rust_target}.tar.gz"
        binary = binaries[platform]
        assert binary.archive == f"{REPOSITORY}/releases/download/v1.2.3/{name}"
        assert binary.checksum == hashlib.sha256((archives / name).read_bytes()).hexdigest()
        assert binary.cmd == "./dsh" and binary.args == ["acp"]
        expected_env = {"DSH_PERMISSION_MODE": "danger-full-access"} if platform.startswith("linux") else {}
        assert binary.env == expected_env


def test_a_missing_platform_writes_nothing(tmp_path: Path) -> None:
    archives = release_dir(tmp_path)
    (archives / "dsh-1.2.3-aarch64-apple-darwin.tar.gz").unlink()
    target = tmp_path / "agent.json"
    target.write_text("{}\n")
    result = run_generator(archives, target)
    assert result.returncode == 1
    assert "missing release archive" in result.stderr
    assert "dsh-1.2.3-aarch64-apple-darwin.tar.gz" in result.stderr
    assert target.read_text() == "{}\n"


def test_an_archive_changed_after_summing_is_refused(tmp_path: Path) -> None:
    archives = release_dir(tmp_path)
    name = "dsh-1.2.3-x86_64-unknown-linux-musl.tar.gz"
    pack(archives / name, {"dsh": (b"another binary", 0o755)})
    result = run_generator(archives, tmp_path / "agent.json")
    assert result.returncode == 1
    assert "archive changed after it was summed" in result.stderr
    assert not (tmp_path / "agent.json").exists()


def test_an_archive_harbor_cannot_run_is_refused(tmp_path: Path) -> None:
    archives = release_dir(tmp_path)
    for sums in archives.glob("*.sha256"):
        sums.unlink()
    (archives / "SHA256SUMS").unlink()
    name = "dsh-1.2.3-aarch64-unknown-linux-musl.tar.gz"
    # Packed inside a folder: Harbor would find no ./dsh after unpacking.
    pack(archives / name, {"dsh-1.2.3/dsh": (b"binary", 0o755)})
    result = run_generator(archives, tmp_path / "agent.json")
    assert result.returncode == 1 and "no `dsh` at its top level" in result.stderr

    pack(archives / name, {"dsh": (b"binary", 0o644)})
    result = run_generator(archives, tmp_path / "agent.json")
    assert result.returncode == 1 and "not an executable regular file" in result.stderr

    (archives / name).write_bytes(b"not gzip")
    result = run_generator(archives, tmp_path / "agent.json")
    assert result.returncode == 1 and "not a readable .tar.gz" in result.stderr
    assert not (tmp_path / "agent.json").exists()


@pytest.mark.parametrize(
    "repository",
    ["http://github.com/o/n", "https://gitlab.com/o/n", "https://github.com/o", "git@github.com:o/n"],
)
def test_a_repository_that_is_not_on_github_is_refused(tmp_path: Path, repository: str) -> None:
    result = run_generator(release_dir(tmp_path), tmp_path / "agent.json", repository=repository)
    assert result.returncode == 1 and "is not https://github.com/OWNER/NAME" in result.stderr


def test_the_checked_in_entry_is_the_generators_output() -> None:
    """The entry in the repository: this version, this repository, real checksums, and exactly the
    text the generator writes for them (so it was regenerated, not edited by hand)."""
    text = CHECKED_IN.read_text()
    existing = json.loads(text)
    AcpRegistryEntry(**existing)
    version = cargo_field("version")
    repository = cargo_field("repository")
    assert existing["version"] == version, "rerun release/build after changing the version"
    checksums = {}
    for platform in manifest.PLATFORMS:
        checksum = existing["distribution"]["binary"][platform]["checksum"]
        digest = checksum.removeprefix("sha256:")
        assert re.fullmatch(r"[0-9a-f]{64}", digest), checksum
        assert digest != "0" * 64, f"{platform}: zero checksum, run release/build"
        checksums[platform] = digest
    regenerated = manifest.render(manifest.entry(existing, version, repository, checksums))
    assert text == regenerated


def test_build_names_every_missing_tool(tmp_path: Path) -> None:
    # A PATH with bash and the two commands the script runs before its tool check, nothing else.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "dirname"):
        found = shutil.which(tool)
        assert found, f"{tool} is needed to run release/build"
        (bin_dir / tool).symlink_to(found)
    result = subprocess.run(
        [str(bin_dir / "bash"), str(BUILD), "--targets", "x86_64-apple-darwin"],
        env={"PATH": str(bin_dir), "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1
    assert "release/build: missing tools:" in result.stderr
    for tool in ("cargo (", "rustup (", "cargo-zigbuild (python3 -m pip install cargo-zigbuild)",
                 "python3 (", "sha256sum (", "file ("):
        assert tool in result.stderr, result.stderr


def test_build_refuses_an_unknown_target() -> None:
    result = subprocess.run(
        [str(BUILD), "--targets", "x86_64-apple-darwin,riscv64gc-unknown-linux-gnu"],
        capture_output=True,
        text=True,
        env={**os.environ},
    )
    assert result.returncode == 1
    assert "unknown target 'riscv64gc-unknown-linux-gnu'" in result.stderr
