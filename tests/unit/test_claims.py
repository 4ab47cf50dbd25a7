"""The claims a job's preflight leaves for root's Epilog (retest.py; review N9): the folder was mode
1733, so any user could take the names of future jobs (and so silently suppress their claims), fill
/var with files no Epilog removed, and have root read a FIFO or a file that grew after its lstat.
Now the Prolog (root) makes each job's folder for the job's user alone in root's own folder, the
Epilog reads the claim without following or waiting, at most CLAIM_MAX_BYTES + 1 bytes, and removes
the folder whole."""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
import threading
import time
from pathlib import Path

import pytest
from ansible.module_utils.ncclprep.slurm import claims, retest
from ansible.module_utils.ncclprep.slurm import health as nodehealth
from ansible.module_utils.ncclprep.slurm.claims import claim_path, take_claim, write_claim

CLAIM = {"checks": ["net.bandwidth"], "hosts": ["n3"]}
#: Another user (the squatter) and the job's user, when the tests run as root.
NOBODY, JOB_USER = 65534, 4321

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="makes files of other users (root only)")


def as_user(uid: int, func) -> str:
    """``func()`` run as ``uid`` in a forked child: its result's repr, or the name of what it raised."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        os.close(read)
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            out = repr(func())
        except BaseException as exc:  # noqa: BLE001  (any failure is the answer)
            out = type(exc).__name__
        os.write(write, out.encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as fh:
        out = fh.read()
    os.waitpid(pid, 0)
    return out


@pytest.fixture
def open_tmp():
    """A folder other users can reach (pytest's tmp_path lies under root's 0700 folder)."""
    path = tempfile.mkdtemp(prefix="ncclprep-claims-")
    os.chmod(path, 0o755)
    yield Path(path)
    shutil.rmtree(path)


def prolog(tmp_path, env: dict, monkeypatch, capsys) -> tuple[int, str]:
    """``ncclprep node prolog`` as Slurm runs it for a job: no intent here, so it cannot tell (the
    job runs); the claims folder is tmp_path/claims."""
    for name in ("SLURM_JOB_NODELIST", "SLURM_NODELIST", "SLURM_JOB_GID"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    code = nodehealth.main(["--intent", str(tmp_path / "none.json"), "--record", str(tmp_path / "none.json"),
                            "--ledger", str(tmp_path / "ledger.json"), "--node", "n1", "--claims",
                            str(tmp_path / "claims"), "--dry-run"], "prolog")
    return code, capsys.readouterr().out.strip()


@as_root
def test_no_user_takes_a_future_jobs_name_and_what_lies_there_gives_way_to_the_jobs_folder(open_tmp, monkeypatch,
                                                                                            capsys):
    tmp_path, claims = open_tmp, open_tmp / "claims"
    claims.mkdir(mode=0o755)
    # another user reaches root's folder but cannot make anything in it (the old 1733 let anyone)
    assert as_user(NOBODY, lambda: os.listdir(tmp_path)) == "['claims']"
    assert as_user(NOBODY, lambda: os.mkdir(claims / "4242")) == "PermissionError"
    assert as_user(NOBODY, lambda: open(claims / "4243", "w")) == "PermissionError"
    # what an older layout or a job whose Epilog did not run left under future jobs' names: a file,
    # a link out, a foreign folder holding a claim and a link
    (claims / "4242").write_text("{}")
    os.symlink("/etc", claims / "4243")
    (claims / "4244").mkdir()
    (claims / "4244" / "claim.json").write_text(json.dumps(dict(CLAIM, job_id="4244")))
    os.symlink("/etc/hostname", claims / "4244" / "out")
    for path in ("4242", "4243", "4244", "4244/claim.json", "4244/out"):
        os.lchown(claims / path, NOBODY, NOBODY)
    for job in ("4242", "4243", "4244"):
        code, line = prolog(tmp_path, {"SLURM_JOB_ID": job, "SLURM_JOB_UID": str(JOB_USER),
                                       "SLURM_JOB_GID": str(JOB_USER)}, monkeypatch, capsys)
        assert code == 0 and line.startswith("ncclprep prolog n1: UNKNOWN (") and line.endswith("the job runs"), line
        st = os.lstat(claims / job)
        assert stat.S_ISDIR(st.st_mode) and (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (
            JOB_USER, JOB_USER, 0o700) and os.listdir(claims / job) == []
        # the job's preflight leaves its claim, the Epilog believes it and removes the folder
        assert as_user(JOB_USER, lambda job=job: write_claim(job, CLAIM, str(claims))) == repr(
            claim_path(job, str(claims)))
        assert take_claim(job, JOB_USER, str(claims)) == (dict(CLAIM, job_id=job), f"job {job} claims net.bandwidth")
        assert not os.path.lexists(claims / job)
    assert os.path.exists("/etc/hostname") and os.path.isdir("/etc")
    assert os.listdir(claims) == []


def test_the_prolog_never_fails_the_job_for_the_claims_folder_and_says_when_none_can_be_left(tmp_path, monkeypatch,
                                                                                              capsys):
    job = {"SLURM_JOB_ID": "51", "SLURM_JOB_UID": str(os.getuid())}
    # no claims folder here (the Epilog is not wired in): nothing to say
    code, line = prolog(tmp_path, job, monkeypatch, capsys)
    assert code == 0 and line.endswith("does not exist: run site.yml on this node first (it writes the intent)): the "
                                       "job runs"), line
    # a folder others may write (the old layout, before site.yml ran again): refused, said, the job runs
    (tmp_path / "claims").mkdir()
    os.chmod(tmp_path / "claims", 0o1733)
    code, line = prolog(tmp_path, job, monkeypatch, capsys)
    assert code == 0 and line.endswith(
        f"the job runs; no claim can be left for the Epilog ({tmp_path / 'claims'} is not root's alone (uid "
        f"{os.geteuid()}, mode 1733; valid: root's, 0755): run site.yml (role slurm_health))")
    assert os.listdir(tmp_path / "claims") == []
    os.chmod(tmp_path / "claims", 0o755)
    assert prolog(tmp_path, job, monkeypatch, capsys)[1].endswith("the job runs")
    assert os.path.isdir(tmp_path / "claims" / "51")
    # not run by Slurm (no job id): nothing made
    assert prolog(tmp_path, {"SLURM_JOB_ID": "", "SLURM_JOB_UID": ""}, monkeypatch, capsys)[0] == 0
    assert os.listdir(tmp_path / "claims") == ["51"]


def _claim_file(folder: str, job: str) -> str:
    """The claim's path, its folder made as the Prolog makes it (this user's)."""
    path = claim_path(job, folder)
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    return path


def _lie_about(monkeypatch, path: str, fstat_too: bool) -> None:
    """os.lstat (and ``fstat_too``: os.fstat) of ``path`` report a regular file of 100 bytes of this
    user's, as they did a moment before a FIFO was swapped in or the file grew."""
    real_lstat, real_fstat = os.lstat, os.fstat

    def small(st):
        fields = list(st)
        fields[stat.ST_MODE], fields[stat.ST_SIZE] = stat.S_IFREG | 0o600, 100
        return os.stat_result(fields)

    def lstat(p, *args, **kwargs):
        st = real_lstat(p, *args, **kwargs)
        return small(st) if os.fspath(p) == path and not kwargs.get("dir_fd") else st

    def fstat(fd):
        st = real_fstat(fd)
        try:
            mine = os.readlink(f"/proc/self/fd/{fd}") == os.path.realpath(path)
        except OSError:
            mine = False
        return small(st) if mine and stat.S_ISREG(st.st_mode) else st

    monkeypatch.setattr(os, "lstat", lstat)
    if fstat_too:
        monkeypatch.setattr(os, "fstat", fstat)


def _take_within(job: str, folder: str, seconds: float, path: str) -> tuple:
    """take_claim in a thread, given ``seconds``: ``(its answer or None when still waiting, seconds)``.
    A take still waiting on a FIFO is let go (a writer opens and closes it) before this returns."""
    out: list = []
    start = time.monotonic()
    reader = threading.Thread(target=lambda: out.append(take_claim(job, os.getuid(), folder)), daemon=True)
    reader.start()
    reader.join(seconds)
    took = time.monotonic() - start
    if reader.is_alive():
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass
        reader.join(5)
        return None, took
    return out[0], took


def test_a_fifo_swapped_in_after_the_look_is_refused_within_a_second(tmp_path, monkeypatch):
    folder = str(tmp_path / "claims")
    path = _claim_file(folder, "61")
    os.mkfifo(path, 0o600)
    _lie_about(monkeypatch, path, fstat_too=False)
    answer, took = _take_within("61", folder, 1.0, path)
    assert answer is not None and took < 1.0, "root's Epilog waited on a FIFO"
    assert answer == (None, f"{path} is not a regular file: ignored")
    assert not os.path.lexists(os.path.dirname(path)) or not os.path.lexists(path)


def test_a_claim_that_grows_after_the_look_is_read_no_further_than_the_bound(tmp_path, monkeypatch):
    folder = str(tmp_path / "claims")
    path = _claim_file(folder, "62")
    with open(path, "w", encoding="utf-8") as fh:  # a valid claim, then 4 MB more
        fh.write(json.dumps(dict(CLAIM, job_id="62")) + " " * (4 << 20))
    _lie_about(monkeypatch, path, fstat_too=True)
    read = []
    real_read = os.read
    monkeypatch.setattr(os, "read", lambda fd, n: read.append(n) or real_read(fd, n))
    answer, took = _take_within("62", folder, 1.0, path)
    assert answer == (None, f"{path} holds more than {claims.CLAIM_MAX_BYTES} bytes: ignored")
    assert took < 1.0 and sum(read) <= claims.CLAIM_MAX_BYTES + 1 + 8192
    # an oversized claim plainly seen
    path = _claim_file(folder, "63")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(dict(CLAIM, job_id="63")) + " " * claims.CLAIM_MAX_BYTES)
    assert take_claim("63", os.getuid(), folder)[0] is None
    # small, but nested past the JSON parser's depth: refused, not a crash
    path = _claim_file(folder, "64")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("[" * 30000 + "]" * 30000)
    claim, why = take_claim("64", os.getuid(), folder)
    assert claim is None and "recursion" in why and why.endswith(": ignored")
    assert os.listdir(folder) == []


@as_root
def test_a_claim_in_a_folder_not_the_jobs_users_is_ignored(tmp_path):
    folder = str(tmp_path / "claims")
    path = _claim_file(folder, "71")
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(dict(CLAIM, job_id="71"), fh)
    os.chown(path, JOB_USER, JOB_USER)  # the claim is the job's user's, the folder someone else's
    os.chown(os.path.dirname(path), NOBODY, NOBODY)
    assert take_claim("71", JOB_USER, folder) == (
        None, f"{folder}/71 belongs to uid {NOBODY}, not the job's user ({JOB_USER}): ignored")
    assert not os.path.lexists(os.path.dirname(path))


def test_the_epilog_removes_the_jobs_folder_whole_and_follows_no_link(tmp_path, capsys):
    folder = tmp_path / "claims"
    outside = tmp_path / "outside"
    (outside / "keep").mkdir(parents=True)
    (outside / "keep" / "file").write_text("x")
    folder.mkdir()
    for job, claim in (("81", {"not": "a claim"}), ("82", dict(CLAIM, job_id="82"))):
        assert claims.open_claims(job, os.getuid(), folder=str(folder)) is None
        with open(claim_path(job, str(folder)), "w", encoding="utf-8") as fh:
            json.dump(claim, fh)
        deep = folder / job / "a" / "b"
        deep.mkdir(parents=True)
        (deep / "c").write_text("y")
        os.mkfifo(folder / job / "fifo")
        os.symlink(outside / "keep", folder / job / "a" / "link")
        env = {"SLURM_JOB_ID": job, "SLURM_JOB_UID": str(os.getuid()), "SLURM_NODELIST": "n1",
               "SLURMD_NODENAME": "n1"}
        assert retest.main(["--claims", str(folder), "--taken", str(tmp_path / "taken"), "--intent",
                            str(tmp_path / "none.json")], "epilog", env) == 0
        line = capsys.readouterr().out.strip()
        assert line.startswith(f"ncclprep epilog n1: job {job}: ") or line.startswith("ncclprep epilog n1: "), line
        assert not os.path.lexists(folder / job), line
    assert (outside / "keep" / "file").read_text() == "x"
    assert os.listdir(folder) == []
