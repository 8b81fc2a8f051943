"""What a deployment runs on an SSH host, with the host's own interpreter, over SSH (activities/ssh_host.py).

Every step is one exec on the host's SSH connection, no SFTP: `sh -c CHECK_THEN_RUN` checks the
interpreter, then runs ENSURE_SCRIPT with it; the bundle, when the host lacks it, is sent as the stdin of
`sh -c RECEIVE` (so an sshd without an SFTP subsystem serves as well). The scripts use the standard library
only, nothing newer than Python 3.9 (the oldest a host may have), and print one JSON line for the worker.
"""

from __future__ import annotations

# Prints the interpreter's version and extension suffix; old enough Python to report a mismatch.
VERSION_SCRIPT = (
    "import sys, sysconfig; "
    "print(sys.version_info[0], sys.version_info[1], sysconfig.get_config_var('EXT_SUFFIX'))"
)

NO_PYTHON, WRONG_PYTHON = 97, 98
# `sh -c CHECK_THEN_RUN python version-script expected ensure-script args`: one exec that prints the
# interpreter's version line and, only when it is the expected one, runs the ensure script with it.
CHECK_THEN_RUN = (
    f'v=$("$0" -c "$1") || exit {NO_PYTHON}; printf "%s\\n" "$v"; '
    f'[ "$v" = "$2" ] || exit {WRONG_PYTHON}; exec "$0" -I -S -c "$3" "$4"'
)
# `sh -c ASK_PYTHON python version-script`: the interpreter's version line, asked once before the first
# deployment, so that the bundle for it is the only one built.
ASK_PYTHON = f'"$0" -c "$1" || exit {NO_PYTHON}'

# `sh -c RECEIVE path`: stdin to `path`, whole or not at all (the ensure script checks its hash).
RECEIVE = 'umask 077 && cat > "$0.part" && mv -f "$0.part" "$0"'

# Makes sure the agent of a bundle runs under a remote dir, under its supervisor (agent/supervisor.py),
# under a lock; one JSON line tells the worker:
# {"status": "running", port, pid, supervisor, token, reused, dir, home} | {"status": "need-bundle",
# "upload": path} | {"status": "error", "log": tail, "damaged": bool} | {"status": "stopped"}
# | {"status": "restarting", "supervised" or "down", "starts": n} (a probe: is the supervisor starting the
# agent again, is the agent it started ready, or is there no supervisor?).
ENSURE_SCRIPT = r"""
import fcntl, hashlib, json, os, secrets, signal, socket, subprocess, sys, tarfile, time
args = json.loads(sys.argv[1])
base = os.path.abspath(os.path.expanduser(args["dir"]))
bundles = os.path.join(base, "bundles")
bundle = os.path.join(bundles, args["bundle"])
state_path, token_path = os.path.join(base, "agent.json"), os.path.join(base, "token")
supervised_path, log_path = os.path.join(base, "supervisor.json"), os.path.join(base, "agent.log")
# Private whatever the host's umask, as the local agent's are (docs/fleets.md#what-a-host-needs): the
# agent's directory, log, state and token, its data, the volumes it makes; its jobs inherit the umask too.
os.umask(0o077)
os.makedirs(bundles, mode=0o700, exist_ok=True)
os.chmod(base, 0o700)  # made by an earlier release under the host's umask, say

def runs_from(pid, marker):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return marker.encode() in f.read()
    except (OSError, TypeError):
        return False

def supervised():
    try:
        with open(supervised_path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {"pid": 0, "ready": False, "starts": 0}

def agent_pid():
    pid = supervised()["pid"]
    return pid if runs_from(pid, bundles) else None

def read_state():
    try:
        with open(state_path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None

def stop(pid):
    # The supervisor passes SIGTERM on to its agent; whichever lingers is killed.
    found = [p for p in (pid, agent_pid()) if runs_from(p, bundles)]
    if found:
        os.kill(found[0], signal.SIGTERM)
    deadline = time.monotonic() + 10
    while any(runs_from(p, bundles) for p in found) and time.monotonic() < deadline:
        time.sleep(0.05)
    for p in found:
        if runs_from(p, bundles):
            os.kill(p, signal.SIGKILL)

def reply(**fields):
    print(json.dumps(fields))
    sys.exit(0)

if args.get("probe"):
    state = read_state()
    alive = bool(state) and runs_from(state["pid"], os.path.join(bundles, state["bundle"]))
    agent = supervised()
    restarting = alive and not (agent["ready"] and runs_from(agent["pid"], bundles))
    reply(status="restarting" if restarting else "supervised" if alive else "down", starts=agent["starts"])

def unpack():
    archive = bundle + ".tar.gz"
    if not os.path.exists(archive):
        reply(status="need-bundle", upload=archive)
    digest = hashlib.sha256()
    with open(archive, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    if digest.hexdigest() != args["archive_sha256"]:
        os.remove(archive)
        reply(status="error", damaged=True, log="the agent bundle arrived damaged (its sha256 differs)")
    unpacking = "%s.%d.tmp" % (bundle, os.getpid())
    with tarfile.open(archive) as tar:
        # Ferry's own archive, its hash checked; the `data` filter where there is one (3.14's default).
        tar.extractall(unpacking, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    os.rename(unpacking, bundle)
    os.remove(archive)

with open(os.path.join(base, "lock"), "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    state = read_state()
    if args.get("stop"):
        if state:
            stop(state["pid"])
            os.remove(state_path)
        reply(status="stopped")
    current = state and state["bundle"] == args["bundle"] and runs_from(state["pid"], bundle)
    if current and not args["restart"]:
        with open(token_path) as f:
            reply(status="running", port=state["port"], pid=agent_pid() or 0, supervisor=state["pid"],
                  token=f.read().strip(), reused=True, dir=base, home=os.path.expanduser("~"))
    if not os.path.isdir(bundle):
        unpack()
    if state:
        stop(state["pid"])
    token = secrets.token_urlsafe(32)
    fd = os.open(token_path + ".new", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token)
    os.replace(token_path + ".new", token_path)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    python = [sys.executable, "-I", "-S"]
    agent = [*python, os.path.join(bundle, "ferry_agent.py"), "--port", str(port), "--token-file", token_path,
             "--data-dir", os.path.join(base, "data"), "--log-level", "warning"]
    command = [*python, os.path.join(bundle, "ferry_supervisor.py"), "--port", str(port), "--state-file",
               supervised_path, "--", *agent]
    with open(log_path, "ab") as log:
        start = log.tell()
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=base,
                                start_new_session=True)
    deadline = time.monotonic() + args["startup_timeout"]
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.05)
    else:
        stop(proc.pid)
        with open(log_path, "rb") as f:
            f.seek(start)
            reply(status="error", log=f.read()[-4000:].decode(errors="replace"))
    with open(state_path + ".new", "w") as f:
        json.dump({"bundle": args["bundle"], "port": port, "pid": proc.pid}, f)
    os.replace(state_path + ".new", state_path)
    reply(status="running", port=port, pid=agent_pid() or 0, supervisor=proc.pid, token=token, reused=False,
          dir=base, home=os.path.expanduser("~"))
"""
