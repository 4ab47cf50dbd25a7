"""ncclprep inside Slurm: the drain and resume rules (rules), the HealthCheckProgram and Prolog
(health), root's network re-test, the Epilog (retest), and a job's claims between them (claims)."""
