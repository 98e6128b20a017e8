"""Separate hosts on one machine: network namespaces joined by a bridge (``ip netns`` + veth pairs).

The root namespace holds the bridge (``10.231.0.1``: the broker listens there) and the test; host
``i`` is namespace ``mvs<tag>h<i>`` at ``10.231.0.<i + 1>``, its link the veth pair whose root end is
``mvs<tag>v<i>``. ``cut(i)`` takes that end down — host i's network cable pulled, its processes alive
— and ``heal(i)`` plugs it back. Needs root and iproute2; ``unavailable()`` says why not otherwise.
The file system is shared (no mount namespace), so every host sees the same warehouse folder.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field

BRIDGE_ADDRESS = "10.231.0.1"


def unavailable() -> str | None:
    """Why namespaces cannot be made here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add)"
    if shutil.which("ip") is None:
        return "iproute2's ip command is not installed"
    probe = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    return None if probe.returncode == 0 else f"ip netns does not work here: {probe.stderr.strip()}"


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@dataclass
class Hosts:
    count: int
    tag: str = field(default_factory=lambda: f"{os.getpid() % 100000}")

    @property
    def bridge(self) -> str:
        return f"mvs{self.tag}br"

    def namespace(self, i: int) -> str:
        return f"mvs{self.tag}h{i}"

    def link(self, i: int) -> str:
        return f"mvs{self.tag}v{i}"

    def prefix(self, i: int) -> list[str]:
        """Run a command on host ``i``."""
        return ["ip", "netns", "exec", self.namespace(i)]

    def __enter__(self) -> Hosts:
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{BRIDGE_ADDRESS}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for i in range(1, self.count + 1):
            ns, outside, inside = self.namespace(i), self.link(i), f"mvs{self.tag}p{i}"
            _ip("netns", "add", ns)
            _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
            _ip("link", "set", inside, "netns", ns)
            _ip("link", "set", outside, "master", self.bridge, "up")
            _ip("-n", ns, "addr", "add", f"10.231.0.{i + 1}/24", "dev", inside)
            _ip("-n", ns, "link", "set", inside, "up")
            _ip("-n", ns, "link", "set", "lo", "up")  # Spark's driver binds 127.0.0.1 inside
        return self

    def cut(self, i: int) -> None:
        _ip("link", "set", self.link(i), "down")

    def heal(self, i: int) -> None:
        _ip("link", "set", self.link(i), "up")

    def __exit__(self, *exc: object) -> None:
        for i in range(1, self.count + 1):
            subprocess.run(["ip", "netns", "del", self.namespace(i)], capture_output=True)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)
