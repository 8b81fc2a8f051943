"""The release step (docs/upgrades.md#releasing): record this version's workflow histories.

    .venv/bin/python scripts/record_release.py

runs tests/workflows with the harness recording every execution it saw (tests/workflows/recording.py)
into tests/histories/<version>/, where <version> is pyproject.toml's; every later commit's test suite
replays them (tests/workflows/test_release_histories.py). A version is recorded once: bump the version in
pyproject.toml first (an existing directory is refused, `--replace` overwrites it before the release is
published). Beside the histories it keeps the release's own code, `source.tar.gz` (testbed/releases.py),
which the upgrade test runs as the previous release. The release is the commit that adds
tests/histories/<version>/: commit them with the code they were recorded from.

    .venv/bin/python scripts/record_release.py --source-of COMMIT

writes only the code, as it was at COMMIT, for a version recorded before the release step kept it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from importlib import metadata
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from testbed.releases import HISTORIES, ROOT, SOURCE, pack_release, release_files  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replace", action="store_true", help="overwrite this version's recorded histories")
    parser.add_argument("--source-of", metavar="COMMIT", help="only write the code of the release at COMMIT")
    args = parser.parse_args()
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    target = HISTORIES / version
    if args.source_of is not None:
        if not target.exists():
            print(f"record_release: no histories recorded for {version}", file=sys.stderr)
            return 1
        pack_release(release_files(args.source_of), target / SOURCE)
        print(f"record_release: the code of {args.source_of} in {(target / SOURCE).relative_to(ROOT)}")
        return 0
    if target.exists() and not args.replace:
        print(f"record_release: {target.relative_to(ROOT)} exists: bump the version first", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="ferry-histories-") as scratch:
        env = {**os.environ, "FERRY_RECORD_HISTORIES": scratch}
        # Not the replay of earlier releases: it records nothing, and needs no release to be recorded yet.
        replays = "--ignore=tests/workflows/test_release_histories.py"
        pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", replays, "tests/workflows"]
        tests = subprocess.run(pytest, cwd=ROOT, env=env)
        if tests.returncode != 0:
            print("record_release: the workflow tests failed: nothing recorded", file=sys.stderr)
            return 1
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(scratch, target)
    pack_release(release_files(), target / SOURCE)
    recorded = {"version": version, "temporalio": metadata.version("temporalio")}
    release = {**recorded, "tests": len(list(target.glob("*.json.gz")))}
    (target / "RELEASE.json").write_text(json.dumps(release, indent=2) + "\n")
    where = target.relative_to(ROOT)
    print(f"record_release: {release['tests']} tests' histories in {where}: commit them with the code")
    return 0


if __name__ == "__main__":
    sys.exit(main())
