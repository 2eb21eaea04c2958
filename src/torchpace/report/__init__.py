"""Reports: the doctor's terminal view (rich) and its JSON."""
