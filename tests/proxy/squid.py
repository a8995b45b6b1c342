"""rebound behind a real outbound proxy: squid, with credentials, in front of `rebound chaos`.

An `http://` upstream is handed to squid in absolute form; an `https://` one goes through a
`CONNECT` tunnel to a TLS server in front of chaos (the test CA's certificate, named in
`upstream_ca_file`). squid's access rules are those of Debian's default configuration:
`CONNECT` only to the TLS ports it lists (443 and the TLS server's), everything else only with
credentials. The official OpenAI SDK, at its default retries, is the client.

Checks: a chat completion and a stream through each way, on one upstream attempt, seen in
squid's log; a tunnel to a port squid does not allow, wrong credentials and none: each one 502
that names the proxy, after one attempt, which the SDK does not retry (G10).

Usage: python3 tests/proxy/squid.py [path/to/rebound]
Needs squid (apt-get install squid) and the `openssl` command. Prints one line per check and
closes with `N passed, M failed`; exits non-zero on failure.
"""

import asyncio
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import openai

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from loopback import free_ports, wait_for  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
REBOUND = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(REPO, "target", "debug", "rebound"))
TESTDATA = os.path.join(REPO, "crates", "runtime", "src", "http", "h1", "testdata")
EXPECTED = "Hello from rebound chaos. You said: hi"
HI = [{"role": "user", "content": "hi"}]
USER, PASSWORD, WRONG_PASSWORD = "rebound-ci", "a-proxy-password", "a-wrong-proxy-password"
WORK = tempfile.mkdtemp(prefix="rebound-squid-")
os.chmod(WORK, 0o755)  # squid drops to its own user, which reads its files here


CHAOS, TLS, TLS_FORBIDDEN, SQUID, GOOD, WRONG, NONE = free_ports(7)


def write(name, text, mode=0o644):
    path = os.path.join(WORK, name)
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)
    return path


def tls_front(port, behind):
    """A TLS server on `port` that relays each connection to chaos: an https:// upstream."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(os.path.join(TESTDATA, "localhost.crt"), os.path.join(TESTDATA, "localhost.key"))

    async def pipe(reader, writer):
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()

    async def serve(reader, writer):
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", behind)
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    async def main():
        server = await asyncio.start_server(serve, "127.0.0.1", port, ssl=context)
        async with server:
            await server.serve_forever()

    threading.Thread(target=lambda: asyncio.run(main()), daemon=True).start()


def squid_config():
    hashed = subprocess.run(["openssl", "passwd", "-apr1", PASSWORD], check=True, capture_output=True,
                            text=True).stdout.strip()
    passwd = write("passwd", f"{USER}:{hashed}\n")
    hosts = write("hosts", "127.0.0.1 provider.test\n")
    for log in ("access.log", "cache.log"):
        write(log, "", 0o666)
    auth_program = "/usr/lib/squid/basic_ncsa_auth"
    return write("squid.conf", f"""
http_port 127.0.0.1:{SQUID}
pid_filename none
cache_log {WORK}/cache.log
access_log stdio:{WORK}/access.log
cache deny all
hosts_file {hosts}
pinger_enable off
shutdown_lifetime 0 seconds
coredump_dir {WORK}
auth_param basic program {auth_program} {passwd}
auth_param basic realm rebound-ci
acl authed proxy_auth REQUIRED
acl SSL_ports port 443 {TLS}
acl CONNECT method CONNECT
http_access deny CONNECT !SSL_ports
http_access allow authed
http_access deny all
""")


def gateway_config(port, credentials):
    proxy = f"http://{credentials}@127.0.0.1:{SQUID}" if credentials else f"http://127.0.0.1:{SQUID}"
    ca = os.path.join(TESTDATA, "ca.crt")
    routes = ""
    for name, base in [
        ("plain", f"http://provider.test:{CHAOS}/v1"),
        ("tls", f"https://provider.test:{TLS}/v1"),
        ("tls-forbidden", f"https://provider.test:{TLS_FORBIDDEN}/v1"),
    ]:
        routes += f"""
[[candidate]]
id = "{name}"
protocol = "openai"
base_url = "{base}"

[[route]]
id = "{name}"
models = ["{name}"]
candidates = ["{name}"]
"""
    return write(f"rebound-{port}.toml", f"""
listen = "127.0.0.1:{port}"
upstream_proxy = "{proxy}"
upstream_ca_file = "{ca}"

[health]
enabled = false
{routes}""")


def attempts(key):
    with urllib.request.urlopen(f"http://127.0.0.1:{CHAOS}/chaos/attempts") as r:
        return json.load(r).get(key, 0)


def squid_log():
    with open(os.path.join(WORK, "access.log")) as f:
        return f.read()


results = []


def check(name, fn, want_attempts):
    key = {"x-chaos-key": name}
    try:
        before = attempts(name)
        fn(key)
        seen = attempts(name) - before
        ok = seen == want_attempts
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {seen} upstream attempts (want {want_attempts})", flush=True)
    except Exception as e:  # a failed check is reported, not fatal
        ok = False
        print(f"FAIL {name}: {type(e).__name__}: {e}", flush=True)
    results.append(ok)


def sdk(port):
    return openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="sk-squid-test")


def served(model, logged=None):
    """A chat completion and a stream, each served through squid (`provider.test` resolves only
    in its hosts file), whose log shows `logged` twice: squid logs a request it forwarded at
    once, a tunnel only once it closes."""
    def run(h):
        client = sdk(GOOD)
        answer = client.chat.completions.create(model=model, messages=HI, extra_headers=h)
        assert answer.choices[0].message.content == EXPECTED, answer
        stream = client.chat.completions.create(model=model, messages=HI, stream=True, extra_headers=h)
        text = "".join((c.choices[0].delta.content or "") for c in stream if c.choices)
        assert text == EXPECTED, text
        assert logged is None or squid_log().count(logged) >= 2, squid_log()
    return run


def refused(port, model, says):
    """One 502 that says `says` (the proxy's refusal), at once, not retried by the SDK."""
    def run(h):
        started = time.monotonic()
        try:
            openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="sk-squid-test").chat.completions.create(
                model=model, messages=HI, extra_headers=h)
            raise AssertionError("no error")
        except openai.APIStatusError as e:
            assert e.status_code == 502, e
            assert e.response.headers["x-should-retry"] == "false", e.response.headers
            assert e.response.headers["x-rebound-attempts"] == "1", e.response.headers
            assert says in e.message, e.message
            assert not any(p in e.response.text for p in (PASSWORD, WRONG_PASSWORD)), e.response.text
            verdict = e.response.json()["rebound"]
            assert (verdict["class"], verdict["attempts"]) == ("hard", 1), verdict
            print(f"     {verdict['ruleId']}: {e.message[:160]}")
        assert time.monotonic() - started < 5, "retried"
    return run


def main():
    for command in ("squid", "openssl"):
        if not shutil.which(command) and not os.path.exists(f"/usr/sbin/{command}"):
            print(f"squid: `{command}` is required (apt-get install squid openssl)", file=sys.stderr)
            return 1
    squid_bin = shutil.which("squid") or "/usr/sbin/squid"
    env = dict(os.environ, XDG_DATA_HOME=os.path.join(WORK, "data"))
    for var in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy"):
        env.pop(var, None)
    procs = []

    def start(args, name, port):
        log = open(os.path.join(WORK, f"{name}.log"), "w")
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env)
        procs.append(proc)
        wait_for(port, proc, name, os.path.join(WORK, f"{name}.log"))

    try:
        try:
            socket.getaddrinfo("provider.test", 443)
            raise RuntimeError("provider.test resolves here: an answer would not prove the proxy")
        except socket.gaierror:
            pass
        start([REBOUND, "chaos", "--listen", f"127.0.0.1:{CHAOS}", "--chunk-delay-ms", "0"], "chaos", CHAOS)
        tls_front(TLS, CHAOS)
        tls_front(TLS_FORBIDDEN, CHAOS)
        start([squid_bin, "-N", "-f", squid_config()], "squid", SQUID)
        start([REBOUND, "serve", "--config", gateway_config(GOOD, f"{USER}:{PASSWORD}")], "serve", GOOD)
        start([REBOUND, "serve", "--config", gateway_config(WRONG, f"{USER}:{WRONG_PASSWORD}")], "serve-wrong", WRONG)
        start([REBOUND, "serve", "--config", gateway_config(NONE, None)], "serve-none", NONE)

        check("squid forwards an http:// upstream", served("plain", f"POST http://provider.test:{CHAOS}/v1/chat"), 2)
        check("squid tunnels an https:// upstream", served("tls"), 2)
        check("squid forbids the tunnel's port", refused(GOOD, "tls-forbidden", "answered 403"), 0)
        check("squid refuses wrong credentials", refused(WRONG, "plain", "answered 407"), 0)
        check("squid refuses a tunnel without credentials", refused(NONE, "tls", "answered 407"), 0)
        # The proxy's password is a secret: no log of rebound's holds it.
        leaked = [name for name in ("serve", "serve-wrong", "serve-none")
                  if any(p in open(os.path.join(WORK, f"{name}.log")).read() for p in (PASSWORD, WRONG_PASSWORD))]
        print(f"{'FAIL' if leaked else 'ok  '} no log holds the proxy's password{': ' + ', '.join(leaked) if leaked else ''}")
        results.append(not leaked)
    except Exception as e:
        print(f"squid: the setup failed: {type(e).__name__}: {e}", file=sys.stderr)
        for name in ("squid", "cache"):
            path = os.path.join(WORK, f"{name}.log")
            if os.path.exists(path):
                with open(path) as f:
                    sys.stderr.write(f.read()[-3000:])
        return 1
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(WORK, ignore_errors=True)
    passed = sum(results)
    print(f"{passed} passed, {len(results) - passed} failed")
    return 0 if passed == len(results) else 1


sys.exit(main())
