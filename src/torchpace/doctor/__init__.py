"""torchpace doctor: profile an unmodified training script and say what makes it slow."""
