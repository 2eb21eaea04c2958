"""`torchpace tune`: try each applicable knob on the unmodified script in fresh processes,
keep what is measurably faster with the loss intact, and write the configuration."""
