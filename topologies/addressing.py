"""IPv4 addressing shared by every builder.

- Brokers on switches get one flat address each, ``10.0.0.0/8`` plus (index + 1), as
  Mininet's own default numbering does (index 0 is 10.0.0.1).
- Host-to-host links get their own /30 out of ``10.128.0.0/10``: link i is
  ``10.128.0.0 + 4*i``, its two ends ``.1`` and ``.2`` of that block (2**20 links fit).
  The /10 is the upper half of 10/8, so the two schemes never overlap below 2**23 hosts.
"""

from __future__ import annotations

import ipaddress

FLAT_BASE = ipaddress.IPv4Network("10.0.0.0/8")
FLAT_PREFIXLEN = FLAT_BASE.prefixlen
P2P_BASE = ipaddress.IPv4Network("10.128.0.0/10")
P2P_PREFIXLEN = 30
MAX_P2P_LINKS = P2P_BASE.num_addresses // 4


def flat_address(index: int) -> str:
    """The main address of the host with 0-based ``index`` on a flat /8 (no prefix)."""
    if not 0 <= index < FLAT_BASE.num_addresses - 2:
        raise ValueError(f"host index {index} does not fit in {FLAT_BASE}")
    return str(FLAT_BASE.network_address + index + 1)


def p2p_pair(index: int) -> tuple[str, str]:
    """The two ends (``a.b.c.d/30``) of host-to-host link number ``index`` (0-based)."""
    if not 0 <= index < MAX_P2P_LINKS:
        raise ValueError(f"link index {index} does not fit in {P2P_BASE} "
                         f"(at most {MAX_P2P_LINKS} links)")
    block = P2P_BASE.network_address + 4 * index
    return f"{block + 1}/{P2P_PREFIXLEN}", f"{block + 2}/{P2P_PREFIXLEN}"
