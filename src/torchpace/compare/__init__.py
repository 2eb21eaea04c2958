"""`torchpace compare A B`: two doctor runs (or traces) side by side, and a CI gate on the
step time."""
