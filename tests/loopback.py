"""What the test scripts share on loopback: free ports, and waiting for a process to listen.

Imported by tests/sdk/e2e.py, tests/clients/run.py and tests/proxy/squid.py.
"""

import os
import socket
import time


def free_ports(n):
    """n different free ports: each socket stays bound until all are chosen."""
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def wait_for(port, proc=None, name="the server", log=None):
    """Returns once something listens on 127.0.0.1:`port`; fails when `proc` (if given) exits
    first, with the end of its `log` file, or after 10 s."""
    for _ in range(200):
        if proc is not None and proc.poll() is not None:
            tail = ""
            if log and os.path.exists(log):
                with open(log) as f:
                    tail = f.read()[-2000:]
            raise RuntimeError(f"{name} exited ({proc.returncode}) before it listened on 127.0.0.1:{port}:\n{tail}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2) as probe:
                # A probe whose source port is the port it dials connects to itself.
                if probe.getsockname() != probe.getpeername():
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{name}: nothing listens on 127.0.0.1:{port}")
