"""What `ncclprep tune` decides with: the decision rule and its schedule (decide), NCCL tuner CSVs (tuner_csv)."""
