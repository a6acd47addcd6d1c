"""Hostile programs for the code_sandbox tests (issue 17): each tries one escape or abuse.

Every program prints ESCAPED only if its attack worked (the test also checks the host's
side: its listeners, files and processes), and the test's reference expects
exactly ESCAPED, so a contained program scores 0 whatever else it does. `{port}`,
`{udp_port}`, `{abstract}`, `{host_pid}` and `{secret_path}` are filled in by the test
(a listener and a file it owns on the host). Kept as data, one entry per attack, so a new
attack is one line.
"""

from __future__ import annotations

ESCAPED_REFERENCE = '{"inputs": [""], "outputs": ["ESCAPED"]}'

# name -> (program, how the sandbox contains it)
HOSTILE: dict[str, tuple[str, str]] = {
    "fork_bomb": ("""
import os
while True:
    os.fork()
""", "RLIMIT_NPROC; the wall-clock kill takes the PID namespace down"),
    "detached_daemon": ("""
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(3600)
        print("ESCAPED")
""", "the sandbox's PID 1 exits with the program: the kernel kills its namespace"),
    "memory_bomb": ("""
x = bytearray(8 << 30)
print("ESCAPED")
""", "RLIMIT_AS: MemoryError"),
    "memory_creep": ("""
blocks = []
while True:
    blocks.append(bytearray(64 << 20))
""", "RLIMIT_AS: MemoryError before the host notices"),
    "busy_loop": ("""
while True:
    pass
""", "RLIMIT_CPU / wall-clock kill"),
    "sleep_forever": ("""
import time
time.sleep(10 ** 6)
print("ESCAPED")
""", "wall-clock kill (no CPU used)"),
    "write_outside_tmp": ("""
done = []
for path in ["/work/main/ESCAPED_MARK", "/usr/ESCAPED_MARK", "/ESCAPED_MARK",
             "/sandbox/ESCAPED_MARK", "/etc/ESCAPED_MARK", "/root/ESCAPED_MARK"]:
    try:
        open(path, "w").write("x")
        done.append(path)
    except OSError:
        pass
if done:
    print("ESCAPED")
""", "read-only root; only /usr is bound, read-only"),
    "overwrite_own_program": ("""
open("/sandbox/main.py", "w").write("print('ESCAPED')")
print("ESCAPED")
""", "the program is bound read-only"),
    "read_project_files": ("""
import os
for path in ["/work/main/pyproject.toml", "/work/main", "{secret_path}"]:
    try:
        os.listdir(path) if os.path.isdir(path) else open(path).read()
        print("ESCAPED")
    except OSError:
        pass
""", "not bound into the sandbox"),
    "read_home": ("""
import os
for path in ["/root", "/home", "/root/.bashrc", "/etc/shadow", "/etc/passwd"]:
    try:
        os.listdir(path) if os.path.isdir(path) else open(path).read()
        print("ESCAPED")
    except OSError:
        pass
""", "not bound (no /root, /home or /etc in the sandbox)"),
    "symlink_out": ("""
import os
os.symlink("/work/main/pyproject.toml", "/tmp/link")
print(open("/tmp/link").read() and "ESCAPED")
""", "a symlink resolves inside the sandbox's own root"),
    "socket_localhost_tcp": ("""
import socket
s = socket.create_connection(("127.0.0.1", {port}), timeout=1)
s.sendall(b"ESCAPED")
print("ESCAPED")
""", "own network namespace: its loopback is not the host's"),
    "socket_localhost_udp": ("""
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(1)
s.sendto(b"ESCAPED", ("127.0.0.1", {udp_port}))
if s.recv(10) == b"ACK":  # the host's listener answers every datagram it gets
    print("ESCAPED")
""", "own network namespace: the datagram stays in the sandbox's own loopback"),
    "socket_internet": ("""
import socket
for host in [("1.1.1.1", 53), ("8.8.8.8", 53)]:
    try:
        socket.create_connection(host, timeout=1)
        print("ESCAPED")
    except OSError:
        pass
socket.getaddrinfo("example.com", 80)
print("ESCAPED")
""", "no network interface, no resolver"),
    "abstract_unix_socket": ("""
import socket
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect("\\0{abstract}")
print("ESCAPED")
""", "abstract unix sockets belong to the network namespace"),
    "kill_parent": ("""
import os, signal
for pid in [os.getppid(), 1, {host_pid}]:
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
os.kill(-1, signal.SIGKILL)
""", "PID namespace: the host's processes are not visible, its own PID 1 ignores it"),
    "ptrace_parent": ("""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
PTRACE_ATTACH = 16
for pid in [os.getppid(), 1, {host_pid}]:
    if libc.ptrace(PTRACE_ATTACH, pid, 0, 0) == 0:
        print("ESCAPED")
""", "no capabilities, PID namespace: the host pid does not exist inside"),
    "spawn_shell": ("""
import subprocess
out = subprocess.run(["/bin/sh", "-c", "cat /work/main/pyproject.toml; id -u"],
                     capture_output=True, text=True).stdout
if "flywheel" in out or out.strip().endswith("0"):
    print("ESCAPED")
""", "the shell runs inside the same sandbox, as nobody"),
    "fill_tmp": ("""
n = 0
with open("/tmp/fill", "wb") as f:
    while True:
        f.write(b"x" * (1 << 20))
        n += 1
        if n > 64:
            print("ESCAPED")
            break
""", "RLIMIT_FSIZE and the tmpfs size"),
    "fill_stdout": ("""
import sys
while True:
    sys.stdout.write("x" * 65536)
""", "RLIMIT_FSIZE on the output file (SIGXFSZ)"),
    "raise_rlimits": ("""
import resource
for res in [resource.RLIMIT_CPU, resource.RLIMIT_AS, resource.RLIMIT_NPROC,
            resource.RLIMIT_FSIZE, resource.RLIMIT_NOFILE]:
    try:
        resource.setrlimit(res, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        print("ESCAPED")
    except (ValueError, OSError):
        pass
""", "hard limit = soft limit, and no CAP_SYS_RESOURCE"),
    "proc_escape": ("""
import os
pids = [p for p in os.listdir("/proc") if p.isdigit()]
if str({host_pid}) in pids or len(pids) > 5:
    print("ESCAPED")
for path in ["/proc/1/root/work", "/proc/1/root/root", "/proc/{host_pid}/environ"]:
    try:
        os.listdir(path) if os.path.isdir(path) else open(path).read()
        print("ESCAPED")
    except OSError:
        pass
""", "fresh /proc of its own PID namespace; /proc/1 is the sandbox's own init"),
    "proc_sys_write": ("""
for path in ["/proc/sys/kernel/hostname", "/proc/sysrq-trigger", "/proc/sys/vm/drop_caches"]:
    try:
        open(path, "w").write("1")
        print("ESCAPED")
    except OSError:
        pass
""", "no capabilities in the host's namespaces: /proc/sys is not writable"),
    "become_root": ("""
import os
for call in [lambda: os.setuid(0), lambda: os.setgid(0), lambda: os.seteuid(0)]:
    try:
        call()
    except OSError:
        pass
if os.geteuid() == 0 or os.getuid() == 0:
    print("ESCAPED")
""", "no CAP_SETUID; no_new_privs"),
    "new_user_namespace": ("""
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWUSER, CLONE_NEWNS = 0x10000000, 0x00020000
if libc.unshare(CLONE_NEWUSER) == 0 or libc.unshare(CLONE_NEWNS) == 0:
    print("ESCAPED")
""", "--disable-userns; no CAP_SYS_ADMIN"),
    "mount_and_chroot": ("""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
if libc.mount(b"none", b"/tmp", b"tmpfs", 0, None) == 0:
    print("ESCAPED")
try:
    os.chroot("/tmp")
    print("ESCAPED")
except OSError:
    pass
""", "no CAP_SYS_ADMIN / CAP_SYS_CHROOT"),
    "open_files": ("""
fds = []
try:
    while True:
        fds.append(open("/dev/null"))
except OSError:
    pass
if len(fds) > 1000:
    print("ESCAPED")
""", "RLIMIT_NOFILE"),
    "thread_bomb": ("""
import threading, time
n = 0
while True:
    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
    n += 1
    if n > 5000:
        print("ESCAPED")
        break
""", "RLIMIT_NPROC counts threads; wall-clock kill"),
    "devices": ("""
import os
for dev in ["/dev/sda", "/dev/mem", "/dev/kmsg", "/dev/vda", "/dev/nvme0n1"]:
    try:
        open(dev, "rb").read(1)
        print("ESCAPED")
    except OSError:
        pass
""", "a fresh minimal /dev (null, zero, random, tty ...)"),
    "environment_secrets": ("""
import os
if set(os.environ) - {"PATH", "HOME", "LANG", "PWD", "LC_CTYPE"}:
    print("ESCAPED")
""", "--clearenv: the worker's environment does not reach the program"),
    "change_hostname": ("""
import socket
try:
    socket.sethostname("escaped")
    print("ESCAPED")
except OSError:
    pass
""", "own UTS namespace, and no CAP_SYS_ADMIN"),
}
