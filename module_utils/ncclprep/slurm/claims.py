"""A job's claim of a network fault, from its preflight to root's Epilog (retest.py): where it is
left, who may leave it, how root takes it. Module docstring of retest.py, first paragraphs: the
job's preflight runs as the job's user, so what it finds is a claim; each task leaves it in
``CLAIMS_DIR/<job id>/claim.json`` (``write_claim``), in the folder root's Prolog made for the job's
user alone (``prolog_claims``, ``open_claims``); root's Epilog takes it (``take_claim``) and hands
what it believed to its own second run (``hand_over``, ``taken_over``). Only files and folders:
node/preflight.py, slurm/health.py and slurm/retest.py read and write claims through here."""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Mapping

from ansible.module_utils.ncclprep.atomic import read_once, write_atomic
from ansible.module_utils.ncclprep.checks import BAD
from ansible.module_utils.ncclprep.slurm import rules as slurm

#: Root's folder (0755, made by the slurm_health role) of the jobs' claims folders: ``<job id>/``,
#: the job's user's (0700), made by the Prolog and removed by the Epilog.
CLAIMS_DIR = "/var/spool/ncclprep/claims"
#: The claim's name in its job's folder.
CLAIM_FILE = "claim.json"
#: Largest claim read, bytes (a claim lists check ids and host names).
CLAIM_MAX_BYTES = 65536
#: Most levels of folders the Epilog removes under a job's claims folder (one open descriptor
#: each); a folder its user nested deeper stays, and the Epilog's line says so.
CLAIM_MAX_DEPTH = 128
#: Root's folder (0700) of the claims the Epilog took, for its second run: ``<job id>``, read once.
TAKEN_DIR = "/var/lib/ncclprep/taken"
_JOB_ID = re.compile(r"^[0-9]+(_[0-9]+)?$")
#: A check id as a claim may name it (written to root's Epilog log: no control characters).
_CHECK_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")


def _checked(job_id: str) -> str:
    """``job_id`` when it is Slurm's (digits, or ``digits_digits`` for an array task): no path is
    built from anything else. Raises ValueError."""
    if not _JOB_ID.match(str(job_id)):
        raise ValueError(f"job id {job_id!r}: not a Slurm job id")
    return str(job_id)


def claim_path(job_id: str, folder: str = CLAIMS_DIR) -> str:
    """The claim file of ``job_id``: ``folder/<job id>/claim.json``. Raises ValueError for an id
    that is not Slurm's."""
    return os.path.join(folder, _checked(job_id), CLAIM_FILE)


def _remove(dir_fd: int, name: str, depth: int = 0) -> None:
    """Remove ``name`` of the folder open at ``dir_fd`` whole, following no link: a file, a link or
    a FIFO is unlinked, a folder emptied the same way (at most CLAIM_MAX_DEPTH levels) and removed;
    every step names its entry relative to an open folder, so a link swapped in anywhere is
    removed, never followed. Nothing there is fine. Raises OSError."""
    try:
        os.unlink(name, dir_fd=dir_fd)
        return
    except FileNotFoundError:
        return
    except (IsADirectoryError, PermissionError):  # a folder (Linux says EISDIR, POSIX allows EPERM)
        pass
    if depth >= CLAIM_MAX_DEPTH:
        raise OSError(f"{name}: more than {CLAIM_MAX_DEPTH} levels of folders")
    fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
    try:
        for entry in os.listdir(fd):
            _remove(fd, entry, depth + 1)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=dir_fd)


def open_claims(job_id: str, uid: int, gid: int = -1, folder: str = CLAIMS_DIR) -> str | None:
    """Make ``folder/<job id>/`` for the job's user ``uid`` (group ``gid``; -1 leaves root's),
    mode 0700, in place of whatever lies under that name (a folder left by a job whose Epilog did
    not run): root's Prolog, before the job's tasks start. ``folder`` must be root's and
    writable by no one else (the slurm_health role makes it 0755), so no other user can take the
    name first. Returns None when made, else why no claim can be left. Raises nothing."""
    try:
        name = _checked(job_id)
        dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except (OSError, ValueError) as exc:
        return f"{folder}: {exc}"
    path = os.path.join(folder, name)
    try:
        st = os.fstat(dir_fd)
        if st.st_uid != os.geteuid() or st.st_mode & 0o022:
            return (f"{folder} is not root's alone (uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):o}; valid: "
                    "root's, 0755): run site.yml (role slurm_health)")
        _remove(dir_fd, name)
        os.mkdir(name, 0o700, dir_fd=dir_fd)
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
        try:
            os.fchown(fd, uid, gid)
            os.fchmod(fd, 0o700)
        finally:
            os.close(fd)
        return None
    except OSError as exc:
        return f"{path}: {exc.strerror or exc}"
    finally:
        os.close(dir_fd)


def prolog_claims(env: Mapping[str, str], folder: str = CLAIMS_DIR) -> str | None:
    """The Prolog's part in the claims: the job's folder (``open_claims``) from Slurm's Prolog
    environment (SLURM_JOB_ID, SLURM_JOB_UID, SLURM_JOB_GID). None when made or when there is
    nothing to make (not run by Slurm, no claims folder here: the Epilog is not wired in), else
    why no claim can be left. Raises nothing."""
    if not env.get("SLURM_JOB_ID") or not env.get("SLURM_JOB_UID") or not os.path.isdir(folder):
        return None
    try:
        uid, gid = int(env["SLURM_JOB_UID"]), int(env.get("SLURM_JOB_GID") or -1)
    except ValueError:
        return f"SLURM_JOB_UID={env['SLURM_JOB_UID']!r}, SLURM_JOB_GID={env.get('SLURM_JOB_GID')!r}: not numbers"
    return open_claims(env["SLURM_JOB_ID"], uid, gid, folder)


def claim_of(checks: list[Mapping]) -> dict | None:
    """What a job's preflight claims (``{checks: [id], hosts: [name]}``): its failed or hung
    network checks (slurm.is_network) and the hosts they name; None when no network check failed."""
    bad = [c for c in checks if c.get("status") in BAD and slurm.is_network(c)]
    if not bad:
        return None
    return {"checks": sorted({str(c["id"]) for c in bad}), "hosts": sorted({str(h) for c in bad for h in c["hosts"]})}


def write_claim(job_id: str, claim: Mapping, folder: str = CLAIMS_DIR) -> str | None:
    """Leave ``claim`` for this node's Epilog (as the job's user) in the job's folder the Prolog
    made: the path written, or None when there is no such folder (the slurm_health concern or its
    Prolog is off, or the Prolog could not make it) or it refuses the file. Raises nothing."""
    try:
        path = claim_path(job_id, folder)
        if not os.path.isdir(os.path.dirname(path)):
            return None
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(dict(claim, job_id=str(job_id)), fh)
        return path
    except (OSError, ValueError):
        return None


def take_claim(job_id: str, uid: int, folder: str = CLAIMS_DIR) -> tuple[dict | None, str]:
    """The job's claim on this node: ``(claim, why)``; claim None when there is none or it is not
    to be believed: its folder or the claim not the job's user's (``uid``), the claim not a
    regular file (a link, a FIFO: opened without following or waiting), larger than
    CLAIM_MAX_BYTES (at most CLAIM_MAX_BYTES + 1 bytes are read, also from a file that grows), not
    JSON naming this job. The job's folder is removed whole, whatever it held. Raises nothing."""
    try:
        name = _checked(job_id)
        dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except ValueError as exc:
        return None, str(exc)
    except OSError:
        return None, "no claim"
    try:
        claim, why = _read_claim(dir_fd, name, uid, os.path.join(folder, name))
        try:
            _remove(dir_fd, name)
        except OSError as exc:
            why += f"; {os.path.join(folder, name)} not removed: {exc}"
        return claim, why
    finally:
        os.close(dir_fd)


def _read_claim(dir_fd: int, job_id: str, uid: int, where: str) -> tuple[dict | None, str]:
    """take_claim's reading of ``<job id>/claim.json`` in the folder open at ``dir_fd``."""
    path = os.path.join(where, CLAIM_FILE)
    try:
        job_fd = os.open(job_id, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
    except FileNotFoundError:
        return None, "no claim"
    except OSError as exc:
        return None, f"{where} is not a folder ({exc.strerror}): ignored"
    try:
        st = os.fstat(job_fd)
        if st.st_uid != uid:
            return None, f"{where} belongs to uid {st.st_uid}, not the job's user ({uid}): ignored"
        try:
            fd = os.open(CLAIM_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY, dir_fd=job_fd)
        except FileNotFoundError:
            return None, "no claim"
        except OSError as exc:  # ELOOP: a link; ENXIO: a socket
            return None, f"{path} is not a regular file ({exc.strerror}): ignored"
        with os.fdopen(fd, "rb") as fh:
            st = os.fstat(fh.fileno())
            if not stat.S_ISREG(st.st_mode):
                return None, f"{path} is not a regular file: ignored"
            if st.st_uid != uid:
                return None, f"{path} belongs to uid {st.st_uid}, not the job's user ({uid}): ignored"
            if st.st_size > CLAIM_MAX_BYTES:
                return None, f"{path} is {st.st_size} bytes (at most {CLAIM_MAX_BYTES}): ignored"
            data = fh.read(CLAIM_MAX_BYTES + 1)
        if len(data) > CLAIM_MAX_BYTES:
            return None, f"{path} holds more than {CLAIM_MAX_BYTES} bytes: ignored"
        claim = json.loads(data)
        if not isinstance(claim, dict) or str(claim.get("job_id")) != job_id \
                or not isinstance(claim.get("checks"), list) or not claim["checks"]:
            return None, f"{path} is not a claim of job {job_id}: ignored"
        checks = [c for c in claim["checks"]
                  if isinstance(c, str) and _CHECK_ID.match(c) and slurm.is_network({"id": c})]
        if not checks:  # only a network check is the re-test's to judge; the ids reach root's log
            return None, f"{path} names no network check: ignored"
        return dict(claim, checks=checks), f"job {job_id} claims {', '.join(checks)}"
    except (OSError, ValueError, RecursionError) as exc:  # RecursionError: JSON nested past the parser's depth
        return None, f"{path}: {exc}: ignored"
    finally:
        os.close(job_fd)


def hand_over(job_id: str, why: str, folder: str = TAKEN_DIR) -> None:
    """Leave the claim the Epilog believed (``why``, its one line) for its second run under the
    torch runtime, in root's folder. Raises OSError or ValueError (not a Slurm job id)."""
    path = os.path.join(folder, f"{_checked(job_id)}.json")
    os.makedirs(folder, mode=0o700, exist_ok=True)
    os.chmod(folder, 0o700)
    write_atomic(path, why[:1024], mode=0o600)


def taken_over(job_id: str, folder: str = TAKEN_DIR) -> str | None:
    """The claim ``hand_over`` left for ``job_id``, removed (atomic.read_once); None when there is
    none or it is not root's own (a regular file of this process's user, in a folder only it can
    write). Raises nothing."""
    try:
        path = os.path.join(folder, f"{_checked(job_id)}.json")
        folder_st = os.lstat(folder)
        if folder_st.st_uid != os.geteuid() or folder_st.st_mode & 0o022 or not stat.S_ISDIR(folder_st.st_mode):
            return None
        return read_once(path, 1024).decode("utf-8", "replace") or None
    except (OSError, ValueError):
        return None
