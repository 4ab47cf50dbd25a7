"""One node read and judged without Ansible: what node_facts reads (read), `ncclprep node check`
(check), the commands it runs (hostinfo), the data path (dataset), software versions (versions)."""
