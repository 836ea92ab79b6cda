#!/usr/bin/env python3
"""Write dsh's ACP registry entry (dist/acp-registry/dsh/agent.json) from release archives.

Called by release/build after it packed the archives; usable on its own:

    release/manifest.py --version 0.1.0 --repository https://github.com/OWNER/NAME \
        --archives DIR [--manifest dist/acp-registry/dsh/agent.json]

For every platform of the registry (linux-x86_64, linux-aarch64, darwin-x86_64, darwin-aarch64)
DIR must hold `dsh-<version>-<target>.tar.gz`. Each archive is checked before it is named in the
entry: it is a gzip tarball with an executable `dsh` at its top level (Harbor unpacks it and runs
`./dsh acp` from there), and its SHA-256 equals the one in `<archive>.sha256` and in SHA256SUMS
when those files exist. The entry's archive URL is the GitHub release download URL
`<repository>/releases/download/v<version>/<archive>`; the checksum is the archive's SHA-256.
Fields that are not per release (id, name, description, authors, license) are kept from the
existing manifest. Nothing is written unless every check passes. Docs: docs/harbor.md.

Standard library only: it runs under any Python 3.8+.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import tarfile
from pathlib import Path

# Registry platform id -> Rust target triple of its archive.
PLATFORMS = {
    "linux-x86_64": "x86_64-unknown-linux-musl",
    "linux-aarch64": "aarch64-unknown-linux-musl",
    "darwin-x86_64": "x86_64-apple-darwin",
    "darwin-aarch64": "aarch64-apple-darwin",
}

# The Linux archives are what Harbor installs into task containers, where the container is the
# sandbox (docs/harbor.md, "Permissions: the container is the sandbox").
CONTAINER_ENV = {"DSH_PERMISSION_MODE": "danger-full-access"}

REPOSITORY = re.compile(r"^https://github\.com/[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9_.-]+$")
VERSION = re.compile(r"^[0-9]+\.[0-9]+\.[0-9]+(?:[-+][0-9A-Za-z.+-]+)?$")
SHA256 = re.compile(r"^[0-9a-f]{64}$")

DEFAULT_FIELDS = {
    "id": "dsh",
    "name": "dsh",
    "description": "dsh, a coding agent, over the Agent Client Protocol (`dsh acp`).",
    "authors": ["dsh contributors"],
    "license": "MIT",
}


class ManifestError(Exception):
    """A check failed; the message says what and what to do."""


def archive_name(version: str, target: str) -> str:
    return f"dsh-{version}-{target}.tar.gz"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_sums(path: Path) -> dict[str, str]:
    """`sha256sum` output: `<hex>  <name>` (or `<hex> *<name>`) per line."""
    sums: dict[str, str] = {}
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        parts = line.split(maxsplit=1)
        if len(parts) != 2 or not SHA256.match(parts[0].lower()):
            raise ManifestError(
                f"{path}:{number}: not a `sha256sum` line ({line!r}); regenerate it with "
                f"`sha256sum <archive>`"
            )
        sums[parts[1].lstrip("*").strip()] = parts[0].lower()
    return sums


def check_archive(path: Path) -> None:
    """An archive Harbor can use: a gzip tarball with an executable regular `dsh` on top."""
    try:
        with tarfile.open(path, "r:gz") as tar:
            members = {member.name.removeprefix("./"): member for member in tar.getmembers()}
    except (tarfile.TarError, OSError, EOFError) as error:
        raise ManifestError(f"{path} is not a readable .tar.gz ({error}); rebuild it") from error
    binary = members.get("dsh")
    if binary is None:
        raise ManifestError(
            f"{path} has no `dsh` at its top level (it has {sorted(members)[:5]}); Harbor runs "
            f"`./dsh acp` in the unpacked folder, so pack the binary without a directory"
        )
    if not binary.isfile() or not binary.mode & 0o111:
        raise ManifestError(f"{path}: `dsh` is not an executable regular file; pack it with mode 0755")


def checksum(directory: Path, name: str, sums: dict[str, str] | None) -> str:
    path = directory / name
    if not path.is_file():
        raise ManifestError(
            f"missing release archive {path}; build it with `release/build --out {directory}`"
        )
    check_archive(path)
    actual = sha256_of(path)
    side = directory / f"{name}.sha256"
    recorded = []
    if side.is_file():
        recorded.append((side, read_sums(side).get(name)))
    if sums is not None:
        recorded.append((directory / "SHA256SUMS", sums.get(name)))
    for source, value in recorded:
        if value != actual:
            raise ManifestError(
                f"{source} gives {value or 'no checksum'} for {name}, but the archive's SHA-256 "
                f"is {actual}; the archive changed after it was summed: rerun release/build"
            )
    return actual


def entry(existing: dict, version: str, repository: str, checksums: dict[str, str]) -> dict:
    manifest = {key: existing.get(key, default) for key, default in DEFAULT_FIELDS.items()}
    manifest["version"] = version
    manifest["repository"] = repository
    # The registry's field order: identity, then distribution.
    ordered = {key: manifest[key] for key in ("id", "name", "version", "description")}
    ordered.update(
        {key: manifest[key] for key in ("repository", "authors", "license")}
    )
    binary = {}
    for platform, target in PLATFORMS.items():
        name = archive_name(version, target)
        target_entry = {
            "archive": f"{repository}/releases/download/v{version}/{name}",
            "checksum": f"sha256:{checksums[platform]}",
            "cmd": "./dsh",
            "args": ["acp"],
        }
        if platform.startswith("linux-"):
            target_entry["env"] = dict(CONTAINER_ENV)
        binary[platform] = target_entry
    ordered["distribution"] = {"binary": binary}
    return ordered


def render(manifest: dict) -> str:
    return json.dumps(manifest, indent=2) + "\n"


def generate(version: str, repository: str, archives: Path, existing: dict) -> str:
    if not VERSION.match(version):
        raise ManifestError(f"version {version!r} is not MAJOR.MINOR.PATCH; check dsh-cli's Cargo.toml")
    repository = repository.rstrip("/")
    if not REPOSITORY.match(repository):
        raise ManifestError(
            f"repository {repository!r} is not https://github.com/OWNER/NAME; set "
            f"`repository` in [workspace.package] of Cargo.toml (or pass --repository)"
        )
    sums_file = archives / "SHA256SUMS"
    sums = read_sums(sums_file) if sums_file.is_file() else None
    checksums = {
        platform: checksum(archives, archive_name(version, target), sums)
        for platform, target in PLATFORMS.items()
    }
    return render(entry(existing, version, repository, checksums))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", required=True, help="release version (dsh-cli's)")
    parser.add_argument("--repository", required=True, help="https://github.com/OWNER/NAME")
    parser.add_argument("--archives", required=True, type=Path, help="folder of the archives")
    parser.add_argument(
        "--manifest",
        type=Path,
        default=Path(__file__).resolve().parents[1] / "dist" / "acp-registry" / "dsh" / "agent.json",
        help="the entry to rewrite (default: dist/acp-registry/dsh/agent.json)",
    )
    args = parser.parse_args(argv)
    try:
        existing = json.loads(args.manifest.read_text()) if args.manifest.is_file() else {}
        if not isinstance(existing, dict):
            raise ManifestError(f"{args.manifest} is not a JSON object; fix or delete it")
        text = generate(args.version, args.repository, args.archives, existing)
    except ManifestError as error:
        print(f"release/manifest: {error}", file=sys.stderr)
        return 1
    except (OSError, json.JSONDecodeError) as error:
        print(f"release/manifest: {error}", file=sys.stderr)
        return 1
    args.manifest.parent.mkdir(parents=True, exist_ok=True)
    temporary = args.manifest.with_name(args.manifest.name + ".tmp")
    temporary.write_text(text)
    temporary.replace(args.manifest)
    print(f"release/manifest: wrote {args.manifest} for dsh {args.version}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
