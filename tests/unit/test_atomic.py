"""atomic.write_atomic, the one atomic write of the report, the node check's record and the core zip."""

from __future__ import annotations

import os
import stat

import pytest
from ansible.module_utils.ncclprep.atomic import write_atomic


def test_text_and_bytes_land_whole_with_the_mode_and_no_temp_file_left(tmp_path):
    path = tmp_path / "record.json"
    write_atomic(str(path), "é\n", mode=0o600)
    assert path.read_bytes() == "é\n".encode() and stat.S_IMODE(path.stat().st_mode) == 0o600
    write_atomic(str(path), b"\x00\x01")
    assert path.read_bytes() == b"\x00\x01" and stat.S_IMODE(path.stat().st_mode) == 0o644
    assert os.listdir(tmp_path) == ["record.json"]


def test_a_failed_write_keeps_the_old_file_and_removes_the_temp_file(tmp_path):
    path = tmp_path / "cluster.json"
    path.write_text("old")
    with pytest.raises(TypeError):
        write_atomic(str(path), 42)  # neither text nor bytes: fails while writing the temp file
    assert path.read_text() == "old" and os.listdir(tmp_path) == ["cluster.json"]
