"""The names of the files a run folder holds, defined once for every verb that writes or
reads one (the capture child, doctor, tune, compare, launch --doctor)."""

SPEC = "capture_spec.json"  # the parent -> child contract (capture/spec.py)
FACTS = "run_facts.json"  # what the capture saw (facts/run.py)
TRACE = "trace.json.gz"  # the profiler's trace of the window
PROFILER_LOG = "profiler.log"  # the profiler's own C++ log lines
SCRIPT_OUTPUT = "output.log"  # the script's stdout/stderr in a tune trial
DOCTOR_REPORT = "doctor_report.json"
TUNE_REPORT = "tune_report.json"
HTML_REPORT = "report.html"  # doctor's, tune's and compare's page
TUNE_CONFIG = "torchpace.toml"  # tune's kept configuration
TUNE_DIFF = "changes.diff"  # tune's configuration as a source edit
