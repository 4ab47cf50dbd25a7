"""links.rdma and links.counters (preflight's own checks): the RDMA ports NCCL's IB transport
uses, and the error counters of every port the run crossed.

- links.rdma: every IB and RoCE port from ``hostinfo.ib_ports`` (ibstat, ibstatus or sysfs)
  and ``hostinfo.ibv_devinfo``: the parsers' findings (a port down, no subnet manager, a RoCE
  active MTU capped by the netdev's), a port whose rate is below the cluster's most common
  rate for its link layer (a link trained down, e.g. HDR at 100 Gb/s), and on RoCE ports
  the GID table: NCCL needs a RoCE v2 GID for routable RoCE and picks it by
  ``NCCL_IB_GID_INDEX`` (NCCL environment variable documentation), so a RoCE port without a
  RoCE v2 GID, or an ``NCCL_IB_GID_INDEX`` (nccl_env intent) that is not RoCE v2 there, fails.
- links.counters: the counters of portstate.py read when the run starts (node_facts'
  ``counters``) and when it ends (the engine's last reading, record key ``counters``). Any growth is a
  FAIL naming the host, the port and the counters with their growth: a link that went down
  (``link_downed``, ``carrier_changes``) or took errors (symbol, receive, CRC) while the
  preflight ran; a counter that went down (a reset) cannot be judged and gives WARN.

Facts: ``hostinfo`` (library/node_facts.py), ``rdma_gids``, ``counters``.
"""

from __future__ import annotations

from ansible.module_utils.ncclprep.model import (
    Check,
    Context,
    HostRecord,
    facts_of,
    intent_of,
    majority,
    make_check,
)
from ansible.module_utils.ncclprep.parsers.ibstat import link_rate_gbps
from ansible.module_utils.ncclprep.portstate import LINK_DOWN_COUNTERS, counter_growth


def _reading(facts: dict, key: str) -> dict:
    return (facts.get("hostinfo") or {}).get(key) or {}


def _ports(facts: dict) -> list[dict]:
    return (_reading(facts, "ib_ports").get("data") or {}).get("ports") or []


def _gid_index(record: HostRecord) -> int | None:
    value = (intent_of(record, "nccl_env") or {}).get("NCCL_IB_GID_INDEX")
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def check_rdma(records: dict[str, HostRecord], ctx: Context) -> Check:
    """links.rdma: FAIL naming each host with a port problem (measured: host -> problems,
    one line each); WARN when the only findings are WARN (a port down that NCCL may not be
    told to use); SKIP when no host shows an RDMA port. Rates in Gb/s as the tools print."""
    ports = {h: _ports(facts_of(r)) for h, r in records.items()}
    ports = {h: p for h, p in ports.items() if p}
    if not ports:
        return make_check("links.rdma", "SKIP", message="no host shows an RDMA port (IB or RoCE)")
    rates: dict[str, dict] = {}
    for host, plist in ports.items():
        for p in plist:
            rate = link_rate_gbps(p)
            if rate is not None:
                layer = str(p.get("link_layer") or "InfiniBand")
                rates.setdefault(layer, {})[f"{host} {p['device']}/{p['port']}"] = rate
    usual = {layer: majority(v) for layer, v in rates.items()}
    fails: dict[str, list] = {}
    warns: dict[str, list] = {}
    for host, plist in ports.items():
        facts = facts_of(records[host])
        for key in ("ib_ports", "ibv_devinfo"):
            for f in _reading(facts, key).get("findings") or []:
                {"FAIL": fails, "WARN": warns}.get(f.get("severity"), {}).setdefault(host, []).append(f["message"])
        gids = facts.get("rdma_gids") or {}
        index = _gid_index(records[host])
        for p in plist:
            name = f"{p['device']}/{p['port']}"
            layer = str(p.get("link_layer") or "InfiniBand")
            rate = link_rate_gbps(p)
            if rate is not None and rate < usual[layer]:
                fails.setdefault(host, []).append(f"{name} at {rate:g} Gb/s, the cluster's {layer} ports at "
                                                  f"{usual[layer]:g} Gb/s")
            if layer != "Ethernet" or name not in gids:
                continue
            v2 = [g["index"] for g in gids[name] if g.get("type") == "RoCE v2"]
            if not v2:
                fails.setdefault(host, []).append(f"{name} (RoCE) has no RoCE v2 GID (no IP address on its netdev?)")
            elif index is not None and index not in v2:
                fails.setdefault(host, []).append(f"{name}: NCCL_IB_GID_INDEX={index} is not a RoCE v2 GID "
                                                  f"(RoCE v2 at {', '.join(map(str, v2))})")
    n_ports = sum(len(p) for p in ports.values())
    if fails:
        return make_check("links.rdma", "FAIL", fails, measured=fails,
                          expected={"rate_gbps": usual, "gid": "RoCE v2 on RoCE ports"},
                          message="RDMA ports wrong on "
                                  + "; ".join(f"{h}: {', '.join(v)}" for h, v in sorted(fails.items())),
                          remediation="bring the port up at full rate (cable, switch port, firmware); give the RoCE "
                                      "netdev its IP address; set NCCL_IB_GID_INDEX to a RoCE v2 index (show_gids)")
    if warns:
        return make_check("links.rdma", "WARN", warns, measured=warns,
                          message="; ".join(f"{h}: {', '.join(v)}" for h, v in sorted(warns.items())),
                          remediation="leave a port that stays down out of NCCL_IB_HCA, or bring it up")
    return make_check("links.rdma", "PASS", measured={"ports": n_ports, "rate_gbps": usual},
                      message=f"{n_ports} RDMA ports on {len(ports)} hosts up at the cluster's rate")


def check_counters(records: dict[str, HostRecord], ctx: Context) -> Check:
    """links.counters: FAIL naming each host whose port counters grew during the run
    (measured: host -> {"rdma <dev>/<port>" | "net <dev>": {counter: growth}}); WARN naming a
    host whose counters went down (reset); SKIP when the counters were not read twice."""
    pairs = {h: ((facts_of(r).get("counters")), r.get("counters")) for h, r in records.items()}
    pairs = {h: v for h, v in pairs.items() if v[0] is not None and v[1] is not None}
    if not pairs:
        return make_check("links.counters", "SKIP", message="port counters were not read at both ends of the run")
    growth = {h: counter_growth(before, after) for h, (before, after) in pairs.items()}
    grew = {h: g["grew"] for h, g in growth.items() if g["grew"]}
    reset = {h: g["reset"] for h, g in growth.items() if g["reset"]}
    if grew:
        def words(ports: dict) -> str:
            return ", ".join(f"{port} {', '.join(f'{c} +{n}' for c, n in sorted(cs.items()))}"
                             for port, cs in sorted(ports.items()))
        down = sorted(h for h, ports in grew.items() if any(set(cs) & set(LINK_DOWN_COUNTERS) for cs in ports.values()))
        return make_check("links.counters", "FAIL", grew, measured=grew, expected="no growth during the run",
                          message="port counters grew during the run: "
                                  + "; ".join(f"{h}: {words(p)}" for h, p in sorted(grew.items()))
                                  + (f" (link went down on {', '.join(down)})" if down else ""),
                          remediation="check the cable, transceiver and switch port of that link (ethtool -S, "
                                      "perfquery, the switch's port errors); reseat or replace it")
    n = sum(len(after.get("rdma") or {}) + len(after.get("net") or {}) for _before, after in pairs.values())
    if reset:
        return make_check("links.counters", "WARN", reset, measured=reset,
                          message="port counters went down during the run (reset or driver reload): "
                                  + "; ".join(f"{h}: {', '.join(v)}" for h, v in sorted(reset.items())),
                          remediation="run validate.yml again once the driver is settled")
    return make_check("links.counters", "PASS", measured={"ports": n},
                      message=f"no error counter grew on {n} ports of {len(pairs)} hosts during the run")


def check_links(records: dict[str, HostRecord], ctx: Context) -> list[Check]:
    """links.rdma then links.counters (see each)."""
    return [check_rdma(records, ctx), check_counters(records, ctx)]
