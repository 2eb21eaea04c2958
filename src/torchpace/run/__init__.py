"""`torchpace run`: the user's script with a tuned configuration applied, nothing else."""
