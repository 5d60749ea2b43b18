#!/usr/bin/env python3
"""Run an installed systemd service the way systemd runs it, on machines where systemd is not
PID 1 (CI's machine, containers): for the package test (scripts/package-test.sh).

    unit-run.py UNIT@INSTANCE start        start it; return once it sent READY=1
    unit-run.py UNIT@INSTANCE stop         its KillSignal, then wait for it to exit
    unit-run.py UNIT@INSTANCE kill         SIGKILL (a crash), as systemd would see one
    unit-run.py UNIT@INSTANCE status       print running/exited and the exit status

What it follows of systemd.service(5) and systemd.exec(5), which is all the units here use:
%i/%I specifiers; EnvironmentFile (KEY=VALUE lines, '#' comments, optional quotes);
ExecStart with ${VAR} as one word and $VAR split on white space; Type=notify (READY=1 on
NOTIFY_SOCKET, with TimeoutStartSec's default of 90 s); KillSignal; TimeoutStopSec; the
Condition ConditionPathExists. State lives in /run/pmkit-unit-run/. It is not systemd: the
units are also checked with `systemd-analyze verify`, and on machines with systemd they run
under it unchanged.
"""
import os
import shlex
import signal
import socket
import subprocess
import sys
import time

STATE = "/run/pmkit-unit-run"
UNIT_DIRS = ["/etc/systemd/system", "/usr/local/lib/systemd/system", "/usr/lib/systemd/system",
             "/lib/systemd/system"]


def die(msg):
    print(f"unit-run: {msg}", file=sys.stderr)
    sys.exit(1)


def load(name):
    template, instance = name.split("@", 1)
    instance = instance.removesuffix(".service")
    for d in UNIT_DIRS:
        path = os.path.join(d, f"{template}@.service")
        if os.path.exists(path):
            break
    else:
        die(f"no unit file {template}@.service in {UNIT_DIRS}")
    keys = {}
    for k, v in entries(path):
        keys.setdefault(k, []).append(v.replace("%i", instance).replace("%I", instance))
    return path, keys


def entries(path):
    """The KEY=VALUE lines of a unit or environment file, comments and [sections] left out."""
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line and line[0] not in "#;[":
                k, _, v = line.partition("=")
                yield k.strip(), v.strip()


def env_file(path):
    env = {}
    for k, v in entries(path):
        if len(v) >= 2 and v[0] == v[-1] and v[0] in "'\"":
            v = v[1:-1]
        env[k] = v
    return env


def expand(cmdline, env):
    """systemd's expansion: ${VAR} is one word, $VAR splits on white space."""
    argv = []
    for word in shlex.split(cmdline):
        if word.startswith("${") and word.endswith("}"):
            argv.append(env.get(word[2:-1], ""))
        elif word.startswith("$") and word[1:].isidentifier():
            argv.extend(env.get(word[1:], "").split())
        else:
            argv.append(word)
    return argv


def pidfile(name):
    return os.path.join(STATE, name + ".pid")


def start(name):
    path, u = load(name)
    for p in u.get("ConditionPathExists", []):
        if not os.path.exists(p):
            die(f"{name}: condition failed: {p} does not exist")
    env = dict(os.environ)
    for f in u.get("EnvironmentFile", []):
        env.update(env_file(f.lstrip("-")))
    argv = expand(u["ExecStart"][-1], env)
    os.makedirs(STATE, exist_ok=True)
    notify = os.path.join(STATE, name + ".notify")
    if os.path.exists(notify):
        os.unlink(notify)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(notify)
    env["NOTIFY_SOCKET"] = notify
    log = open(os.path.join(STATE, name + ".log"), "ab")
    print(f"unit-run: {name}: {shlex.join(argv)}", file=sys.stderr)
    proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                            start_new_session=True, cwd="/")
    with open(pidfile(name), "w") as f:
        f.write(str(proc.pid))
    sock.settimeout(1)
    deadline = time.time() + 90
    while time.time() < deadline:
        try:
            msg = sock.recv(4096).decode()
        except socket.timeout:
            if proc.poll() is not None:
                die(f"{name}: exited with {proc.returncode} before READY=1 (log: {log.name})")
            continue
        if "READY=1" in msg.split("\n"):
            print(f"unit-run: {name}: ready ({msg.strip()!r})", file=sys.stderr)
            return
    die(f"{name}: no READY=1 in 90 s")


def pid_of(name):
    try:
        return int(open(pidfile(name)).read())
    except FileNotFoundError:
        die(f"{name}: not started here")


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie of a parent that is gone is reaped by init; /proc tells the state.
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def stop(name, sig=None):
    _, u = load(name)
    pid = pid_of(name)
    sig = sig or getattr(signal, u.get("KillSignal", ["SIGTERM"])[-1])
    timeout = float(u.get("TimeoutStopSec", ["90"])[-1])
    if alive(pid):
        os.kill(pid, sig)
    deadline = time.time() + timeout
    while alive(pid):
        if time.time() > deadline:
            os.kill(pid, signal.SIGKILL)
            die(f"{name}: still running {timeout} s after {sig!r}: killed")
        time.sleep(0.1)
    print(f"unit-run: {name}: stopped ({sig!r})", file=sys.stderr)


def main():
    if len(sys.argv) != 3:
        die(__doc__.strip().splitlines()[2])
    name, what = sys.argv[1], sys.argv[2]
    if what == "start":
        start(name)
    elif what == "stop":
        stop(name)
    elif what == "kill":
        stop(name, signal.SIGKILL)
    elif what == "status":
        print("running" if alive(pid_of(name)) else "exited")
    else:
        die(f"unknown action {what}")


if __name__ == "__main__":
    main()
