"""What a node runs to measure: the network probe (net), the collectives (collectives), their blame
(collective_blame, blame), the pair rounds (schedule), busbw, the training smoke job's reading (smoke),
the SSH logins (sshmesh) and the probe job that runs the collectives and their blame (job)."""
