"""nccl_env.ifname (concern nccl_env): the launch environment sends NCCL and Gloo over the data plane."""

from __future__ import annotations

from ansible.module_utils.ncclprep.checks.model import Check, Context, HostRecord, facts_of, intent_of, verdict
from ansible.module_utils.ncclprep.nccl_vars import ifname_matches

#: The interface variables this check reads: (name, exact names only, who reads it).
IFNAME_VARS = (("NCCL_SOCKET_IFNAME", False, "NCCL"), ("GLOO_SOCKET_IFNAME", True, "Gloo"))


def _var_problem(var: str, exact: bool, reader: str, spec, data_plane: str, candidates: list[str]) -> str | None:
    """Why one interface variable's value ``spec`` does not pin ``reader``'s sockets to ``data_plane``."""
    if spec is None or str(spec).strip() == "":
        others = [i for i in candidates if i != data_plane]
        return (f"{var} is unset and this host also has {', '.join(others)}: {reader} picks an interface itself"
                if others else None)
    chosen = ifname_matches(str(spec), candidates, exact_only=exact)
    if data_plane not in chosen:
        return (f"{var}={spec} does not select the data-plane interface {data_plane} "
                f"(selects {', '.join(chosen) or 'nothing'})")
    if len(chosen) > 1:
        return (f"{var}={spec} also selects {', '.join(i for i in chosen if i != data_plane)}, "
                f"not only the data-plane interface {data_plane}")
    return None


def ifname_problems(env: dict, data_plane: str, interfaces: list[str]) -> list[str]:
    """Why ``env`` does not send NCCL's and Gloo's sockets over ``data_plane`` only: [] when it does.

    ``interfaces``: every interface of the host with an address, loopback excluded (the
    candidates NCCL and Gloo choose from). A variable that is set must select
    ``data_plane`` and no other candidate (NCCL interface-list syntax: ``eth``, ``=eth0``,
    ``^docker``; GLOO_SOCKET_IFNAME exact names, see nccl_vars.ifname_matches). An unset
    variable is a problem only where the host has another candidate, since NCCL and Gloo
    then pick one themselves. Messages name the variable, its value and the interfaces.
    """
    candidates = sorted(set(interfaces) | {data_plane})
    found = (_var_problem(var, exact, reader, env.get(var), data_plane, candidates)
             for var, exact, reader in IFNAME_VARS)
    return [p for p in found if p]


def live_values(files: list[dict] | None) -> dict[str, tuple[str, str]]:
    """The interface variables a launch gets on the node: var -> (value, the file it came from).

    ``files``: facts ``nccl_env.files``, [{path, values}]: the launch env file first, then
    /etc/nccl.conf (concern_facts.nccl_env). The env file is sourced into the environment,
    which NCCL reads before /etc/nccl.conf (NCCL's environment documentation: the file only
    supplies what the environment leaves unset); Gloo reads the environment only.
    """
    out: dict[str, tuple[str, str]] = {}
    files = [f for f in files or [] if isinstance(f, dict)]
    for var, _exact, reader in IFNAME_VARS:
        for f in files[:2] if reader == "NCCL" else files[:1]:
            if isinstance(f.get("values"), dict) and var in f["values"]:
                out[var] = (f["values"][var], f["path"])
                break
    return out


def check_ifname(records: dict[str, HostRecord], ctx: Context) -> list[Check]:
    """nccl_env.ifname: NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME of intent ``nccl_env`` (the
    effective launch environment, name -> value) select the data-plane interface that
    node_facts found (facts ``data_plane.interface``), and no other interface with an address
    (facts ``interfaces{name: {addresses}}``, loopback excluded).

    The files a launch reads on the node count too (facts ``nccl_env.files``, ``live_values``):
    a value there that differs from the intent (a hand edit, an interface renamed since
    provisioning) is judged as well, naming its file. FAIL measures host -> the problems
    (``ifname_problems``); PASS measures host -> {variable: value}. Hosts without a data-plane
    interface are left to data_plane.interface; no check when no host has both an nccl_env
    intent and a data-plane interface.
    """
    problems: dict[str, list[str]] = {}
    values: dict[str, dict] = {}
    for host, rec in sorted(records.items()):
        env = intent_of(rec, "nccl_env")
        dp = (facts_of(rec).get("data_plane") or {}).get("interface")
        if env is None or not dp:
            continue
        values[host] = {var: env.get(var) for var, _, _ in IFNAME_VARS}
        ifaces = [name for name, info in (facts_of(rec).get("interfaces") or {}).items()
                  if name != "lo" and (info or {}).get("addresses")]
        found = ifname_problems(env, dp, ifaces)
        live = live_values((facts_of(rec).get("nccl_env") or {}).get("files"))
        candidates = sorted(set(ifaces) | {dp})
        for var, exact, reader in IFNAME_VARS:
            if var in live and live[var][0] != env.get(var):
                why = _var_problem(var, exact, reader, live[var][0], dp, candidates)
                if why:
                    found.append(f"{why}, set in {live[var][1]}")
        if found:
            problems[host] = found
    if not values:
        return []
    return [verdict("nccl_env.ifname", problems,
                    expected="NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME select the data-plane interface only",
                    message="NCCL/Gloo sockets not pinned to the data plane: "
                            + "; ".join(f"{h}: {', '.join(p)}" for h, p in problems.items()),
                    remediation="re-run site.yml (role nccl_env) with NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME "
                                "left null (they default to the data-plane interface) or naming it, on "
                                + ", ".join(problems),
                    passed=f"NCCL and Gloo sockets on the data-plane interface on {len(values)} hosts",
                    passed_measured=values)]
