"""The host_names concern: every member's name resolves to its data-plane address on every node.

Reading: ``resolve`` looks each name up and connects to it (facts ``host_names``; node.read_facts
runs it with the intent's names, node.read_quick without the connects). Intent:
``intent``. Checks: ``names.resolve`` and ``names.reachable``.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import time

from ansible.module_utils.ncclprep.model import (
    Check,
    Context,
    HostRecord,
    facts_of,
    make_check,
    retried_warning,
    retry_evidence,
    verdict,
)


def is_loopback(address: str) -> bool:
    """True for 127.0.0.0/8 and ::1 (False for anything that is not an IP address)."""
    try:
        return ipaddress.ip_address(address.split("%")[0]).is_loopback
    except ValueError:
        return False


def check(records: dict[str, HostRecord], ctx: Context) -> list[Check]:
    """Every published host name resolves on every node to its data-plane address (``names.resolve``),
    and that address answers on the probe port from every node (``names.reachable``).

    facts ``host_names``: node_facts' look-ups of the host_names intent, ``[{host, name,
    expected (address), addresses (in the resolver's order), reachable (bool | None), error}]``.
    Blame: a name that does not resolve, resolves elsewhere, resolves first to a loopback
    address (Debian's and Ubuntu's ``127.0.1.1 <hostname>`` line: torch.distributed and Gloo
    take the first address, so the rank advertises 127.0.1.1 and its peers cannot reach it;
    PyTorch's distributed docs and gloo's getaddrinfo use), or resolves to more than one address,
    repeats counted (two /etc/hosts lines for one name: ``hostname --ip-address`` then prints
    both, and the batch scripts that hand its output to torchrun as the rendezvous endpoint
    break), is the resolving node's problem (its /etc/hosts or DNS).
    An address that does not answer names the link ``a -> b`` and blames the target b (down,
    or its firewall drops a peer). An address that answered only on node_facts' second try
    (the row's ``retried``: the first try's error) gives names.reachable WARN naming those links
    with that evidence, when no address failed. SKIP (names.resolve only) when there is nothing
    to look up.
    """
    resolve, reach, resolve_hosts, reach_hosts, rows = [], [], set(), set(), 0
    retried: dict[str, list[str]] = {}
    for host, rec in sorted(records.items()):
        for row in facts_of(rec).get("host_names") or []:
            rows += 1
            if row.get("error") and not row.get("addresses"):
                resolve.append(f"on {host}: {row['name']} {row['error']}")
                resolve_hosts.add(host)
            elif row.get("expected") and row["expected"] not in row.get("addresses", []):
                resolve.append(f"on {host}: {row['name']} resolves to {', '.join(row['addresses'])}, "
                               f"not {row['expected']}")
                resolve_hosts.add(host)
            elif row.get("expected") and is_loopback(row["addresses"][0]):
                resolve.append(f"on {host}: {row['name']} resolves first to {row['addresses'][0]}, a loopback "
                               f"address, then {row['expected']}: a rank there advertises loopback to its peers")
                resolve_hosts.add(host)
            elif row.get("expected") and len(row["addresses"]) > 1:
                resolve.append(f"on {host}: {row['name']} resolves to {len(row['addresses'])} addresses "
                               f"({', '.join(row['addresses'])}), not one: `hostname --ip-address` hands a "
                               f"launcher all of them")
                resolve_hosts.add(host)
            elif row.get("reachable") is False:
                target = row.get("host") or row["name"]
                reach.append(f"link {host} -> {target}: {row.get('error') or 'unreachable'}")
                reach_hosts.add(target)
            elif row.get("reachable") and row.get("retried"):
                retried.setdefault(f"{host} -> {row.get('host') or row['name']}", []).append(
                    retry_evidence(row["name"], row["retried"]))
    if rows == 0:
        return [make_check("names.resolve", "SKIP", message="no host names to check")]

    def _message(problems: list[str]) -> str:
        return "; ".join(problems[:5]) + (" ..." if len(problems) > 5 else "")

    if not reach and retried:
        reachable = retried_warning(
            "names.reachable", retried, expected="every address answers on the first try",
            summary=f"{sum(map(len, retried.values()))} of {rows} addresses answered only on a second try",
            remediation="a transient fault (a peer's sshd or firewall busy for a moment, a dropped packet): "
                        "re-run validate.yml; if it comes back, check the link and the named targets")
    else:
        reachable = verdict(
            "names.reachable", reach, blame=reach_hosts,
            expected="every node's data-plane address answers from every node", message=_message(reach),
            remediation="check that the host is up and that its firewall lets cluster peers in, on "
                        + ", ".join(sorted(reach_hosts)),
            passed="every resolved data-plane address answered", passed_measured=rows, passed_expected=rows)
    return [
        verdict("names.resolve", resolve, blame=resolve_hosts,
                expected="every node name -> its data-plane address", message=_message(resolve),
                remediation="re-run site.yml (role host_names); check /etc/hosts and DNS, on "
                            + ", ".join(sorted(resolve_hosts)),
                passed=f"{rows} name look-ups resolved to the data-plane address",
                passed_measured=rows, passed_expected=rows),
        reachable,
    ]


#: Pause (seconds) before the one retry of a failed connect: a transient refusal or reset (a
#: peer's sshd or firewall busy for a moment) clears; a port that is closed or filtered fails twice.
RETRY_PAUSE_S = 0.5


def connect(address: str, port: int, timeout: float, pause: float = RETRY_PAUSE_S) -> dict:
    """TCP connect to ``address:port`` under ``timeout`` seconds, once more after ``pause`` when
    the first fails. Returns ``{"reachable": bool, "error": str | None, "retried": [first error]
    when the second try reached it, else []}``."""
    errors = []
    for attempt in range(2):
        if attempt:
            time.sleep(pause)
        try:
            with socket.create_connection((address, port), timeout=timeout):
                return {"reachable": True, "error": None, "retried": errors}
        except OSError as exc:
            errors.append(f"{address}:{port} unreachable: {exc}")
    return {"reachable": False, "error": errors[-1], "retried": []}


def resolve(entries: list, port: int, timeout: float, reach: bool = True) -> list:
    """Resolve every name of every entry and connect to the expected address, each under a deadline.

    A connect that fails is tried once more after RETRY_PAUSE_S: when that one reaches the address
    the row is reachable with ``retried`` holding the first error (names.reachable then warns
    instead of failing); a second failure keeps the second error. The whole look-up of one name
    stays under ``timeout * 2 + 1`` s. ``reach`` False: look the names up, connect to none (the
    Slurm Prolog's reading, node.read_quick: a member that does not answer costs it nothing);
    ``reachable`` stays None, which names.resolve does not read."""
    jobs = [(e.get("host"), name, e.get("address")) for e in entries for name in e.get("names", [])]

    def one(job):
        host, name, expected = job
        row = {"host": host, "name": name, "expected": expected, "addresses": [],
               "reachable": None, "error": None, "retried": []}
        try:
            infos = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
            # in the resolver's order (the first is what torch.distributed and Gloo take), one per
            # answer: an address on two /etc/hosts lines is there twice (names.resolve fails it)
            row["addresses"] = [i[4][0] for i in infos]
        except socket.gaierror as exc:
            row["error"] = f"cannot resolve: {exc}"
            return row
        if reach:
            target = expected if expected in row["addresses"] else row["addresses"][0]
            row.update(connect(target, port, timeout / 2))
        return row

    if not jobs:
        return []
    # daemon threads, not a ThreadPoolExecutor: the interpreter joins an executor's threads at
    # exit, so a getaddrinfo stuck in NSS (sssd, LDAP) kept the module alive past the deadline
    done: dict[int, dict] = {}
    todo = list(enumerate(jobs))
    lock = threading.Lock()

    def worker():
        while True:
            with lock:
                if not todo:
                    return
                i, job = todo.pop(0)
            done[i] = one(job)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(min(32, len(jobs)))]
    for t in threads:
        t.start()
    end = time.monotonic() + timeout * 2 + 1
    for t in threads:
        t.join(max(0.0, end - time.monotonic()))
    rows = []
    for i, job in enumerate(jobs):
        rows.append(done.get(i) or {
            "host": job[0], "name": job[1], "expected": job[2], "addresses": [], "reachable": None,
            "error": f"look-up did not finish within {timeout * 2 + 1:.0f} s", "retried": []})
    return rows


def others(text: str, names: list, marker: str) -> dict:
    """The hosts file ``text`` (hosts(5): an address, then names, ``#`` to the end of the line a
    comment) with every name of ``names`` taken off the lines outside this role's block, so that
    the block's line is the one mapping of each: one name, one address.

    ``marker``: the block's marker with ``{mark}`` (BEGIN and END; blockinfile's). Names compare
    without case, as the resolver does. A line keeps its other names; a line left with none is
    kept as a comment saying why (``# <line>  # ncclprep host_names: ...``), not deleted. Lines
    in the block, comments and blank lines are not touched.

    Returns ``{"text": the new text (== text when nothing was taken), "replaced": ["line N:
    '<old line>' -> '<new line>'", ...]}``. Source of the rule: Debian's installer and cloud-init
    write ``127.0.1.1 <hostname>``, and podman, cloud-init's manage_etc_hosts and older
    provisioning a line of their own, for a name the block maps to the data-plane address."""
    wanted = {n.lower() for n in names}
    begin, end = marker.replace("{mark}", "BEGIN"), marker.replace("{mark}", "END")
    out, replaced, inside = [], [], False
    for number, line in enumerate(text.splitlines(keepends=True), 1):
        bare = line.rstrip("\n")
        if bare == begin or bare == end:
            inside = bare == begin
            out.append(line)
            continue
        fields, _, _comment = bare.partition("#")
        fields = fields.split()
        if inside or len(fields) < 2 or not wanted & {f.lower() for f in fields[1:]}:
            out.append(line)
            continue
        kept = [f for f in fields[1:] if f.lower() not in wanted]
        taken = [f for f in fields[1:] if f.lower() in wanted]
        if kept:
            new = "\t".join([fields[0], " ".join(kept)]) + (f" #{_comment}" if _comment else "")
        else:
            new = f"# {bare}  # ncclprep host_names: {' '.join(taken)} mapped in its block"
        replaced.append(f"line {number}: '{' '.join(bare.split())}' -> '{' '.join(new.split())}'")
        out.append(new + ("\n" if line.endswith("\n") else ""))
    return {"text": "".join(out), "replaced": replaced}


# This concern's entry in the registry (concerns/__init__.py).
SWITCH = None
DATA_PLANE = False
FACTS = False
IDS = ("names.resolve", "names.reachable")


#: The variables the intent is computed from (concerns.intent hands over these only).
INTENT_VARS = ("host_names_hosts", "host_names_domain", "host_names_include_hostname", "data_plane_members")
#: The facts it takes from the node: none.
INTENT_FACTS = ()


def intent(v: dict, node: dict) -> list[dict]:
    """``[{host, address, names}]``, one entry per host of ``host_names_hosts`` (None or empty:
    every member of ``data_plane_members``, in its order): the member's data-plane address (None
    when it has none) and its names, ``<host>.<domain>`` first when ``host_names_domain`` is set,
    then ``<host>``, then the member's own host name when ``host_names_include_hostname`` and it
    differs."""
    members = v["data_plane_members"] or {}
    out = []
    for host in v["host_names_hosts"] or list(members):
        member = members.get(host) or {}
        names = [f"{host}.{v['host_names_domain']}"] if v["host_names_domain"] else []
        names.append(host)
        if v["host_names_include_hostname"] and member.get("name") and member["name"] not in names:
            names.append(member["name"])
        out.append({"host": host, "address": member.get("address"), "names": names})
    return out
