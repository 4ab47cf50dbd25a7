"""host_names' other lines (concerns/host_names.py ``others``): one name, one address in /etc/hosts."""

from __future__ import annotations

from ansible.module_utils.ncclprep.concerns.host_names import others

MARKER = "# {mark} ncclprep host_names (managed by Ansible)"
BLOCK = ("# BEGIN ncclprep host_names (managed by Ansible)\n10.77.29.11 node1\n10.77.29.12 node2\n"
         "# END ncclprep host_names (managed by Ansible)\n")
NAMES = ["node1", "node2"]


def test_the_installers_loopback_line_is_commented_out_and_said():
    text = "127.0.0.1\tlocalhost\n127.0.1.1\tnode2\n" + BLOCK
    got = others(text, NAMES, MARKER)
    assert got["text"] == ("127.0.0.1\tlocalhost\n# 127.0.1.1\tnode2  # ncclprep host_names: node2 mapped in "
                           "its block\n" + BLOCK)
    assert got["replaced"] == ["line 2: '127.0.1.1 node2' -> '# 127.0.1.1 node2 # ncclprep host_names: node2 "
                               "mapped in its block'"]
    # the result is left as it is: nothing more to take
    assert others(got["text"], NAMES, MARKER) == {"text": got["text"], "replaced": []}


def test_a_line_keeps_its_other_names_and_comment_and_names_compare_without_case():
    text = "10.0.0.9 Node1 storage1 # old provisioning\n" + BLOCK
    got = others(text, NAMES, MARKER)
    assert got["text"] == "10.0.0.9\tstorage1 # old provisioning\n" + BLOCK
    assert got["replaced"] == ["line 1: '10.0.0.9 Node1 storage1 # old provisioning' -> "
                               "'10.0.0.9 storage1 # old provisioning'"]


def test_the_block_comments_blank_lines_and_other_names_are_not_touched():
    text = "# node1 is the head\n\n::1 localhost ip6-localhost\n10.0.0.5 login1\n" + BLOCK + "10.0.0.6 node10"
    assert others(text, NAMES, MARKER) == {"text": text, "replaced": []}
    # the same line as the block's, above it (podman's own): taken off, the block's kept
    text = "10.77.29.11\tnode1 ncclprep-node1\n" + BLOCK
    got = others(text, NAMES, MARKER)
    assert got["text"] == "10.77.29.11\tncclprep-node1\n" + BLOCK


def test_a_file_without_the_block_yet_loses_the_names_the_block_will_map():
    text = "127.0.0.1 localhost\n127.0.1.1 node1.cluster.example node1\n"
    got = others(text, ["node1.cluster.example", "node1"], MARKER)
    assert got["text"] == ("127.0.0.1 localhost\n# 127.0.1.1 node1.cluster.example node1  # ncclprep host_names: "
                           "node1.cluster.example node1 mapped in its block\n")
