# Pure Python shared by ncclprep's modules (shipped to the nodes by Ansible),
# its filter plugins and CLI (on the controller) and the tests.
# Import it everywhere as ``ansible.module_utils.ncclprep.<name>``; see
# docs/layout.md (Imports) for how the controller side finds it.
