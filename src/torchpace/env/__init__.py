"""`torchpace env`: the facts every later report starts with.

Facts are read, never guessed: a field that cannot be read is None in JSON and "unknown"
in the table.

The package's ``__init__`` imports nothing: `torchpace run` reads the CPU's name through
``env.cpu`` before the user's script starts, and the rest of the facts (``env.facts``) would
add to every tuned job's start-up.
"""
