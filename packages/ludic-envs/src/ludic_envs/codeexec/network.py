"""How a sandboxed run is cut off from the network.

* ``"namespace"`` — a new network namespace (as root; otherwise inside a new user namespace where the
  kernel allows unprivileged ones): no interfaces but a loopback that is down, so every connection fails.
* ``"seccomp"`` — a seccomp filter on the run's processes: ``socket()`` for every family (``AF_UNIX``
  too, or the host's abstract Unix sockets, which no mount hides, would stay reachable),
  ``io_uring_setup()`` and any syscall through a foreign ABI fail with ``EPERM`` (x86_64 and aarch64);
  ``socketpair()`` stays allowed (asyncio and multiprocessing need it). The fallback for hosts that
  refuse namespaces (containers without ``CAP_SYS_ADMIN``, kernels with unprivileged user namespaces
  off). It cannot reach sockets inherited from outside; the sandbox passes none.

The sandbox tries the methods in order and uses the first that works; ``IsolationReport`` records which.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, TypeAlias, get_args

from ludic_core.validation import check_some_of

__all__ = ["DEFAULT_NETWORK_METHODS", "NetworkMethod", "check_network_methods"]

NetworkMethod: TypeAlias = Literal["namespace", "seccomp"]
DEFAULT_NETWORK_METHODS: tuple[NetworkMethod, ...] = ("namespace", "seccomp")


def check_network_methods(methods: Sequence[NetworkMethod]) -> tuple[NetworkMethod, ...]:
    """``methods`` as a tuple, or a ConfigError naming the bad value."""
    return check_some_of("network_methods", methods, get_args(NetworkMethod))
