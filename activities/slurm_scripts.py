"""What a Slurm allocation runs on each of its nodes (docs/backends.md#a-slurm-backend): one task per node,
started by the batch script's `srun`, with the node's own interpreter (`python3 -I -S -c NODE_SCRIPT ARGS`).

The script checks the interpreter is the one the bundle was built for, unpacks the bundle (once, under a
lock: the directory is shared by the nodes), starts the agent's supervisor (agent/supervisor.py) with the
agent bound to all of the node's addresses on a free port, and announces it in
`<group dir>/nodes/<node>.json` (`{"port", "pid"}`, or `{"error"}` when it could not start), which the
worker reads through the login node. It then stays, as the allocation's task, until Slurm ends it: on
SIGTERM (the allocation cancelled, preempted or out of time) it stops the agent and every process the
agent started (a job's processes live in their own sessions, which Slurm's proctrack/pgid would miss), so
nothing of Ferry's outlives its allocation. Standard library only, nothing newer than Python 3.9.
"""

from __future__ import annotations

NODE_SCRIPT = r"""
import fcntl, hashlib, json, os, signal, socket, subprocess, sys, sysconfig, tarfile, time
args = json.loads(sys.argv[1])
os.umask(0o077)
node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
group_dir = os.path.abspath(os.path.expanduser(args["group_dir"]))
nodes_dir = os.path.join(group_dir, "nodes")
node_dir = os.path.join(nodes_dir, node)
os.makedirs(node_dir, mode=0o700, exist_ok=True)

def announce(**fields):
    path = os.path.join(nodes_dir, node + ".json")
    with open(path + ".part", "w") as f:
        json.dump(fields, f)
    os.replace(path + ".part", path)

said = "%d %d %s" % (sys.version_info[0], sys.version_info[1], sysconfig.get_config_var("EXT_SUFFIX"))
if said != args["python"]:
    announce(error="the node's %s is Python %s, the login node's %s: the nodes need the login node's "
             "Python (docs/backends.md#what-a-cluster-needs)" % (args["python_name"], said, args["python"]))
    sys.exit(1)

base = os.path.abspath(os.path.expanduser(args["dir"]))
bundle = os.path.join(base, "bundles", args["bundle"])
with open(os.path.join(base, "lock"), "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    if not os.path.isdir(bundle):
        archive = bundle + ".tar.gz"
        digest = hashlib.sha256()
        with open(archive, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
        if digest.hexdigest() != args["archive_sha256"]:
            announce(error="the agent bundle on the shared directory is damaged (its sha256 differs)")
            sys.exit(1)
        unpacking = "%s.%s.%d.tmp" % (bundle, node, os.getpid())
        with tarfile.open(archive) as tar:
            tar.extractall(unpacking, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
        os.rename(unpacking, bundle)

with socket.socket() as probe:
    probe.bind(("0.0.0.0", 0))
    port = probe.getsockname()[1]
python = [sys.executable, "-I", "-S"]
# On all the node's addresses, the API token-protected and the SSH server open to the jobs' own keys only:
# the login node reaches both there (docs/backends.md#dev-environments-and-attach).
agent = [*python, os.path.join(bundle, "ferry_agent.py"), "--host", "0.0.0.0", "--allow-remote",
         "--ssh-host", "0.0.0.0", "--port", str(port),
         "--token-file", os.path.join(group_dir, "token"), "--data-dir", os.path.join(node_dir, "data"),
         "--log-level", "warning"]
command = [*python, os.path.join(bundle, "ferry_supervisor.py"), "--port", str(port), "--state-file",
           os.path.join(node_dir, "supervisor.json"), "--", *agent]
log_path = os.path.join(node_dir, "agent.log")
with open(log_path, "ab") as log:
    start = log.tell()
    # Its own session: Slurm's SIGTERM reaches this script alone, which then stops the whole tree in order.
    proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=node_dir,
                            start_new_session=True)

def tree(root):
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/%s/stat" % entry) as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found, children.get(root, [])

def end(*_):
    # The supervisor and the agent first, at once: an agent that saw its jobs die of this SIGTERM would
    # report them as failed, where the allocation's end (a preemption, say) is why they end.
    pids, agent = tree(proc.pid)
    agents = [proc.pid, *agent]
    for pid in agents:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    rest = [pid for pid in pids if pid not in agents]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in rest:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(os.path.exists("/proc/%d" % p) for p in rest):
            time.sleep(0.05)
        proc.poll()
    sys.exit(0)

signal.signal(signal.SIGTERM, end)
signal.signal(signal.SIGINT, end)
deadline = time.monotonic() + args["startup_timeout"]
while proc.poll() is None and time.monotonic() < deadline:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        break
    except OSError:
        time.sleep(0.05)
else:
    with open(log_path, "rb") as f:
        f.seek(start)
        announce(error=f.read()[-4000:].decode(errors="replace") or "the agent did not start")
    end()
announce(port=port, pid=proc.pid)
while proc.poll() is None:
    time.sleep(1)
announce(error="the agent's supervisor exited (%s)" % proc.returncode)
"""
