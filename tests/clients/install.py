"""Installs the pinned agent clients into the build's target directory, never globally.

Claude Code and Codex CLI come from the npm registry (each package ships its native binary);
the OpenAI Agents SDK and the official Python SDKs come from PyPI into their own virtual
environment. A second run with the
same pins reuses what is there.
"""

import glob
import json
import os
import subprocess
import sys

CLAUDE_CODE = "2.1.332"
CODEX = "0.171.0"
AGENTS_SDK = "0.24.0"
OPENAI_PYTHON = "3.57.0"
ANTHROPIC_PYTHON = "2.14.0"
PINS = {"@anthropic-ai/claude-code": CLAUDE_CODE, "@openai/codex": CODEX, "openai-agents": AGENTS_SDK,
        "openai": OPENAI_PYTHON, "anthropic": ANTHROPIC_PYTHON}


class InstallError(Exception):
    """A client could not be installed; the message says which and why."""


def _run(what, args, env=None):
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=600, env=env)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise InstallError(f"{what}: `{' '.join(args[:3])} …` could not run: {e}") from e
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-8:]
        raise InstallError(f"{what}: `{' '.join(args[:3])} …` exited {done.returncode}:\n  " + "\n  ".join(tail))
    return done.stdout


def _one(pattern, what):
    found = sorted(glob.glob(pattern))
    if not found:
        raise InstallError(f"{what}: no executable at {pattern}")
    return found[0]


def _version_of(binary, what, env):
    return _run(f"{what} --version", [binary, "--version"], env=env).strip()


class Clients:
    """Where each installed client is."""

    def __init__(self, root):
        self.root = root
        self.npm = os.path.join(root, "npm")
        self.venv = os.path.join(root, "venv")

    @property
    def claude(self):
        modules = os.path.join(self.npm, "node_modules", "@anthropic-ai")
        for path in (os.path.join(modules, "claude-code-linux-x64", "claude"),
                     os.path.join(modules, "claude-code", "bin", "claude.exe")):
            if os.access(path, os.X_OK):
                return path
        raise InstallError(f"Claude Code {CLAUDE_CODE}: its native binary is missing under {modules}")

    @property
    def codex(self):
        pattern = os.path.join(self.npm, "node_modules", "@openai", "codex-*", "vendor", "*", "bin", "codex")
        return _one(pattern, f"Codex CLI {CODEX}")

    @property
    def python(self):
        return os.path.join(self.venv, "bin", "python")


def install(root):
    """Installs whatever is missing and returns the clients; raises InstallError."""
    os.makedirs(root, exist_ok=True)
    clients = Clients(root)
    marker = os.path.join(root, "installed.json")
    try:
        with open(marker) as f:
            if json.load(f) == PINS:
                return clients
    except (OSError, ValueError):
        pass
    env = dict(os.environ, npm_config_update_notifier="false", npm_config_fund="false",
               npm_config_audit="false", npm_config_cache=os.path.join(root, "npm-cache"))
    os.makedirs(clients.npm, exist_ok=True)
    with open(os.path.join(clients.npm, "package.json"), "w") as f:
        f.write('{"private": true}\n')
    specs = [f"{package}@{version}" for package, version in PINS.items() if package.startswith("@")]
    print(f"install: {', '.join(specs)} (npm)", flush=True)
    _run(" and ".join(specs), ["npm", "install", "--prefix", clients.npm, "--ignore-scripts", *specs], env=env)
    wheels = [f"{package}=={version}" for package, version in PINS.items() if not package.startswith("@")]
    print(f"install: {', '.join(wheels)} (PyPI)", flush=True)
    if not os.path.exists(clients.python):
        _run("a virtual environment for the Agents SDK", [sys.executable, "-m", "venv", clients.venv])
    _run(" and ".join(wheels), [clients.python, "-m", "pip", "install", "--quiet",
                                "--disable-pip-version-check", *wheels])
    home = os.path.join(root, "version-home")
    os.makedirs(home, exist_ok=True)
    quiet = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home, "DISABLE_AUTOUPDATER": "1",
             "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "CODEX_HOME": home}
    for binary, version, what in ((clients.claude, CLAUDE_CODE, "Claude Code"), (clients.codex, CODEX, "Codex CLI")):
        seen = _version_of(binary, what, quiet)
        if version not in seen:
            raise InstallError(f"{what}: wanted {version}, the binary says `{seen}`")
    with open(marker, "w") as f:
        json.dump(PINS, f)
    return clients
