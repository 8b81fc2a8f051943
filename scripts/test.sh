#!/usr/bin/env bash
# Installs whatever is missing for the tests, then runs the whole suite: ruff, mypy and pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

# System packages the integration tests use; installed only when missing (root on CI and dev machines).
need=()
python3 -c 'import ensurepip, venv' 2>/dev/null || need+=(python3-venv)
[ -x /usr/bin/python3 ] || need+=(python3)  # the distribution's Python: SSH test hosts, the test Python image (testbed/containers.py)
[ -x /usr/sbin/sshd ] || need+=(openssh-server)  # tests/fleet: sshd hosts in network namespaces
[ -x /usr/sbin/debootstrap ] || need+=(debootstrap)  # testbed/debian_roots.py: hosts on Debian 11, 12, 13's own Python
command -v sftp >/dev/null 2>&1 || need+=(openssh-client)  # ferry attach, tests/agent/test_ssh_*: ssh, scp, sftp
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v git >/dev/null 2>&1 || need+=(git)  # testbed/git_servers.py: repos cloned from git daemon, http-backend, sshd
command -v slurmctld >/dev/null 2>&1 || need+=(slurm-wlm munge)  # tests/slurm: a real Slurm cluster (testbed/slurm_cluster.py)
[ -x /usr/sbin/nft ] || need+=(nftables)  # tests/slurm: compute nodes reached only through the login host
command -v docker-compose >/dev/null || need+=(docker-compose)  # tests/e2e/test_compose.py: `config` only
command -v podman >/dev/null 2>&1 || need+=(podman)  # tests/containers: the agent's container executor
[ -x /usr/sbin/runc ] || need+=(runc)  # podman's runtime here (docs/containers.md)
[ -x /bin/busybox ] || need+=(busybox-static)  # testbed/containers.py: the test images
command -v tmux >/dev/null 2>&1 || need+=(tmux)  # tests/e2e: ferry attach in a terminal
command -v chromium >/dev/null 2>&1 || need+=(chromium)  # tests/e2e/test_web_ui.py: the Web UI as a browser renders it
command -v docker-registry >/dev/null 2>&1 || need+=(docker-registry)  # testbed/registry.py: real image pulls
compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null || need+=(postgresql)  # tests/store/test_store_postgres.py
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  else
    echo "scripts/test.sh: please install: ${need[*]}" >&2; exit 1
  fi
fi

[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[dev]'

.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
if [ $# -gt 0 ]; then exec .venv/bin/pytest -q "$@"; fi

# The whole suite as two pytest processes side by side (docs/README.md#the-tests): the embedded stack's
# tests and the rest.
stacks=(tests/e2e tests/chaos tests/upgrade)
logs=$(mktemp -d)
.venv/bin/pytest -q -p no:cacheprovider --durations=15 "${stacks[@]}" >"$logs/stacks.log" 2>&1 &
first=$!
.venv/bin/pytest -q -p no:cacheprovider --durations=15 "${stacks[@]/#/--ignore=}" >"$logs/rest.log" 2>&1 &
second=$!
status=0
wait "$first" || status=$?
echo "=== ${stacks[*]}"; cat "$logs/stacks.log"
wait "$second" || status=$?
echo "=== the rest of tests/"; cat "$logs/rest.log"
exit "$status"
