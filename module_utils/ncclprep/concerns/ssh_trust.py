"""The ssh_trust concern: every node logs in to every other as the trust account, host keys checked.

Reading (``read``): the account's home, the host keys and whether the role may write its .ssh.
Intent: ``intent``. Check: ``ssh.trust`` (from the engine's logins, probes/sshmesh.py).
"""

from __future__ import annotations

import os
import pwd
import stat

from ansible.module_utils.ncclprep.model import (
    Check,
    Context,
    HostRecord,
    retried_warning,
    retry_evidence,
    verdict,
)
from ansible.module_utils.ncclprep.node.hostinfo import Runner
from ansible.module_utils.ncclprep.sysfs import read_text


def ssh_folder_problem(home: str, uid: int, names=()) -> str | None:
    """Why the role may not write into ``<home>/.ssh`` for the account with ``uid``, or None.

    Refused: a ``.ssh`` that is a symbolic link or not a folder, one owned by another account,
    and a link among ``names`` inside it (the key pair, authorized_keys). The account owns its
    home, so it can point any of these at a folder or file of root's (review F5: ``~/.ssh ->
    /usr/local/bin`` made the account owner of /usr/local/bin). This is the early, readable
    refusal; what keeps a link planted after it harmless is that the role writes ``.ssh`` as the
    account itself (review N11, roles/ssh_trust/tasks/keys.yml). An absent file is no problem,
    and neither is an absent ``.ssh`` the account can make: root's always, another account's
    when its home is a folder it owns; otherwise the problem says to make ``.ssh`` first.
    Looked at with ``lstat``, never following a link inside the home. Raises nothing."""
    folder = os.path.join(home, ".ssh")
    try:
        st = os.lstat(folder)
    except FileNotFoundError:
        return None if uid == 0 else _home_problem(home, folder, uid)
    except OSError as exc:
        return f"{folder} cannot be inspected: {exc.strerror}"
    if stat.S_ISLNK(st.st_mode):
        return f"{folder} is a symbolic link (to {os.readlink(folder)})"
    if not stat.S_ISDIR(st.st_mode):
        return f"{folder} is not a folder"
    if st.st_uid != uid:
        return f"{folder} is owned by uid {st.st_uid}, not the account's uid {uid}"
    for name in names:
        path = os.path.join(folder, name)
        if os.path.islink(path):
            return f"{path} is a symbolic link (to {os.readlink(path)})"
    return None


def _home_problem(home: str, folder: str, uid: int) -> str | None:
    """Why the account ``uid`` cannot make ``folder`` (its absent ``.ssh``) in ``home``, or None."""
    fix = f"make {folder} a folder the account owns (mode 0700) first"
    try:
        st = os.stat(home)
    except OSError as exc:
        return f"{folder} is missing and its home {home} cannot be used ({exc.strerror}): {fix}"
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid or not st.st_mode & stat.S_IWUSR:
        return (f"{folder} is missing and the account cannot make it: its home {home} is not a folder it "
                f"owns and may write (uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):04o}): {fix}")
    return None


def read_account(user: str, host_key_types=(), root: str = "", key_name: str | None = None) -> dict:
    """``{user, home, host_keys, ssh_dir_problem}``: the account's home folder from the passwd
    database (None: no such user), this node's host public keys as ``"<type> <base64>"`` (the
    first two words of /etc/ssh/ssh_host_<type>_key.pub), one per type of ``host_key_types`` that
    has a readable file, in that order: the key lines every node's known_hosts records for this
    node; and why the account's ``.ssh`` may not be written (``ssh_folder_problem``, with the key
    pair ``key_name`` and authorized_keys; None: it may)."""
    try:
        entry = pwd.getpwnam(user)
        home, uid = entry.pw_dir, entry.pw_uid
    except KeyError:
        home = uid = None
    keys = []
    for kind in host_key_types or ():
        words = (read_text(f"{root}/etc/ssh/ssh_host_{kind}_key.pub") or "").split()
        if len(words) >= 2:
            keys.append(" ".join(words[:2]))
    names = [n for n in (key_name, f"{key_name}.pub" if key_name else None, "authorized_keys") if n]
    problem = ssh_folder_problem(root + home, uid, names) if home else None
    return {"user": user, "home": home, "host_keys": keys, "ssh_dir_problem": problem}


def check(records: dict[str, HostRecord], ctx: Context) -> list[Check]:
    """ssh.trust: every node logs in to every other node, by name and by data-plane address,
    with host keys checked and no prompt.

    record ``ssh``: the engine's logins' results [{host, name, ok, cause, explanation}] run on
    that host (None: not run; no check when it ran nowhere). Links to a host without facts are
    left to host.reachable. FAIL names each link ``src -> dst`` (measured: link -> ["name: cause
    (explanation)"]); WARN, when every login passed but some only on a retry (results'
    ``retried``), names those links with the first tries' errors; PASS measures the number of
    logins.
    """
    rows = {h: r.get("ssh") for h, r in sorted(records.items()) if r.get("ssh") is not None}
    if not rows:
        return []
    alive = {h for h, r in records.items() if r.get("facts")}
    bad: dict[str, list[str]] = {}
    retried: dict[str, list[str]] = {}
    logins = failed = 0
    for src, results in rows.items():
        for res in results:
            if res.get("host") not in alive:
                continue
            logins += 1
            if not res.get("ok"):
                failed += 1
                bad.setdefault(f"{src} -> {res.get('host')}", []).append(
                    f"{res.get('name')}: {res.get('cause')} ({res.get('explanation')})")
            elif res.get("retried"):
                retried.setdefault(f"{src} -> {res.get('host')}", []).append(
                    retry_evidence(res.get("name"), res["retried"]))
    if not bad and retried:
        return [retried_warning(
            "ssh.trust", retried, expected="every login passes on its first try",
            summary=f"{sum(map(len, retried.values()))} of {logins} node-to-node SSH logins passed only on a retry",
            remediation="a transient fault (sshd's MaxStartups under a burst, a dropped packet): re-run "
                        "validate.yml; if it comes back, check sshd and the link on the named targets")]
    return [verdict("ssh.trust", bad, expected="login with host key checked, no prompt",
                    message=f"{failed} of {logins} node-to-node SSH logins failed: "
                            + "; ".join(f"{k} {', '.join(v)}" for k, v in sorted(bad.items())),
                    remediation="re-run site.yml (roles ssh_trust and host_names); a changed host key "
                                "means a reinstalled node or an impostor: check it before trusting it",
                    passed=f"{logins} node-to-node SSH logins with host keys checked, no prompt",
                    passed_measured={"logins": logins}, passed_expected=None)]


# This concern's entry in the registry (concerns/__init__.py).
SWITCH = "ssh_trust_enabled"
DATA_PLANE = False
FACTS = True
IDS = ("ssh.trust",)
OPTIONS = dict(
    user=dict(type="str", default="root"),
    host_key_types=dict(type="list", elements="str", default=[]),
    key_name=dict(type="str", no_log=False),
)


def read(run: Runner, p: dict) -> dict:
    """``read_account`` with the options of OPTIONS (checked, defaults filled)."""
    return read_account(p["user"], p["host_key_types"], key_name=p["key_name"])


#: The variables the intent is computed from (concerns.intent hands over these only).
INTENT_VARS = ("ssh_trust_user", "ssh_trust_key_name", "ssh_trust_from", "data_plane_members")
#: The facts it takes from the node: the account's home folder (read from the passwd database).
INTENT_FACTS = ("home",)


def intent(v: dict, node: dict) -> dict:
    """``{user, home, key (the cluster key's path), from (the sources allowed to log in with it:
    ssh_trust_from, else the members' addresses, comma-separated), names: {host: the names and
    address it is reached by}}`` for every member with a data-plane address."""
    members = v["data_plane_members"] or {}
    addresses = list(dict.fromkeys(m.get("address") for m in members.values() if m.get("address")))
    names = {host: list(dict.fromkeys(n for n in (host, m.get("name") or host, m.get("fqdn") or host,
                                                  m.get("address")) if n))
             for host, m in members.items() if m.get("address")}
    home = node["home"]
    return {"user": v["ssh_trust_user"], "home": home,
            "key": f"{home or '/nonexistent'}/.ssh/{v['ssh_trust_key_name']}",
            "from": v["ssh_trust_from"] or ",".join(addresses), "names": names}
