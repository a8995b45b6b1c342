"""An outbound proxy on loopback for the client checks. It serves as an HTTP proxy does, on
loopback whatever the host: a `CONNECT` is tunnelled to the port asked for, and a request in
absolute form (`POST http://host:port/path`, as rebound hands it a plain `http://` upstream's) is
passed on to that port as it came. So a candidate whose base URL names `provider.test` is reached
only through it. It wants the credentials below, and it refuses every host under `refused.test`
with a 407, as a proxy does whose credentials are wrong.

Used by run.py: rebound's `upstream_proxy` names it.
"""

import base64
import socket
import socketserver
import threading

USER, PASSWORD = "svc", "proxy-pw-5e1b"
URL_CREDENTIALS = f"{USER}:{PASSWORD}"
BASIC = "Basic " + base64.b64encode(URL_CREDENTIALS.encode()).decode()


class _Handler(socketserver.BaseRequestHandler):
    def handle(self):
        client = self.request
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = client.recv(1)
            if not chunk:
                return
            head += chunk
        text = head.decode("latin-1")
        tunnel = text.startswith("CONNECT ")
        target = text.split(" ", 2)[1] if " " in text else ""
        # `host:port`, or `http://host:port/path`.
        authority = target if tunnel else target.removeprefix("http://").split("/", 1)[0]
        host, _, port = authority.rpartition(":")
        authorized = f"\r\nproxy-authorization: {BASIC.lower()}\r\n" in text.lower()
        self.server.seen.append((host, authorized))
        if not authorized or host.endswith("refused.test"):
            client.sendall(b"HTTP/1.1 407 Proxy Authentication Required\r\n"
                           b"Proxy-Authenticate: Basic realm=\"checks\"\r\nContent-Length: 0\r\n\r\n")
            return
        try:
            upstream = socket.create_connection(("127.0.0.1", int(port)))
        except (OSError, ValueError):
            client.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
            return
        if tunnel:
            client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        else:
            upstream.sendall(head)
        _pipe(client, upstream)


def _pipe(a, b):
    def copy(src, dst):
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            try:
                dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass
    other = threading.Thread(target=copy, args=(b, a), daemon=True)
    other.start()
    copy(a, b)
    other.join()
    a.close()
    b.close()


class Proxy(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, port):
        super().__init__(("127.0.0.1", port), _Handler)
        self.seen = []  # (host, authorized) of every CONNECT and request, in order
        threading.Thread(target=self.serve_forever, daemon=True).start()
