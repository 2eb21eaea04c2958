"""The exit codes every torchpace verb shares, so that scripts calling torchpace can tell a
bad command line from a failed run without reading the messages."""

EXIT_OK = 0
EXIT_FAILURE = 1  # the run failed, or --fail-on matched a finding
EXIT_USAGE = 2  # the command line names something that cannot be run (what argparse uses)
EXIT_INTERRUPTED = 130  # Ctrl-C, as a shell reports SIGINT (128 + 2)
# The capture child's own: torchpace failed before the script ran (the runner says so
# instead of blaming the script).
EXIT_INTERNAL = 70
# The capture child's own: torchpace could not write one of its own files (a full disk);
# the script is not at fault (74: EX_IOERR).
EXIT_OWN_WRITE = 74
